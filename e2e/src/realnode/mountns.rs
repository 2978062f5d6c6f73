//! The node's own mount namespace: the kubelet and containerd run in it, so the paths a
//! real node's software takes for granted are the node's own, not the machine's.
//!
//! Inside it, the host's folders are bind-mounted over the machine's: `/run`, `/var/lib`
//! and `/var/log` (containerd's state, the kubelet's hard-coded
//! `/var/lib/kubelet/device-plugins` and `/var/log/containers`, hostPath volumes such as
//! the weight store at `/var/lib/hcomm`), so two nodes never share one, and what a node
//! keeps there is the host folder the testbed reads (its agent's files are at the same
//! place in both views). The kubelet root ([`KUBELET_ROOT`]) is made a shared mount, which the kubelet's
//! `HostToContainer` propagation needs. The kubelet also writes machine-wide sysctls
//! (`kernel/panic`, `vm/overcommit_memory`, ...; `protectKernelDefaults` only makes it
//! refuse to start instead): each is masked by a file holding the value the kubelet wants,
//! so it finds nothing to change and the machine keeps its own.
//!
//! Its `/sys` is the host network namespace's (as `ip netns exec` mounts it), with the
//! machine's cgroup tree moved onto it: the kubelet finds its cgroups, and a process of the
//! node (the agent, the hccn_tool simulator) sees the host's NICs.
//!
//! The namespace outlives the processes in it (bound at a file, as `ip netns` does for
//! network namespaces) and ends when [`MountNs`] drops, with every mount made in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::{Error, Result};

/// Where the namespaces' files are bound: a private mount, as `unshare --mount=FILE`
/// requires of the file's parent.
pub const NS_DIR: &str = "/run/hcomm-realnode";

/// Below the masks folder: where the cgroup tree waits while `/sys` is mounted anew.
const CGROUP_HOLD: &str = "cgroup-hold";

/// The kubelet's root inside the node (its `--root-dir`, the chart's `kubeletRootDir`):
/// the same path on every node, the host's `var/lib/kubelet` on disk.
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";

/// The sysctls the kubelet sets (`pkg/kubelet/cm/container_manager_linux.go`,
/// `setupKernelTunables`) with the values it wants, masked inside the namespace.
const KUBELET_SYSCTLS: &[(&str, &str)] = &[
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

/// A node's mount namespace.
#[derive(Debug)]
pub struct MountNs {
    file: PathBuf,
}

/// What to mount inside a node's namespace.
#[derive(Debug, Clone)]
pub struct NodeMounts<'a> {
    /// The host's network namespace (`/run/netns/<netns>`): the node's `/sys` is its.
    pub netns: &'a str,
    /// The host's folder holding its `run`, `var/lib` and `var/log`.
    pub host_root: &'a Path,
    /// A folder of the node's own for the sysctl masks (and, for a moment, the cgroup
    /// tree while `/sys` is mounted anew).
    pub masks: &'a Path,
}

impl MountNs {
    /// Creates the namespace bound at `NS_DIR/<name>` and mounts `mounts` in it.
    pub fn create(name: &str, mounts: &NodeMounts<'_>) -> Result<MountNs> {
        prepare_ns_dir()?;
        let file = Path::new(NS_DIR).join(name);
        // A killed run's namespace at the same name: unbind it first.
        let _ = run("umount", &[file.to_str().unwrap_or_default()]);
        std::fs::write(&file, b"").map_err(Error::io("create", &file))?;
        for dir in ["run", "var/lib", "var/log"] {
            let d = mounts.host_root.join(dir);
            std::fs::create_dir_all(&d).map_err(Error::io("create", &d))?;
        }
        let kubelet = mounts.host_root.join("var/lib/kubelet");
        std::fs::create_dir_all(&kubelet).map_err(Error::io("create", &kubelet))?;
        std::fs::create_dir_all(mounts.masks).map_err(Error::io("create", mounts.masks))?;
        for (key, value) in KUBELET_SYSCTLS {
            let mask = mounts.masks.join(key.replace('/', "."));
            std::fs::write(&mask, format!("{value}\n")).map_err(Error::io("write", &mask))?;
        }
        std::fs::create_dir_all(mounts.masks.join(CGROUP_HOLD))
            .map_err(Error::io("create", mounts.masks))?;
        let ns = MountNs { file };
        let net = format!("--net=/run/netns/{}", mounts.netns);
        let mnt = format!("--mount={}", ns.file.display());
        run(
            "nsenter",
            &[
                &net,
                "--",
                "unshare",
                &mnt,
                "--propagation",
                "private",
                "sh",
                "-ec",
                &setup_script(mounts),
            ],
        )?;
        Ok(ns)
    }

    /// The file the namespace is bound at (`nsenter --mount=<file>`).
    pub fn file(&self) -> &Path {
        &self.file
    }
}

impl Drop for MountNs {
    fn drop(&mut self) {
        // Lazily: a process still inside keeps it until it exits.
        let _ = run("umount", &["-l", self.file.to_str().unwrap_or_default()]);
        let _ = std::fs::remove_file(&self.file);
    }
}

/// The shell run inside the new namespace.
fn setup_script(m: &NodeMounts<'_>) -> String {
    let root = m.host_root.display();
    let hold = m.masks.join(CGROUP_HOLD);
    let hold = hold.display();
    let mut script = format!(
        // `/sys` as the host's network namespace shows it (its NICs in /sys/class/net, as
        // `ip netns exec` mounts it), with the machine's cgroup tree moved over onto it.
        "mount --rbind /sys/fs/cgroup {hold}\nmount -t sysfs sysfs /sys\nmount --move {hold} /sys/fs/cgroup\n"
    );
    // The copied mounts of other network and mount namespaces' files would keep those
    // namespaces alive as long as this one: dropped.
    script.push_str(
        "for m in $(awk '$3 == \"nsfs\" {print $2}' /proc/self/mounts); do umount -l \"$m\" || true; done\n",
    );
    for (key, _) in KUBELET_SYSCTLS {
        let mask = m.masks.join(key.replace('/', "."));
        script.push_str(&format!(
            "mount --bind {} /proc/sys/{key}\n",
            mask.display()
        ));
    }
    for dir in ["run", "var/lib", "var/log"] {
        script.push_str(&format!("mount --bind {root}/{dir} /{dir}\n"));
    }
    script.push_str(&format!(
        "mount --bind {KUBELET_ROOT} {KUBELET_ROOT}\nmount --make-shared {KUBELET_ROOT}\n"
    ));
    script
}

/// Makes [`NS_DIR`] a private mount (once per boot).
fn prepare_ns_dir() -> Result<()> {
    let dir = Path::new(NS_DIR);
    std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(NS_DIR));
    if !mounted {
        run("mount", &["--bind", NS_DIR, NS_DIR])?;
    }
    run("mount", &["--make-private", NS_DIR]).map(drop)
}

/// Runs a command to completion; its stderr in the error.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::MissingProgram {
                program: program.to_owned(),
            },
            _ => Error::Command {
                command: command.clone(),
                message: e.to_string(),
            },
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            command,
            message: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_masks_every_kubelet_sysctl_and_binds_the_hosts_folders() {
        let s = setup_script(&NodeMounts {
            netns: "hcs1-h0",
            host_root: Path::new("/tb/hosts/host-0"),
            masks: Path::new("/tb/nodes/host-0/sysctl"),
        });
        for (key, _) in KUBELET_SYSCTLS {
            assert!(s.contains(&format!("/proc/sys/{key}\n")), "{key} masked");
        }
        assert!(s.contains("mount --bind /tb/hosts/host-0/var/lib /var/lib\n"));
        assert!(s.contains("mount --make-shared /var/lib/kubelet\n"));
        // The masks go on before anything that could start the kubelet.
        assert!(s.find("/proc/sys/").unwrap() < s.find("/var/lib /var/lib").unwrap());
    }
}
