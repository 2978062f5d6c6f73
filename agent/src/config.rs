//! The agent's configuration (from flags, see [`crate::cli`]) and the one [`Context`] every
//! agent task receives.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hcomm_crds::{LinkTestResult, TopologyLabels};

use crate::inventory::{Inventory, InventorySources};
use crate::local_api::Hub;
use crate::member::weights::WeightsSyncer;
use crate::metrics::Metrics;

/// The built-in shared secret. It is public (it is in the source), so it authenticates
/// nothing: [`AgentConfig::new`] starts from it for in-process use, and the command line
/// accepts it only with `--insecure-default-secret` (local development and tests).
pub const INSECURE_DEFAULT_SECRET: &[u8] = b"hcomm-probe";

/// Everything `hcomm-agent run` is told.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node_name: String,
    /// The node's address on the data network, if configured.
    pub data_address: Option<IpAddr>,
    pub management_interface: Option<String>,
    /// How long a member waits for its worker's `serving` report (Pods annotated
    /// `hcomm.io/worker-readiness: local-api`) before its join counts as failed.
    pub worker_ready_timeout: Duration,
    /// The node's default data-interface choice (HCCL_SOCKET_IFNAME syntax), used when
    /// neither the group (`spec.comm.socketIfname`) nor the worker's environment sets one.
    pub socket_ifname: Option<String>,
    pub topology: TopologyLabels,
    pub sources: InventorySources,
    /// The node socket of the local API (`--socket`): node tools only, mounted into no Pod.
    pub socket_path: PathBuf,
    /// Where each member Pod's own local-API socket is served (`--pod-sockets-dir`):
    /// `<dir>/<pod uid>/agent.sock`, the directory the operator mounts into that Pod.
    pub pod_sockets_dir: PathBuf,
    /// The local-API CSI driver (`--local-api-csi`): None when off (hostPath volumes only).
    pub local_api_csi: Option<CsiDriverConfig>,
    /// The kubelet's root directory (`--kubelet-root-dir`): CSI targets lie below it.
    pub kubelet_root_dir: PathBuf,
    /// How callers of the local API are identified (`--local-api-callers`).
    pub local_api_callers: crate::local_api::caller::CallerCheck,
    /// Loopback rank-table peers accepted (`--allow-loopback-peers`, loopback testbeds only).
    pub allow_loopback_peers: bool,
    pub allowed_uids: Vec<u32>,
    pub metrics_addr: SocketAddr,
    /// Port of the link probe on every node's data address.
    pub probe_port: u16,
    /// A member's control endpoint listens on `comm_port_base + <its first device id>`.
    pub comm_port_base: u16,
    /// Shared by all agents (`--probe-secret-file`); authenticates link probes. (Weight
    /// sync and the comm domain use the group's own secret, `crate::group_secrets`.)
    pub probe_secret: Arc<Vec<u8>>,
    /// Per-group secrets as files, `<dir>/<namespace>_<group>` (development); else the
    /// group's Secret in `secrets_namespace` (see `crate::group_secrets`).
    pub group_secret_dir: Option<PathBuf>,
    /// Where the operator keeps the groups' Secrets: the release namespace
    /// (`--secrets-namespace`, else `POD_NAMESPACE`).
    pub secrets_namespace: Option<String>,
    pub poll_interval: Duration,
    pub health_interval: Duration,
    pub inventory_interval: Duration,
    pub retry_backoff: Duration,
    pub shm_min_bytes: u64,
    /// The node's weight store (`--weights-dir`): verified sets under `versions/`, a
    /// group's workers read `<dir>/groups/<namespace>_<group>/current`.
    pub weights_root: PathBuf,
    /// Port of the weights chunk server on every node's data address (`--weights-port`).
    pub weights_port: u16,
    /// Re-read and re-hash every chunk before serving it (`--weights-verify-on-serve`,
    /// default false): a chunk corrupted on this disk is then withdrawn instead of sent.
    /// Joiners verify every chunk regardless (they report `CorruptWeightsChunk` naming the
    /// source and refetch elsewhere), so by default a chunk goes from the page cache to the
    /// socket with `sendfile` instead: that early catch costs one SHA-256 and two copies
    /// per served byte, about half of what a scale-out costs its sources' CPU.
    pub weights_verify_on_serve: bool,
    /// How long a weights version no link points at, and the link of a group with no
    /// member on this node, are kept before they are removed (`--weights-gc-grace-secs`,
    /// default 600; `off` keeps everything). See `weights::gc`.
    pub weights_gc_grace: Option<Duration>,
    /// Where a group's declared local weights source may lie (`--weights-source-root`,
    /// repeatable); empty (the default): local sources are refused, weights come from
    /// peers only. See `weights::source`.
    pub weights_source_roots: crate::weights::SourceRoots,
    /// Caps the group's connect timeout for verification probes.
    pub verify_timeout_cap: Option<Duration>,
    /// The kubelet's PodResources socket (`--pod-resources-socket`): which NPUs each
    /// member Pod really got.
    pub pod_resources_socket: PathBuf,
}

/// Where the agent's local-API CSI driver listens and registers (see
/// `local_api::csi`). The kubelet finds it through the registration socket, then calls
/// the CSI socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiDriverConfig {
    /// The CSI endpoint (`--csi-socket`).
    pub socket: PathBuf,
    /// The kubelet's plugin-registration directory (`--kubelet-registration-dir`); the
    /// registration socket is `<dir>/<driver>-reg.sock`.
    pub registration_dir: PathBuf,
}

impl Default for CsiDriverConfig {
    fn default() -> Self {
        CsiDriverConfig {
            // Below the kubelet's default root, as the chart mounts them.
            socket: "/var/lib/kubelet/plugins/local-api.hcomm.io/csi.sock".into(),
            registration_dir: "/var/lib/kubelet/plugins_registry".into(),
        }
    }
}

impl CsiDriverConfig {
    /// The registration socket the kubelet's plugin watcher finds.
    pub fn registration_socket(&self) -> PathBuf {
        self.registration_dir
            .join(format!("{}-reg.sock", hcomm_crds::local_api::CSI_DRIVER))
    }
}

impl AgentConfig {
    /// The NIC rule of the node itself (no group's `socketIfname`): what the inventory
    /// reports as the data NIC and what the health probes leave through.
    pub fn node_nic_rule(&self) -> crate::nic::NicRule {
        crate::nic::NicRule {
            socket_ifname: None,
            data_address: self.data_address,
            management: self.management_interface.clone(),
        }
    }

    /// The node's own service ports (the agent's probe, weights and metrics ports): no
    /// endpoint a rank table yields may be one of them (see `member::ranktable`).
    pub fn service_ports(&self) -> Vec<u16> {
        vec![self.probe_port, self.weights_port, self.metrics_addr.port()]
    }

    /// Who may call the local API (both the node socket and the Pods' sockets).
    pub fn local_api_access(&self) -> crate::local_api::server::Access {
        crate::local_api::server::Access {
            allowed_uids: self.allowed_uids.clone(),
            callers: self.local_api_callers,
            ..Default::default()
        }
    }

    /// Defaults for `node`, as documented on the flags.
    pub fn new(node: impl Into<String>) -> AgentConfig {
        AgentConfig {
            node_name: node.into(),
            data_address: None,
            management_interface: None,
            socket_ifname: None,
            worker_ready_timeout: Duration::from_secs(600),
            topology: TopologyLabels::default(),
            sources: InventorySources::default(),
            socket_path: hcomm_crds::local_api::NODE_SOCKET.into(),
            pod_sockets_dir: hcomm_crds::local_api::POD_SOCKETS_DIR.into(),
            local_api_csi: Some(CsiDriverConfig::default()),
            kubelet_root_dir: hcomm_crds::local_api::KUBELET_ROOT_DIR.into(),
            local_api_callers: Default::default(),
            allow_loopback_peers: false,
            allowed_uids: Vec::new(),
            // The chart's agent.metricsPort and agent.dataPort (a test compares them).
            metrics_addr: "0.0.0.0:7511".parse().expect("valid"),
            probe_port: 7510,
            comm_port_base: 29600,
            probe_secret: Arc::new(INSECURE_DEFAULT_SECRET.to_vec()),
            group_secret_dir: None,
            secrets_namespace: None,
            poll_interval: Duration::from_secs(2),
            health_interval: Duration::from_secs(10),
            inventory_interval: Duration::from_secs(60),
            retry_backoff: Duration::from_secs(5),
            shm_min_bytes: 64 << 20,
            weights_root: "/var/lib/hcomm/weights".into(),
            weights_port: 7512,
            weights_verify_on_serve: false,
            weights_gc_grace: Some(Duration::from_secs(600)),
            weights_source_roots: crate::weights::SourceRoots::default(),
            verify_timeout_cap: None,
            pod_resources_socket: hcomm_crds::contract::ascend::POD_RESOURCES_SOCKET.into(),
        }
    }
}

/// What every agent task needs.
pub struct Context {
    pub cfg: AgentConfig,
    pub client: kube::Client,
    pub metrics: Metrics,
    pub hub: Hub,
    /// The member Pods' own local-API sockets, served from [`Context::hub`].
    pub pod_sockets: Arc<crate::local_api::pods::PodSockets>,
    pub inventory: tokio::sync::RwLock<Inventory>,
    pub weights: Arc<dyn WeightsSyncer>,
    /// Events about member Pods and this node, written off the caller's path and keyed
    /// with their note (`hcomm_events`).
    pub events: hcomm_events::EventSink,
    /// Latest link tests, published in `HcommNode.status.linkTests`.
    pub link_tests: Mutex<Vec<LinkTestResult>>,
    /// Peers (node, data address) of the members on this node, for the health probes: the
    /// union of [`Context::member_peers`], recomputed whenever a member's set changes.
    pub peers: Mutex<Vec<(String, String)>>,
    /// Each member's peers (by member key) from its latest plan: replaced at every epoch it
    /// joins and dropped when it ends, so peers that left the table are no longer probed.
    pub member_peers: Mutex<std::collections::BTreeMap<String, Vec<(String, String)>>>,
    /// The groups, as (namespace, group), with a member Pod on this node; None until the
    /// member driver has listed the node's Pods once. These are the groups the agent
    /// watches ([`crate::member::nudge::watch_groups`]); weights cleanup removes the link
    /// of a group that has had none here for its grace.
    pub groups_here: tokio::sync::watch::Sender<Option<BTreeSet<(String, String)>>>,
    /// Wakes a group's member tasks when its HcommGroup changes.
    pub nudges: crate::member::nudge::GroupNudges,
    /// The groups' secrets (comm domain and weight sync).
    pub group_secrets: Arc<crate::group_secrets::GroupSecrets>,
}

impl Context {
    pub fn new(cfg: AgentConfig, client: kube::Client, weights: Arc<dyn WeightsSyncer>) -> Context {
        let metrics = Metrics::new();
        let events = hcomm_events::EventSink::start(
            client.clone(),
            hcomm_events::Reporter {
                controller: crate::FIELD_MANAGER.into(),
                instance: cfg.node_name.clone(),
            },
            metrics.events_dropped.clone(),
            metrics.event_write_failures.clone(),
        );
        let hub = Hub::default();
        let pod_sockets = Arc::new(crate::local_api::pods::PodSockets::new(
            cfg.pod_sockets_dir.clone(),
            hub.clone(),
            cfg.local_api_access(),
            &cfg.kubelet_root_dir,
        ));
        let group_secrets = Arc::new(crate::group_secrets::GroupSecrets::new(
            client.clone(),
            cfg.secrets_namespace.clone(),
            cfg.group_secret_dir.clone(),
            cfg.probe_secret.as_slice() == INSECURE_DEFAULT_SECRET,
        ));
        Context {
            group_secrets,
            cfg,
            client,
            metrics,
            hub,
            pod_sockets,
            inventory: tokio::sync::RwLock::new(Inventory::default()),
            weights,
            events,
            link_tests: Mutex::new(Vec::new()),
            peers: Mutex::new(Vec::new()),
            member_peers: Mutex::new(Default::default()),
            groups_here: tokio::sync::watch::Sender::new(None),
            nudges: Default::default(),
        }
    }

    /// Sets member `key`'s peers for the health probes (None: the member is gone), and
    /// recomputes the union the probes read. The union's addresses are also the node's
    /// known peers for the probe, chunk and comm listeners: they take slots from a pool of
    /// their own, which a flood from unknown addresses cannot fill
    /// (`hcomm_comm::listen`). They were checked against the members' `HcommNode`s before
    /// they got here (`member::ranktable_members`).
    pub fn set_member_peers(&self, key: &str, peers: Option<&[(String, String)]>) {
        let mut by_member = self.member_peers.lock().unwrap_or_else(|e| e.into_inner());
        let union = replace_member_peers(&mut by_member, key, peers);
        let known: Vec<std::net::IpAddr> = union
            .iter()
            .filter_map(|(_, address)| address.parse().ok())
            .collect();
        let listeners = &self.metrics.listeners;
        for guard in [&listeners.probe, &listeners.weights, &listeners.comm] {
            guard.set_known(known.iter().copied());
        }
        *self.peers.lock().unwrap_or_else(|e| e.into_inner()) = union;
    }
}

/// Replaces member `key`'s probe peers with `peers` (removes them on None) and returns
/// the union over all members, each peer once (pure). A member's set is replaced, never
/// merged, at each epoch: a peer the member's new rank table no longer names (a node that
/// left, or a forged table's server) is probed no more once no member names it.
fn replace_member_peers(
    by_member: &mut std::collections::BTreeMap<String, Vec<(String, String)>>,
    key: &str,
    peers: Option<&[(String, String)]>,
) -> Vec<(String, String)> {
    match peers {
        Some(p) => {
            by_member.insert(key.to_owned(), p.to_vec());
        }
        None => {
            by_member.remove(key);
        }
    }
    let mut union: Vec<(String, String)> = Vec::new();
    for x in by_member.values().flatten() {
        if !union.contains(x) {
            union.push(x.clone());
        }
    }
    union
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::replace_member_peers;

    fn peer(node: &str) -> (String, String) {
        (node.to_owned(), format!("{node}-ip"))
    }

    #[test]
    fn a_later_epoch_prunes_the_peers_its_table_no_longer_names() {
        let mut by_member = BTreeMap::new();
        let union = replace_member_peers(&mut by_member, "ns/a-0", Some(&[peer("n1"), peer("n2")]));
        assert_eq!(union, vec![peer("n1"), peer("n2")]);
        // Another member shares n2.
        let union = replace_member_peers(&mut by_member, "ns/b-0", Some(&[peer("n2")]));
        assert_eq!(union, vec![peer("n1"), peer("n2")]);
        // a-0's next epoch names n3 instead of n1 and n2: n1 goes, n2 stays for b-0.
        let union = replace_member_peers(&mut by_member, "ns/a-0", Some(&[peer("n3")]));
        assert_eq!(union, vec![peer("n3"), peer("n2")]);
        // b-0 leaves: only a-0's peers remain; a-0 leaves: none.
        assert_eq!(
            replace_member_peers(&mut by_member, "ns/b-0", None),
            vec![peer("n3")]
        );
        assert!(replace_member_peers(&mut by_member, "ns/a-0", None).is_empty());
    }
}
