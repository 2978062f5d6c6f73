//! The test kit of the member task: one member on the in-memory fakes of its ports
//! ([`super::fakes`]), with the handles a test scripts and inspects, and the Pod's watch.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hcomm_crds::contract::POD_MEMBER_READY;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::fakes::{
    FakeAllocations, FakeCluster, FakeDomain, FakeNpu, FakeVerifier, FakeWeights, FakeWorker,
    PausedClock,
};
use super::ports::{Clock, JoinError};
use super::ranktable::RankTable;
use super::spec::MemberSpec;
use super::state::Phase;
use super::task::{Ports, drive};
use crate::ascend::hccn::port::PeerTls;
use crate::config::AgentConfig;
use crate::metrics::Metrics;
use hcomm_crds::contract::PodReason;

pub const NODE: &str = "node-a";

/// A table of two members: this one (node-a, device 0) and a peer (node-b, device 0).
pub fn table() -> RankTable {
    RankTable::parse(
        r#"{"version":"1.0","status":"completed","server_count":"2","server_list":[
        {"server_id":"node-a","host_ip":"127.0.0.1","device":[{"device_id":"0","rank_id":"0"}]},
        {"server_id":"node-b","host_ip":"127.0.0.2","device":[{"device_id":"0","rank_id":"1"}]}]}"#,
    )
    .expect("valid table")
}

/// The two-member table with NPU addresses: node-a device 0 at 10.0.0.1, node-b device 0
/// at 10.0.1.1.
pub fn npu_table() -> RankTable {
    RankTable::parse(
        r#"{"version":"1.0","status":"completed","server_count":"2","server_list":[
        {"server_id":"node-a","host_ip":"127.0.0.1","device":[{"device_id":"0","device_ip":"10.0.0.1","rank_id":"0"}]},
        {"server_id":"node-b","host_ip":"127.0.0.2","device":[{"device_id":"0","device_ip":"10.0.1.1","rank_id":"1"}]}]}"#,
    )
    .expect("valid table")
}

pub fn member() -> MemberSpec {
    MemberSpec {
        namespace: "ns".into(),
        pod: "m-0".into(),
        uid: "u-0".into(),
        node: NODE.into(),
        group: "g".into(),
        first_rank: Some(0),
        devices: Some(vec![0]),
        epoch: Some(1),
        ..MemberSpec::default()
    }
}

/// One member on fakes; the test keeps the handles and the Pod's watch.
pub struct Kit {
    pub cluster: FakeCluster,
    pub verifier: FakeVerifier,
    pub weights: FakeWeights,
    pub domain: FakeDomain,
    pub worker: FakeWorker,
    pub allocations: FakeAllocations,
    pub clock: PausedClock,
    pub pod: watch::Sender<Option<MemberSpec>>,
    pub nudge: watch::Sender<()>,
}

impl Kit {
    pub fn new() -> Kit {
        let cluster = FakeCluster::default();
        cluster.with(|s| {
            s.table = Some((table(), 1));
            // The tests' deadlines are written for a 30 s connect timeout (a tcp group's
            // usual setting), whatever the API's default is.
            s.group.comm.connect_timeout_seconds = 30;
        });
        Kit {
            cluster,
            verifier: FakeVerifier {
                node: NODE.into(),
                ip: "127.0.0.1".parse::<IpAddr>().unwrap(),
                script: Default::default(),
                npu: None,
                hccl_missing: Default::default(),
                verified_against: Default::default(),
                early: Arc::new(std::sync::Mutex::new(Ok(()))),
                early_nic: Arc::new(std::sync::Mutex::new("data0".into())),
            },
            weights: FakeWeights::default(),
            domain: FakeDomain::default(),
            worker: FakeWorker::default(),
            allocations: FakeAllocations::default(),
            clock: PausedClock::starting_now(),
            pod: watch::Sender::new(Some(member())),
            nudge: watch::Sender::new(()),
        }
    }

    /// A member of an NPU group: the table carries device addresses, and the NPU network
    /// check runs against `npu` (healthy: node-a device 0 at 10.0.0.1, TLS off like
    /// node-b's published device 0). The test breaks it before [`Kit::start`].
    pub fn npu() -> (Kit, FakeNpu) {
        let mut kit = Kit::new();
        kit.cluster.with(|s| s.table = Some((npu_table(), 1)));
        let npu = FakeNpu::healthy(
            &[(0, "10.0.0.1")],
            vec![PeerTls {
                node: "node-b".into(),
                device: 0,
                enabled: Some(false),
            }],
        );
        kit.verifier.npu = Some(npu.clone());
        (kit, npu)
    }

    pub fn start(&self) -> JoinHandle<Phase> {
        let ports = Ports {
            cluster: Arc::new(self.cluster.clone()),
            verifier: Box::new(self.verifier.clone()),
            weights: Arc::new(self.weights.clone()),
            domain: Box::new(self.domain.clone()),
            worker: Box::new(self.worker.clone()),
            allocations: Box::new(self.allocations.clone()),
            clock: Box::new(self.clock.clone()),
        };
        let mut cfg = AgentConfig::new(NODE);
        // The kit's hosts are loopback addresses (`--allow-loopback-peers`, as the
        // loopback testbed's agents run): every join checks its table's peers.
        cfg.allow_loopback_peers = true;
        tokio::spawn(drive(
            cfg,
            Metrics::new(),
            ports,
            self.pod.subscribe(),
            self.nudge.subscribe(),
        ))
    }

    /// Waits (in paused time, at most thirty virtual minutes) until `cond` holds.
    pub async fn until(&self, what: &str, cond: impl Fn(&Kit) -> bool) {
        for _ in 0..18_000 {
            if cond(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "timed out waiting for {what}; conditions written: {:?}",
            self.cluster.writes()
        );
    }

    pub async fn until_ready(&self) {
        self.until("the gate to open", |k| {
            k.cluster.condition(POD_MEMBER_READY) == Some((true, PodReason::MemberReady))
        })
        .await;
    }

    pub fn request_drain(&self) {
        let at = self.clock.now().to_string();
        self.pod.send_modify(|p| {
            if let Some(p) = p {
                p.drain_requested = Some(at);
            }
        });
    }

    /// The operator's `hcomm.io/standby` label, set or removed.
    pub fn set_standby(&self, standby: bool) {
        self.pod.send_modify(|p| {
            if let Some(p) = p {
                p.standby = standby;
            }
        });
    }

    pub fn delete_pod(&self) {
        self.pod.send_replace(None);
    }

    pub fn set_table_epoch(&self, epoch: u64) {
        self.cluster.with(|s| s.table = Some((table(), epoch)));
        self.nudge.send_replace(());
    }
}

pub fn waiting(message: &str) -> JoinError {
    JoinError {
        message: message.into(),
        waiting: true,
    }
}
