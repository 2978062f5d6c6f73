//! The Kubernetes side of an installation, as every test that runs real agents or the
//! real operator needs it: a control plane reachable from the simulated hosts, hcomm's
//! CRDs, one (kwok) Node per host, the Helm chart's RBAC, namespace and agents' Secret
//! (installed with the real `helm`), and kubeconfigs acting as the chart's agent and
//! operator ServiceAccounts — so whatever RBAC the chart forgot fails the test. Nodes
//! may advertise NPUs as the Ascend device plugin would ([`super::npus`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hcomm_crds::HcommNode;
use kube::Api;

use super::{Error, Result, npus};
use crate::chart;
use crate::controlplane::{ControlPlane, ControlPlaneOptions};
use crate::hosts::{SimHost, SimHosts};

/// What differs between the tests' clusters.
#[derive(Debug, Clone, Default)]
pub struct ChartClusterOptions {
    /// Start kube-controller-manager and kube-scheduler (placement of member Pods).
    pub controllers: bool,
    /// Run kwok (Nodes Ready, Pods Running): `Some(true)` requires it, `None` runs it
    /// when its binary can be had. Nodes for the hosts are made only with kwok.
    pub kwok: Option<bool>,
    /// The Pod CIDR kwok hands addresses out of (default: the control plane's).
    pub pod_cidr: Option<String>,
    /// `--set` values for the chart beyond `agent.mode=cpu`.
    pub chart_values: Vec<String>,
    /// NPUs each host's Node advertises (`huawei.com/Ascend910`, with the device plugin's
    /// node labels; see [`super::npus`]); 0 for plain CPU Nodes.
    pub npus_per_node: u32,
}

/// A running control plane with the chart installed.
pub struct ChartCluster {
    /// The control plane.
    pub cp: ControlPlane,
    /// Acts as the chart's agent ServiceAccount.
    pub agent_kubeconfig: PathBuf,
    /// Acts as the chart's operator ServiceAccount.
    pub operator_kubeconfig: PathBuf,
}

impl ChartCluster {
    /// Starts the control plane on the hosts' management gateway (loopback for loopback
    /// hosts), installs the CRDs, a Node per host and the chart.
    pub async fn start(hosts: &SimHosts, options: ChartClusterOptions) -> Result<ChartCluster> {
        let cp = ControlPlane::start(ControlPlaneOptions {
            bind_address: if hosts.is_isolated() {
                hosts.mgmt_gateway().into()
            } else {
                std::net::Ipv4Addr::LOCALHOST.into()
            },
            controllers: options.controllers,
            kwok: options.kwok,
            pod_cidr: options.pod_cidr,
            ..Default::default()
        })
        .await?;
        cp.install_crds(&hcomm_crds::all_crds()).await?;
        if cp.has_kwok() {
            let labels = if options.npus_per_node > 0 {
                npus::node_labels()
            } else {
                BTreeMap::new()
            };
            for h in hosts.hosts() {
                cp.create_fake_node(h.name(), labels.clone()).await?;
                if options.npus_per_node > 0 {
                    npus::advertise(cp.client().await?, h.name(), options.npus_per_node).await?;
                }
            }
        }
        let mut values = vec!["agent.mode=cpu"];
        values.extend(options.chart_values.iter().map(String::as_str));
        chart::install(&cp, &values)?;
        let agent_kubeconfig = chart::kubeconfig_as(&cp, chart::AGENT_USER)?;
        let operator_kubeconfig = chart::kubeconfig_as(&cp, chart::OPERATOR_USER)?;
        Ok(ChartCluster {
            cp,
            agent_kubeconfig,
            operator_kubeconfig,
        })
    }
}

/// Waits until the agent of each of `hosts` has published its `HcommNode` with the host's
/// data address (the agent's first act after start). `log_hint` says where to look
/// when one does not (an agent log folder, or empty).
pub async fn wait_nodes_published(
    client: kube::Client,
    hosts: &[&SimHost],
    within: Duration,
    log_hint: &str,
) -> Result<()> {
    let nodes: Api<HcommNode> = Api::all(client);
    let deadline = Instant::now() + within;
    for h in hosts {
        loop {
            let published = nodes
                .get_opt(h.name())
                .await
                .ok()
                .flatten()
                .and_then(|n| n.status?.data_address);
            if published == Some(h.data_ip().to_string()) {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "HcommNode {} with data address {} (now {published:?}){log_hint}",
                        h.name(),
                        h.data_ip()
                    ),
                    after: within,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Writes a fresh random secret shared by the agents (as the chart's generated Secret
/// holds it), readable only by its owner.
pub fn write_secret(path: &Path) -> Result<()> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(Error::io("read /dev/urandom"))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(path, hex).map_err(Error::io(format!("write {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io(format!("chmod {}", path.display())))
}
