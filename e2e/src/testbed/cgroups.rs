//! Per-Pod cgroups for the process kubelet: a real kubelet runs every container of a Pod
//! below a `pod<uid>` cgroup, and the agent identifies local-API callers by exactly that
//! (`hcomm_agent::local_api::caller`). So the testbed puts each Pod's processes in
//! `<cgroup2 mount>/hcomm-testbed-<pid>/kubepods/pod<uid>` (cgroupfs spelling), and the
//! agents' caller check runs for real in the end-to-end tests.
//!
//! Needs root and a writable cgroup v2 hierarchy; without one the testbed says so and
//! starts its agents with `--local-api-callers=unchecked` (see [`available`]). The move
//! happens before the program runs (`sh -c 'echo $$ > cgroup.procs; exec …'`), so no
//! process of a Pod ever runs outside its cgroup.

use std::path::PathBuf;

/// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid
/// hosts), from `/proc/self/mountinfo`.
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// The Pods' cgroups of one testbed; removed (when empty) on drop.
#[derive(Debug)]
pub struct PodCgroups {
    root: PathBuf,
}

impl PodCgroups {
    /// Creates this process's testbed cgroup, or says why it cannot.
    pub fn create() -> Result<PodCgroups, String> {
        let mount = cgroup2_mount().ok_or("no cgroup v2 hierarchy is mounted")?;
        let root = mount.join(format!("hcomm-testbed-{}", std::process::id()));
        std::fs::create_dir_all(root.join("kubepods"))
            .map_err(|e| format!("create {}: {e}", root.display()))?;
        Ok(PodCgroups { root })
    }

    /// The cgroup of the Pod with `uid`.
    pub fn dir_of(&self, uid: &str) -> PathBuf {
        self.root.join("kubepods").join(format!("pod{uid}"))
    }

    /// The command line `argv` (program first) as one that first moves itself into the
    /// Pod's cgroup (created here) and then becomes `argv`: `sh -c …` first.
    pub fn wrap(&self, uid: &str, argv: &[String]) -> Result<Vec<String>, String> {
        let dir = self.dir_of(uid);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let mut line = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            r#"echo $$ > "$0" && exec "$@""#.to_owned(),
            dir.join("cgroup.procs").display().to_string(),
        ];
        line.extend(argv.iter().cloned());
        Ok(line)
    }

    /// Removes a Pod's cgroup once its processes are gone (best effort: a process still
    /// exiting keeps it until the testbed ends).
    pub fn remove(&self, uid: &str) {
        let _ = std::fs::remove_dir(self.dir_of(uid));
    }
}

impl Drop for PodCgroups {
    fn drop(&mut self) {
        if let Ok(pods) = std::fs::read_dir(self.root.join("kubepods")) {
            for p in pods.flatten() {
                let _ = std::fs::remove_dir(p.path());
            }
        }
        let _ = std::fs::remove_dir(self.root.join("kubepods"));
        let _ = std::fs::remove_dir(&self.root);
    }
}

/// Whether Pods can get their own cgroups here; `Err` says why not.
pub fn available() -> Result<(), String> {
    PodCgroups::create().map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_process_runs_in_its_pods_cgroup() {
        let root = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
        let cg = match PodCgroups::create() {
            Ok(c) => c,
            // The testbed then runs its agents unchecked and says so; as root (how CI
            // runs) it must work.
            Err(e) => {
                assert!(!root, "root but no Pod cgroups: {e}");
                return;
            }
        };
        let uid = "0b9f4c1e-2d3a-4b5c-8d7e-9f0a1b2c3d4e";
        let argv = cg
            .wrap(uid, &["cat".to_owned(), "/proc/self/cgroup".to_owned()])
            .unwrap();
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("/kubepods/pod{uid}")),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cg.remove(uid);
        assert!(!cg.dir_of(uid).exists());
    }
}
