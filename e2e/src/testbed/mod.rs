//! A whole hcomm installation on this machine, as the pool scenarios and `cargo demo` use
//! it: simulated hosts (network namespaces with data and management NICs), a real control
//! plane bound to the management network, the Helm chart (CRDs, RBAC, the agents' shared
//! Secret), one `hcomm-agent` per host acting as the chart's agent ServiceAccount, the
//! `hcomm-operator` acting as the operator's ServiceAccount, and a process kubelet
//! ([`kubelet`]) that runs each member Pod's worker inside its host with a reachable Pod
//! IP — so routers follow real EndpointSlices to real sockets.
//!
//! The chart's own Deployment and DaemonSet are not used (kwok cannot run containers): the
//! testbed runs the same binaries as processes, with the chart's identities.
//!
//! Everything stops when the testbed drops (workers, operator, agents, control plane,
//! hosts, in that order).
//! Size: the testbed's start and stop order, which must read as one sequence.

pub mod agent_args;
pub mod autoscaling;
pub mod binaries;
pub mod cgroups;
pub mod cluster;
pub mod csi_volumes;
pub mod device_plugin;
mod error;
pub mod examples;
pub mod hccl_runtime;
pub mod kubelet;
pub mod launch;
pub mod load;
pub mod logs;
pub mod npus;
mod pool_waits;
pub mod pools;
pub mod ranktables;
mod real_nodes;
pub mod suite;
pub mod timeline;
pub mod timeline_svg;
pub mod weights;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub use agent_args::AgentArgs;
pub use cluster::{ChartCluster, ChartClusterOptions, wait_nodes_published, write_secret};
pub use device_plugin::{DevicePlugin, PluginFault};
pub use error::{Error, Result};
pub use examples::CommPatch;
pub use examples::ExamplePools;
pub use kubelet::{Kubelet, KubeletConfig, NodeRoot, ProcessInfo};
pub use load::{LoadOptions, LoadRun, LoadStats, PodStats};
pub use pools::{MemberPod, PoolCopy};
pub use real_nodes::WORKER_IMAGE;
pub use timeline::{MemberMarks, Timeline};

use crate::chart;
use crate::controlplane::ControlPlane;
use crate::hosts::hccn_sim::root::AscendRoot;
pub(crate) use crate::hosts::stop_child;
use crate::hosts::{HostProcess, Shaping, SimHosts, SimHostsOptions};

/// How to build a [`Testbed`].
#[derive(Debug, Clone)]
pub struct TestbedOptions {
    /// Simulated hosts (Kubernetes Nodes `host-0..`).
    pub hosts: usize,
    /// NPUs of each host: what its Node advertises to the scheduler
    /// (`huawei.com/Ascend910`), what the device-plugin stand-in allocates from, and the
    /// devices its agent offers (`--cpu-devices`) — one number, so the three never
    /// disagree.
    pub devices_per_host: u32,
    /// Shaping of every host's data link.
    pub data_shaping: Shaping,
    /// The agents' health probe interval.
    pub health_interval: Duration,
    /// Network namespaces, loopback addresses, or namespaces when permitted.
    pub hosts_mode: HostsMode,
    /// How long the agents keep a weights version no link uses (`--weights-gc-grace-secs`).
    pub weights_gc_grace: Duration,
    /// Install the HCCL conformance simulator as every host's CANN runtime
    /// ([`hccl_runtime`]), so `backend: hccl` groups run (namespace hosts only). Without
    /// it the hosts have no Ascend runtime and such groups are refused at verification.
    pub hccl_runtime: bool,
    /// What runs the Pods: the process kubelet over kwok Nodes, or a real kubelet and
    /// containerd on every host.
    pub nodes: Nodes,
}

/// What runs the testbed's Pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Nodes {
    /// kwok Nodes, and the process kubelet running each member's worker as a process
    /// inside its host ([`kubelet`]).
    #[default]
    Process,
    /// A real kubelet and containerd per host ([`crate::realnode`]): Pods are
    /// containers on a CNI network, images built here, NPUs from a real device plugin.
    /// Namespace hosts only.
    Kubelet,
}

/// What the simulated hosts are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostsMode {
    /// Network namespaces with their own NICs (needs root); an error without them.
    Namespaces,
    /// Namespaces when they can be made, else loopback addresses (what `cargo demo`
    /// does for a user who is not root).
    NamespacesOrLoopback,
    /// Loopback addresses even where namespaces could be made (tests that path as root).
    Loopback,
}

impl Default for TestbedOptions {
    fn default() -> Self {
        TestbedOptions {
            hosts: 4,
            devices_per_host: 2,
            data_shaping: Shaping::default(),
            health_interval: Duration::from_secs(1),
            hosts_mode: HostsMode::Namespaces,
            weights_gc_grace: Duration::from_secs(5),
            hccl_runtime: false,
            nodes: Nodes::Process,
        }
    }
}

/// A running installation. Fields drop in order: workers first, hosts last.
pub struct Testbed {
    kubelet: Option<Kubelet>,
    /// With [`Nodes::Kubelet`]: each host's device plugin, then its node.
    ascend_plugins: Vec<crate::realnode::ascend_plugin::AscendPlugin>,
    real_nodes: Vec<crate::realnode::RealNode>,
    device_plugin: Option<DevicePlugin>,
    pod_resources: Vec<hcomm_kubelet::server::PodResourcesServer>,
    operator: Option<Child>,
    /// Operators started by [`Testbed::roll_operator`] (each gets its own identity).
    operator_rolls: u32,
    agents: Vec<Option<HostProcess>>,
    cp: ControlPlane,
    hosts: Arc<SimHosts>,
    dir: PathBuf,
    keep_dir: bool,
    options: TestbedOptions,
    agent_kubeconfig: PathBuf,
    operator_kubeconfig: PathBuf,
    secret_file: PathBuf,
    hccl_runtime: Option<hccl_runtime::HcclRuntime>,
}

/// Below the testbed's folder: where Pods' processes see their CSI volumes (short, as a
/// socket path in it must be: see [`csi_volumes`]).
const CSI_VIEWS: &str = "v";

/// Ports every agent uses on its host (the chart's defaults).
pub const PROBE_PORT: u16 = 7510;
pub const WEIGHTS_PORT: u16 = 7512;
pub const COMM_PORT_BASE: u16 = 7600;
pub const METRICS_PORT: u16 = 7511;

impl Testbed {
    /// Builds hosts, control plane, chart, agents, operator and kubelet, and waits until
    /// every host's `HcommNode` is published.
    pub async fn start(options: TestbedOptions) -> Result<Testbed> {
        let namespaces = || {
            SimHosts::create(
                SimHostsOptions::new(options.hosts)
                    .data_shaping(options.data_shaping)
                    .npus(options.devices_per_host),
            )
        };
        let mut hosts = match options.hosts_mode {
            HostsMode::Namespaces => namespaces()?,
            HostsMode::Loopback => SimHosts::loopback(options.hosts)?,
            HostsMode::NamespacesOrLoopback => match namespaces() {
                Ok(h) => h,
                Err(e @ crate::hosts::Error::NotPermitted { .. }) => {
                    tracing::warn!(error = %e, "no network namespaces: hosts run on loopback addresses");
                    SimHosts::loopback(options.hosts)?
                }
                Err(e) => return Err(e.into()),
            },
        };
        if options.nodes == Nodes::Kubelet && !hosts.is_isolated() {
            return Err(Error::Unsupported(
                "real nodes need network namespaces (root); these hosts are loopback addresses"
                    .to_owned(),
            ));
        }
        let pod_range = hosts.claim_pod_range()?;
        let hosts = Arc::new(hosts);
        let dir = std::env::temp_dir().join(format!("hcomm-testbed-{}", std::process::id()));
        // A testbed started again in the same process (the pools suite does after a failed
        // scenario) would wipe the failed one's logs: kept aside when asked to keep state.
        if std::env::var_os(crate::controlplane::KEEP_STATE_ENV).is_some() && dir.exists() {
            let aside = (1..)
                .map(|n| dir.with_extension(n.to_string()))
                .find(|d| !d.exists())
                .expect("a free name");
            let _ = std::fs::rename(&dir, &aside);
            eprintln!("the previous testbed's state: {}", aside.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).map_err(Error::io("create testbed dir"))?;
        // RBAC, namespace and the agents' Secret come from the chart. Its workloads are
        // kept off the simulated nodes (the testbed runs the binaries itself): the agent
        // DaemonSet's default selector matches no CPU node, and one operator replica
        // stays Pending on a selector nothing carries.
        let ChartCluster {
            cp,
            agent_kubeconfig,
            operator_kubeconfig,
        } = ChartCluster::start(
            &hosts,
            ChartClusterOptions {
                controllers: true,
                kwok: Some(options.nodes == Nodes::Process),
                // Pod addresses are routed in the root namespace (hosts::podnet; real
                // nodes route their own /24 of it).
                pod_cidr: Some(pod_range.clone()),
                chart_values: vec![
                    "operator.replicas=1".to_owned(),
                    "operator.nodeSelector.hcomm-testbed=runs-as-a-process".to_owned(),
                ],
                // Real nodes advertise what their device plugin registers.
                npus_per_node: match options.nodes {
                    Nodes::Process => options.devices_per_host,
                    Nodes::Kubelet => 0,
                },
            },
        )
        .await?;
        let secret_file = dir.join("probe-secret");
        write_secret(&secret_file)?;
        let hccl_runtime = options
            .hccl_runtime
            .then(|| hccl_runtime::HcclRuntime::install(&dir, &hosts))
            .transpose()?;
        let mut bed = Testbed {
            kubelet: None,
            ascend_plugins: Vec::new(),
            real_nodes: Vec::new(),
            device_plugin: None,
            pod_resources: Vec::new(),
            operator: None,
            operator_rolls: 0,
            agents: Vec::new(),
            cp,
            hosts,
            keep_dir: std::env::var_os(crate::controlplane::KEEP_STATE_ENV).is_some(),
            dir,
            options,
            agent_kubeconfig,
            operator_kubeconfig,
            secret_file,
            hccl_runtime,
        };
        bed.install_ascend_roots()?;
        if bed.options.nodes == Nodes::Kubelet {
            bed.start_real_nodes(&pod_range).await?;
            for i in 0..bed.hosts.len() {
                let agent = bed.spawn_agent(i)?;
                bed.agents.push(Some(agent));
            }
            bed.start_operator()?;
            bed.wait_for_nodes(Duration::from_secs(60)).await?;
            return Ok(bed);
        }
        // The kubelet's side first (device plugin, PodResources sockets), so an agent
        // finds its socket from its start.
        bed.device_plugin = (bed.options.devices_per_host > 0).then(|| {
            DevicePlugin::new(
                hcomm_crds::contract::ascend::RESOURCE_ASCEND910,
                bed.hosts
                    .hosts()
                    .iter()
                    .map(|h| (h.name().to_owned(), bed.options.devices_per_host))
                    .collect(),
            )
        });
        if let Some(dp) = &bed.device_plugin {
            for h in bed.hosts.hosts() {
                let Some(shared) = dp.pod_resources_of(h.name()) else {
                    continue;
                };
                let socket = bed.pod_resources_socket(h.index());
                let server = hcomm_kubelet::server::serve(&socket, shared)
                    .await
                    .map_err(|e| Error::Io {
                        what: format!("serve {}'s PodResources socket", h.name()),
                        source: std::io::Error::other(e),
                    })?;
                bed.pod_resources.push(server);
            }
        }
        for i in 0..bed.hosts.len() {
            let agent = bed.spawn_agent(i)?;
            bed.agents.push(Some(agent));
        }
        bed.start_operator()?;
        let mut programs = BTreeMap::from([
            (
                binaries::WORKER.to_owned(),
                binaries::find(binaries::WORKER)?,
            ),
            (
                binaries::ROUTER.to_owned(),
                binaries::find(binaries::ROUTER)?,
            ),
        ]);
        // Engines written in Python (the worker library's package), when installed.
        if let Some(python) = binaries::on_path("python3") {
            programs.insert("python3".to_owned(), python);
        }
        let nodes = bed
            .hosts
            .hosts()
            .iter()
            .map(|h| {
                (
                    h.name().to_owned(),
                    NodeRoot {
                        host: h.index(),
                        root: bed.host_root(h.index()),
                    },
                )
            })
            .collect();
        bed.kubelet = Some(Kubelet::start(
            bed.cp.client().await?,
            bed.hosts.clone(),
            KubeletConfig {
                nodes,
                programs,
                log_dir: bed.dir.join("logs"),
                device_plugin: bed.device_plugin.clone(),
                hccl_runtime: bed.hccl_runtime.clone(),
                csi_views: bed.dir.join(CSI_VIEWS),
            },
        ));
        bed.wait_for_nodes(Duration::from_secs(60)).await?;
        Ok(bed)
    }

    /// The control plane.
    pub fn control_plane(&self) -> &ControlPlane {
        &self.cp
    }

    /// The simulated hosts.
    pub fn hosts(&self) -> &SimHosts {
        &self.hosts
    }

    /// An admin client.
    pub async fn client(&self) -> Result<kube::Client> {
        Ok(self.cp.client().await?)
    }

    /// Whether the state directory outlives the testbed (`HCOMM_E2E_KEEP_STATE` is set).
    pub fn keeps_state(&self) -> bool {
        self.keep_dir
    }

    /// The testbed's folder (logs, host roots, secrets).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Host `i`'s root folder: `run/hcomm/agent.sock`, `var/lib/hcomm/weights`.
    pub fn host_root(&self, i: usize) -> PathBuf {
        self.dir.join("hosts").join(format!("host-{i}"))
    }

    /// Host `i`'s agent socket (the local worker API).
    pub fn agent_socket(&self, i: usize) -> PathBuf {
        self.host_root(i).join("run/hcomm/agent.sock")
    }

    /// The local-API socket of the member Pod with `uid`, where its worker process finds it:
    /// in the Pod's CSI volume, which the agent on its host published for it (seen through
    /// the process kubelet's view, see [`csi_volumes`]).
    pub fn pod_socket(&self, uid: &str) -> PathBuf {
        self.dir
            .join(CSI_VIEWS)
            .join(uid)
            .join(hcomm_crds::local_api::VOLUME)
            .join(hcomm_crds::local_api::SOCKET_FILE)
    }

    /// Host `i`'s weight store.
    pub fn weights_dir(&self, i: usize) -> PathBuf {
        self.host_root(i).join("var/lib/hcomm/weights")
    }

    /// Host `i`'s Ascend files: `/etc/hccn.conf`, the `hccn_tool` simulator's wrapper,
    /// its faults and call log (present when the hosts have NPU ports).
    pub fn ascend_root(&self, i: usize) -> AscendRoot {
        AscendRoot::open(&self.host_root(i))
    }

    /// Host `i`'s kubelet PodResources socket (the real path under the host root).
    pub fn pod_resources_socket(&self, i: usize) -> PathBuf {
        self.host_root(i)
            .join(hcomm_crds::contract::ascend::POD_RESOURCES_SOCKET.trim_start_matches('/'))
    }

    /// The device-plugin stand-in (allocations, fault injection), when hosts have NPUs.
    pub fn device_plugin(&self) -> Option<&DevicePlugin> {
        self.device_plugin.as_ref()
    }

    /// Writes each host's hccn.conf and hccn_tool wrapper when the hosts have NPU ports.
    fn install_ascend_roots(&self) -> Result<()> {
        let npus = self.hosts.npus_per_host();
        if npus == 0 {
            return Ok(());
        }
        let simulator = binaries::find(binaries::HCCN_TOOL_SIM)?;
        for i in 0..self.hosts.len() {
            AscendRoot::install(&self.host_root(i), i, self.hosts.len(), npus, &simulator)
                .map_err(|e| Error::Io {
                    what: format!("install host-{i}'s Ascend files"),
                    source: std::io::Error::other(e),
                })?;
        }
        Ok(())
    }

    /// The HCCL simulator installed as the hosts' runtime, if asked for.
    pub fn hccl_runtime(&self) -> Option<&hccl_runtime::HcclRuntime> {
        self.hccl_runtime.as_ref()
    }

    /// The processes the kubelet runs now.
    pub fn workers(&self) -> BTreeMap<String, ProcessInfo> {
        self.kubelet
            .as_ref()
            .map(Kubelet::processes)
            .unwrap_or_default()
    }

    /// Host `i`'s agent metrics (Prometheus text), fetched over the management network.
    pub fn agent_metrics(&self, i: usize) -> Result<String> {
        Ok(self.agent_get(i, "/metrics")?.1)
    }

    /// Whether host `i`'s agent answers `/readyz` with 200 (false while it cannot be
    /// reached).
    pub fn agent_ready(&self, i: usize) -> bool {
        self.agent_get(i, "/readyz")
            .is_ok_and(|(status, _)| status == 200)
    }

    /// `GET path` on host `i`'s agent metrics listener: (status code, body).
    fn agent_get(&self, i: usize, path: &str) -> Result<(u16, String)> {
        use std::io::{Read as _, Write as _};
        let h = self.hosts.host(i)?;
        let addr = std::net::SocketAddr::from((h.mgmt_ip(), METRICS_PORT));
        let what = format!("GET http://{addr}{path}");
        let timeout = Duration::from_secs(5);
        let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)
            .map_err(Error::io(what.clone()))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(Error::io(what.clone()))?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .map_err(Error::io(what.clone()))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .map_err(Error::io(what.clone()))?;
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or(response);
        Ok((status, body))
    }

    /// The pid of host `i`'s agent, if running.
    pub fn agent_pid(&self, i: usize) -> Option<u32> {
        self.agents.get(i)?.as_ref().map(|p| p.id())
    }

    /// The operator's pid, if running.
    pub fn operator_pid(&self) -> Option<u32> {
        self.operator.as_ref().map(Child::id)
    }

    /// SIGKILLs host `i`'s agent (a crashed node agent).
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(slot) = self.agents.get_mut(i) {
            slot.take();
        }
    }

    /// Starts host `i`'s agent again (after [`Testbed::kill_agent`]).
    pub fn restart_agent(&mut self, i: usize) -> Result<()> {
        let agent = self.spawn_agent(i)?;
        self.agents[i] = Some(agent);
        Ok(())
    }

    /// Replaces host `i`'s agent as a DaemonSet rolling update does: SIGTERM (up to
    /// `grace`, then SIGKILL), and a new agent process on the same node state. Returns
    /// whether the old agent exited on its own within `grace`.
    pub fn roll_agent(&mut self, i: usize, grace: Duration) -> Result<bool> {
        let exited = match self.agents.get_mut(i).and_then(Option::take) {
            Some(old) => old.stop(grace),
            None => true,
        };
        self.restart_agent(i)?;
        Ok(exited)
    }

    /// SIGKILLs the operator: no chance to finish anything.
    pub fn kill_operator(&mut self) {
        if let Some(mut child) = self.operator.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the operator (again).
    pub fn start_operator(&mut self) -> Result<()> {
        self.kill_operator();
        self.operator = Some(self.spawn_operator("testbed")?);
        Ok(())
    }

    /// Replaces the operator as a Deployment's rolling update does: the new one starts
    /// beside the old (and waits for the Lease), then the old gets SIGTERM (up to `grace`,
    /// then SIGKILL). Returns the new one's identity and whether the old exited on its own.
    pub fn roll_operator(&mut self, grace: Duration) -> Result<(String, bool)> {
        self.operator_rolls += 1;
        let identity = format!("testbed-{}", self.operator_rolls);
        let new = self.spawn_operator(&identity)?;
        let exited = match self.operator.replace(new) {
            Some(old) => stop_child(old, grace),
            None => true,
        };
        Ok((identity, exited))
    }

    fn spawn_operator(&self, identity: &str) -> Result<Child> {
        let log = self.log_file("operator")?;
        Command::new(binaries::find(binaries::OPERATOR)?)
            .args(["--metrics-addr", "127.0.0.1:0", "--identity", identity])
            .args(["--lease-namespace", chart::RELEASE_NAMESPACE])
            .args(["--lease-name", "hcomm-operator"])
            .env("KUBECONFIG", &self.operator_kubeconfig)
            .env("RUST_LOG", log_filter())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(Error::io("operator log"))?)
            .stderr(log)
            .spawn()
            .map_err(Error::io("start hcomm-operator"))
    }

    pub(crate) fn log_file(&self, name: &str) -> Result<std::fs::File> {
        let path = self.dir.join("logs").join(format!("{name}.log"));
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(Error::io(format!("open {}", path.display())))
    }

    fn spawn_agent(&self, i: usize) -> Result<HostProcess> {
        let h = self.hosts.host(i)?;
        let root = self.host_root(i);
        let socket = self.agent_socket(i);
        let weights = self.weights_dir(i);
        std::fs::create_dir_all(&weights).map_err(Error::io("create weights dir"))?;
        let agent = binaries::find(binaries::AGENT)?;
        // On a real node the agent sees the node as the chart's DaemonSet Pod does: its
        // mount namespace, the kubelet's root at the one path every node has.
        let (mut cmd, kubelet_root) = match (self.real_nodes.get(i), h.netns()) {
            (Some(node), Some(netns)) => (
                node.command(netns, &agent),
                PathBuf::from(crate::realnode::mountns::KUBELET_ROOT),
            ),
            _ => (
                h.command(&agent.display().to_string()),
                launch::kubelet_root(&root),
            ),
        };
        let args = AgentArgs {
            cpu_devices: self.options.devices_per_host,
            metrics_addr: std::net::SocketAddr::from((h.mgmt_ip(), METRICS_PORT)),
            weights_port: WEIGHTS_PORT,
            health_interval: self.options.health_interval,
            probe_port: Some(PROBE_PORT),
            comm_port_base: Some(COMM_PORT_BASE),
            weights_gc_grace: Some(self.options.weights_gc_grace),
            // The tests' declared weight sources all lie below `<bed>/models`.
            weights_source_roots: vec![self.dir.join("models")],
            kubelet_root: Some(kubelet_root),
            // Workers are identified by their Pod cgroups when the process kubelet can make
            // them; otherwise they would all look like node processes, so say so instead.
            extra: match kubelet::pod_cgroups_available() {
                Ok(()) => Vec::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "no Pod cgroups: agents run with --local-api-callers=unchecked");
                    vec!["--local-api-callers".into(), "unchecked".into()]
                }
            },
            ..AgentArgs::for_host(h, &socket, &weights, &self.secret_file)
        };
        cmd.args(args.to_args())
            .env("KUBECONFIG", &self.agent_kubeconfig)
            .env("RUST_LOG", log_filter())
            .env("HCOMM_POD_RESOURCES_SOCKET", self.pod_resources_socket(i))
            // The host's hccn.conf and hccn_tool simulator (absent on loopback hosts,
            // whose NPUs have no addresses, so no NPU network check runs there).
            .env("HCOMM_HCCN_TOOL", self.ascend_root(i).hccn_tool())
            .env("HCOMM_HCCN_CONF", self.ascend_root(i).hccn_conf())
            .env("HOME", &root)
            .stdin(Stdio::null());
        if let Some(rt) = &self.hccl_runtime {
            let (k, v) = rt.agent_env();
            cmd.env(k, v);
        }
        let log = self.log_file(h.name())?;
        cmd.stdout(log.try_clone().map_err(Error::io("agent log"))?)
            .stderr(log);
        Ok(h.spawn_command(cmd)?)
    }

    async fn wait_for_nodes(&self, within: Duration) -> Result<()> {
        let hosts: Vec<_> = self.hosts.hosts().iter().collect();
        let logs = self.dir.join("logs");
        cluster::wait_nodes_published(
            self.client().await?,
            &hosts,
            within,
            &format!(" (agent logs: {}/host-N.log)", logs.display()),
        )
        .await
    }

    /// Stops the workers gracefully, then everything else.
    pub async fn stop(mut self) {
        if let Some(k) = self.kubelet.take() {
            k.stop().await;
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.kubelet.take();
        self.ascend_plugins.clear();
        // Containers first (they use the agents' sockets), then the agents.
        self.real_nodes.clear();
        self.pod_resources.clear();
        self.kill_operator();
        self.agents.clear();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn log_filter() -> String {
    std::env::var("HCOMM_TESTBED_LOG")
        .unwrap_or_else(|_| "info,kube=warn,kube_client=warn,hyper=warn,tower=warn".to_owned())
}
