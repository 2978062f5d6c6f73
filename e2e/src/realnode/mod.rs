//! Real nodes: a simulated host that runs a real kubelet and containerd, registers its
//! Node with the real API server and runs Pods as real containers on a real CNI network.
//!
//! Per host ([`RealNode::start`]):
//!
//! - its own mount namespace ([`mountns`]): `/run`, `/var/lib` and `/var/log` are the
//!   host's folders, the kubelet's machine-wide sysctls masked;
//! - its own cgroup tree ([`cgroup`]) as the kubelet's `cgroupRoot`, with containerd and
//!   the kubelet inside it, so stopping the node leaves no container behind;
//! - containerd 1.6 with runc and the CNI bridge (Debian's packages), its Pods on the
//!   host's own `/24` of the testbed's Pod range, routed from the root namespace and from
//!   every other real node through the host's management address;
//! - the kubelet built from the same pinned module as the control plane, acting as
//!   `system:node:<host>` (the API server's Node authorizer applies), its root directory
//!   `/var/lib/kubelet` on every node (the chart's one `kubeletRootDir`), the host's
//!   `var/lib/kubelet` on disk; processes the testbed runs on the node (its agent) enter
//!   the node's namespaces ([`RealNode::command`]) and see what a DaemonSet's Pod sees;
//! - images imported with `ctr`, never pulled: the sandbox image ([`pause`]) and whatever
//!   the caller built ([`image`]).
//!
//! - kube-proxy from the same module (iptables mode, in the host's namespace), so Service
//!   ClusterIPs work on the node — the in-cluster API address among them.
//!
//! Not yet here: cluster DNS.
//!
//! Needs root, `containerd`, `runc`, `ctr`, the CNI plugins in `/usr/lib/cni`, `nsenter`
//! and `unshare`; [`missing_programs`] says what is absent.

pub mod ascend_plugin;
pub mod cgroup;
pub mod config;
mod error;
pub mod image;
pub mod mountns;
pub mod pause;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use error::{Error, Result};

use cgroup::NodeCgroup;
use mountns::{MountNs, NodeMounts, run};

/// How long containerd may take to answer after it starts.
const RUNTIME_DEADLINE: Duration = Duration::from_secs(30);
/// How long the kubelet and containerd get to stop on SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What one node is made of.
#[derive(Debug, Clone)]
pub struct NodeSpec<'a> {
    /// The Node's name (the host's).
    pub name: &'a str,
    /// The host's network namespace (`/run/netns/<ns>`).
    pub netns: &'a str,
    /// The host's management address: the kubelet's and the Node's InternalIP.
    pub address: Ipv4Addr,
    /// The management network's gateway (the root namespace), where the host routes the
    /// Services' range (kube-proxy rewrites each connection before it leaves).
    pub gateway: Ipv4Addr,
    /// The host's folder (its `run`, `var/lib`, `var/log` become the node's).
    pub host_root: &'a Path,
    /// A folder of the node's own: configuration, logs, masks.
    pub dir: &'a Path,
    /// A name unique on the machine for the cgroup and mount namespace (the hosts'
    /// per-run prefix and the node's name).
    pub unique: &'a str,
    /// The node's Pod subnet (`10.x.i.0/24`).
    pub pod_subnet: &'a str,
    /// The kubelet's kubeconfig.
    pub kubeconfig: &'a Path,
    /// The kubelet binary.
    pub kubelet: &'a Path,
    /// kube-proxy, its kubeconfig (as `system:kube-proxy`) and the cluster's Pod range,
    /// for Service ClusterIPs on the node; none without.
    pub kube_proxy: Option<KubeProxy<'a>>,
    /// Image archives to import before the kubelet starts.
    pub images: &'a [PathBuf],
}

/// kube-proxy on a node.
#[derive(Debug, Clone)]
pub struct KubeProxy<'a> {
    /// The binary.
    pub binary: &'a Path,
    /// Its kubeconfig.
    pub kubeconfig: &'a Path,
    /// The cluster's Pod range.
    pub cluster_cidr: &'a str,
}

/// A running node; stopped, its containers killed and its namespace released on drop.
pub struct RealNode {
    name: String,
    dir: PathBuf,
    kubelet_root: PathBuf,
    pod_subnet: String,
    address: Ipv4Addr,
    kubelet: Option<Child>,
    kube_proxy: Option<Child>,
    containerd: Option<Child>,
    // Dropped after the processes: kills what is left, then releases the mounts.
    cgroup: NodeCgroup,
    mount_ns: MountNs,
}

impl std::fmt::Debug for RealNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNode")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The programs a real node needs that this machine lacks (empty when it can run one).
pub fn missing_programs() -> Vec<String> {
    let on_path = |p: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
    };
    let mut missing: Vec<String> = ["containerd", "runc", "ctr", "nsenter", "unshare", "cc"]
        .into_iter()
        .filter(|p| !on_path(p))
        .map(str::to_owned)
        .collect();
    for plugin in ["bridge", "host-local", "portmap", "loopback"] {
        if !Path::new(config::CNI_BIN_DIR).join(plugin).is_file() {
            missing.push(format!("{}/{plugin}", config::CNI_BIN_DIR));
        }
    }
    missing
}

impl RealNode {
    /// Brings the node up to a running kubelet (the Node's readiness is the caller's to
    /// wait for: [`wait_ready`]).
    pub fn start(spec: &NodeSpec<'_>) -> Result<RealNode> {
        if let Some(program) = missing_programs().into_iter().next() {
            return Err(Error::MissingProgram { program });
        }
        std::fs::create_dir_all(spec.dir).map_err(Error::io("create", spec.dir))?;
        let kubelet_root = spec.host_root.join("var/lib/kubelet");
        let cgroup = NodeCgroup::create(spec.unique)?;
        let mount_ns = MountNs::create(
            spec.unique,
            &NodeMounts {
                netns: spec.netns,
                host_root: spec.host_root,
                masks: &spec.dir.join("sysctl"),
            },
        )?;
        let mut node = RealNode {
            name: spec.name.to_owned(),
            dir: spec.dir.to_path_buf(),
            kubelet_root,
            pod_subnet: spec.pod_subnet.to_owned(),
            address: spec.address,
            kubelet: None,
            kube_proxy: None,
            containerd: None,
            cgroup,
            mount_ns,
        };
        node.write_configs(spec)?;
        node.route_pods(spec.netns, spec.gateway)?;
        node.containerd = Some(node.spawn(
            spec.netns,
            "containerd",
            Path::new("containerd"),
            &[
                "--config".into(),
                node.dir.join("containerd.toml").display().to_string(),
            ],
        )?);
        node.wait_runtime()?;
        for archive in spec.images {
            node.import(archive)?;
        }
        let args = vec![
            format!("--config={}", node.dir.join("kubelet.yaml").display()),
            format!("--kubeconfig={}", spec.kubeconfig.display()),
            format!("--root-dir={}", mountns::KUBELET_ROOT),
            format!("--hostname-override={}", spec.name),
            format!("--node-ip={}", spec.address),
            "--v=2".to_owned(),
        ];
        node.kubelet = Some(node.spawn(spec.netns, "kubelet", spec.kubelet, &args)?);
        if let Some(kp) = &spec.kube_proxy {
            let config = node.dir.join("kube-proxy.yaml");
            let text = config::kube_proxy_config(kp.kubeconfig, spec.name, kp.cluster_cidr);
            std::fs::write(&config, text).map_err(Error::io("write", &config))?;
            let args = [format!("--config={}", config.display()), "--v=1".to_owned()];
            node.kube_proxy = Some(node.spawn(spec.netns, "kube-proxy", kp.binary, &args)?);
        }
        Ok(node)
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kubelet's root directory as seen from outside the node (the host's
    /// `var/lib/kubelet`; inside, [`mountns::KUBELET_ROOT`]).
    pub fn kubelet_root(&self) -> &Path {
        &self.kubelet_root
    }

    /// The kubelet's log.
    pub fn kubelet_log(&self) -> PathBuf {
        self.dir.join("kubelet.log")
    }

    /// The host's management address, the next hop to the node's Pods.
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// Imports an image archive into the node's containerd (the kubelet's namespace).
    pub fn import(&self, archive: &Path) -> Result<()> {
        let archive = archive.to_str().unwrap_or_default();
        self.ctr(&["--namespace", "k8s.io", "images", "import", archive])
            .map(drop)
    }

    /// `ctr args…` against the node's containerd.
    fn ctr(&self, args: &[&str]) -> Result<String> {
        let ns = format!("--mount={}", self.mount_ns.file().display());
        let mut argv = vec![
            ns.as_str(),
            "--",
            "ctr",
            "--address",
            config::CONTAINERD_SOCKET,
        ];
        argv.extend_from_slice(args);
        run("nsenter", &argv)
    }

    /// A command that runs `program` on the node: in the host's network namespace and the
    /// node's mount namespace, as a DaemonSet's host-network Pod would see the node.
    pub fn command(&self, netns: &str, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{netns}"))
            .arg(format!("--mount={}", self.mount_ns.file().display()))
            .arg("--")
            .arg(program);
        cmd
    }

    /// Routes `other`'s Pod subnet through its host, from this node's host.
    pub fn route_to(&self, netns: &str, other: &RealNode) -> Result<()> {
        let via = other.address.to_string();
        run(
            "ip",
            &[
                "-n",
                netns,
                "route",
                "replace",
                &other.pod_subnet,
                "via",
                &via,
            ],
        )
        .map(drop)
    }

    fn write_configs(&self, spec: &NodeSpec<'_>) -> Result<()> {
        let cni = self.dir.join("cni");
        std::fs::create_dir_all(&cni).map_err(Error::io("create", &cni))?;
        let files = [
            (
                self.dir.join("containerd.toml"),
                config::containerd_toml(Path::new("/var/lib/containerd"), &cni),
            ),
            (
                cni.join("10-hcomm-pods.conflist"),
                config::cni_conflist(spec.pod_subnet),
            ),
            (
                self.dir.join("kubelet.yaml"),
                config::kubelet_config(&config::KubeletSettings {
                    address: spec.address,
                    cgroup_root: &self.cgroup.root(),
                }),
            ),
        ];
        for (path, text) in files {
            std::fs::write(&path, text).map_err(Error::io("write", &path))?;
        }
        Ok(())
    }

    /// The host forwards for its Pods; the root namespace reaches them through the host
    /// (a route more specific than the testbed's unreachable claim of the whole range).
    /// The Services' range needs a route on the host too, as a node's default route gives
    /// it: the route is chosen before kube-proxy's DNAT rewrites the destination.
    fn route_pods(&self, netns: &str, gateway: Ipv4Addr) -> Result<()> {
        run(
            "ip",
            &[
                "netns",
                "exec",
                netns,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ],
        )?;
        let gw = gateway.to_string();
        let services = crate::controlplane::SERVICE_CIDR;
        run(
            "ip",
            &["-n", netns, "route", "replace", services, "via", &gw],
        )?;
        let via = self.address.to_string();
        run("ip", &["route", "replace", &self.pod_subnet, "via", &via]).map(drop)
    }

    /// Starts `program args` in the node's network and mount namespaces, in its runtime
    /// cgroup, logging to `<dir>/<label>.log`.
    fn spawn(&self, netns: &str, label: &str, program: &Path, args: &[String]) -> Result<Child> {
        let log_path = self.dir.join(format!("{label}.log"));
        let log = std::fs::File::create(&log_path).map_err(Error::io("create", &log_path))?;
        let err = log.try_clone().map_err(Error::io("open", &log_path))?;
        let child = self
            .command(netns, program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Command {
                command: format!("nsenter … {}", program.display()),
                message: e.to_string(),
            })?;
        // Before it starts anything of its own (a shim, a container): nsenter execs the
        // program in place, so the pid is the program's.
        self.cgroup.enter_runtime(child.id())?;
        Ok(child)
    }

    fn wait_runtime(&mut self) -> Result<()> {
        let deadline = Instant::now() + RUNTIME_DEADLINE;
        loop {
            let up = self.ctr(&["version"]);
            if up.is_ok() {
                return Ok(());
            }
            let exited = self
                .containerd
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let log = self.dir.join("containerd.log");
                return Err(Error::NotUp {
                    what: format!("containerd on {} ({exited:?})", self.name),
                    after: RUNTIME_DEADLINE,
                    tail: crate::controlplane::log_tail(&log),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for RealNode {
    /// Stops kube-proxy, the kubelet and containerd (SIGTERM, then SIGKILL after
    /// [`STOP_GRACE`]), kills every container left, and drops the node's Pod route.
    fn drop(&mut self) {
        let children = [
            self.kube_proxy.take(),
            self.kubelet.take(),
            self.containerd.take(),
        ];
        for child in children.into_iter().flatten() {
            crate::hosts::stop_child(child, STOP_GRACE);
        }
        self.cgroup.kill_all();
        let _ = run("ip", &["route", "del", &self.pod_subnet]);
    }
}

/// Waits until Node `name` is Ready (its kubelet registered it and its runtime and
/// network are up).
pub async fn wait_ready(client: kube::Client, node: &RealNode, within: Duration) -> Result<()> {
    use k8s_openapi::api::core::v1::Node;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let deadline = Instant::now() + within;
    loop {
        let ready = nodes
            .get_opt(node.name())
            .await
            .ok()
            .flatten()
            .is_some_and(|n| {
                n.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            let log = node.kubelet_log();
            return Err(Error::NotUp {
                what: format!("Node {} Ready", node.name()),
                after: within,
                tail: crate::controlplane::log_tail(&log),
                log,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A kubeconfig acting as `system:node:<node>` in `system:nodes`, as a kubelet's
/// credentials do on a cluster (the API server's Node authorizer decides what it may),
/// written at `out`.
pub fn node_kubeconfig(admin: &Path, node: &str, out: &Path) -> Result<()> {
    kubeconfig_as(
        admin,
        &format!("system:node:{node}"),
        &["system:nodes"],
        out,
    )
}

/// A kubeconfig acting as `system:kube-proxy`, the user the default RBAC binds to
/// `system:node-proxier`.
pub fn kube_proxy_kubeconfig(admin: &Path, out: &Path) -> Result<()> {
    kubeconfig_as(admin, "system:kube-proxy", &[], out)
}

/// `admin`'s kubeconfig impersonating `user` in `groups` (and `system:authenticated`).
fn kubeconfig_as(admin: &Path, user: &str, groups: &[&str], out: &Path) -> Result<()> {
    let mut config = kube::config::Kubeconfig::read_from(admin).map_err(|e| Error::Command {
        command: format!("read {}", admin.display()),
        message: e.to_string(),
    })?;
    let mut groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
    groups.push("system:authenticated".to_owned());
    for named in &mut config.auth_infos {
        let auth = named.auth_info.get_or_insert_with(Default::default);
        auth.impersonate = Some(user.to_owned());
        auth.impersonate_groups = Some(groups.clone());
    }
    let yaml = serde_yaml::to_string(&config).map_err(|e| Error::Command {
        command: "render a kubeconfig".to_owned(),
        message: e.to_string(),
    })?;
    std::fs::write(out, yaml).map_err(Error::io("write", out))
}
