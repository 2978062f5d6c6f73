//! In-memory fakes of the member's ports ([`super::ports`]), for driving the member task
//! without a cluster, a network or a worker. Each fake is a cheap clonable handle: the
//! test keeps one clone to script answers and read what the task did, the task owns the
//! other. Time is tokio's (tests run with it paused); [`PausedClock`] derives the wall
//! clock from it so drain deadlines move with the paused clock.
//! Size: one fake per port, side by side so a test's whole world reads in one place.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use hcomm_crds::contract::PodReason;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::group::{GroupView, PublishedTable, ReadAt};
use super::ports::{
    Allocations, Clock, Cluster, CommDomain, JoinError, JoinSpec, Verifier, Worker,
};
use super::ranktable::{RankTable, plan};
use super::ranktable_members::MemberAddresses;
use super::spec::MemberSpec;
use super::state::CondUpdate;
use super::verify::{Against, EarlySources, NicPassed, NpuSite, Verified, with_npu_check};
use super::versions_check::NodeVersions;
use super::weights::{
    PeerFeed, SyncFailure, SyncFuture, WeightsOutcome, WeightsRequest, WeightsSyncer,
};
use crate::ascend::hccn::conf::{self, HccnConf};
use crate::ascend::hccn::observe::DeviceObservation;
use crate::ascend::hccn::output::PingResult;
use crate::ascend::hccn::port::{NodeObservation, NpuNetwork, PeerTls};
use crate::error::{Error, Result};
use crate::local_api::{Assignment, Notice};
use crate::nic::Chosen;
use crate::nic::verify::Verdict;

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the fake API server holds and what the member wrote to it.
#[derive(Default)]
pub struct ClusterState {
    pub group: GroupView,
    /// None: the rank-table ConfigMap does not exist (yet).
    pub table: Option<(RankTable, u64)>,
    /// The ConfigMap's member list; None: it has none (every task counts as listed).
    pub members: Option<std::collections::BTreeSet<String>>,
    pub arriving: Vec<String>,
    /// Every condition written, in order.
    pub conditions: Vec<CondUpdate>,
    /// Every Event published: (warning, reason, message).
    pub events: Vec<(bool, PodReason, String)>,
    /// The `HcommNode` versions of the group's nodes (empty: none published).
    pub node_versions: Vec<NodeVersions>,
    /// The members' node addresses; None: every server of the current table is a
    /// member's node (a table the operator wrote).
    pub member_addresses: Option<MemberAddresses>,
    /// Data addresses the node's own link probes find unreachable.
    pub unreachable: Vec<String>,
    /// How long each condition write takes; its conditions land at its end.
    pub write_time: Duration,
    /// The rank-table ConfigMap's `resourceVersion`.
    pub table_revision: Option<String>,
    /// The table revision each read of the members' addresses was asked to be no older
    /// than, in order: verifications' and joins' alike.
    pub member_reads_at: Vec<Option<String>>,
    /// How each read of the rank table was asked to be answered, in order.
    pub table_reads_at: Vec<ReadAt>,
}

#[derive(Clone, Default)]
pub struct FakeCluster(pub Arc<Mutex<ClusterState>>);

impl FakeCluster {
    pub fn with<R>(&self, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        f(&mut lock(&self.0))
    }

    /// The last status written for condition `type_`, with its reason.
    pub fn condition(&self, type_: &str) -> Option<(bool, PodReason)> {
        self.with(|s| {
            s.conditions
                .iter()
                .rev()
                .find(|c| c.type_ == type_)
                .map(|c| (c.status, c.reason))
        })
    }

    /// The condition writes as (type, status, reason), in order.
    pub fn writes(&self) -> Vec<(&'static str, bool, PodReason)> {
        self.with(|s| {
            s.conditions
                .iter()
                .map(|c| (c.type_, c.status, c.reason))
                .collect()
        })
    }

    pub fn event_reasons(&self) -> Vec<PodReason> {
        self.with(|s| s.events.iter().map(|e| e.1).collect())
    }
}

impl Cluster for FakeCluster {
    fn group(&self, _at: ReadAt) -> BoxFuture<'_, Result<GroupView>> {
        let g = self.with(|s| s.group.clone());
        async move { Ok(g) }.boxed()
    }

    fn rank_table(&self, at: ReadAt) -> BoxFuture<'_, Result<PublishedTable>> {
        let t = self.with(|s| {
            s.table_reads_at.push(at);
            s.table.clone().map(|(table, epoch)| PublishedTable {
                table,
                epoch,
                members: s.members.clone(),
                revision: s.table_revision.clone(),
            })
        });
        async move {
            t.ok_or_else(|| Error::RankTable {
                name: "g-rank-table".into(),
                reason: "not found".into(),
            })
        }
        .boxed()
    }

    fn arriving_peers(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        let a = self.with(|s| s.arriving.clone());
        async move { Ok(a) }.boxed()
    }

    fn write_conditions(&self, updates: Vec<CondUpdate>) -> BoxFuture<'_, ()> {
        let took = self.with(|s| s.write_time);
        if took.is_zero() {
            self.with(|s| s.conditions.extend(updates));
            return async {}.boxed();
        }
        async move {
            tokio::time::sleep(took).await;
            self.with(|s| s.conditions.extend(updates));
        }
        .boxed()
    }

    fn event(&self, warning: bool, reason: PodReason, message: String) -> BoxFuture<'_, ()> {
        self.with(|s| s.events.push((warning, reason, message)));
        async {}.boxed()
    }

    fn group_node_versions(&self) -> BoxFuture<'_, Result<Vec<NodeVersions>>> {
        let v = self.with(|s| s.node_versions.clone());
        async move { Ok(v) }.boxed()
    }

    fn member_addresses(
        &self,
        table_revision: Option<String>,
    ) -> BoxFuture<'_, Result<MemberAddresses>> {
        let m = self.with(|s| {
            s.member_reads_at.push(table_revision);
            s.member_addresses.clone().unwrap_or_else(|| {
                let mut m = MemberAddresses::default();
                for server in s.table.iter().flat_map(|(t, _)| t.servers()) {
                    if let Ok(ip) = server.host_address().parse() {
                        m.by_node
                            .entry(server.server_id.to_owned())
                            .or_default()
                            .insert(ip);
                    }
                }
                m
            })
        });
        async move { Ok(m) }.boxed()
    }

    fn unreachable_peers(&self) -> Vec<String> {
        self.with(|s| s.unreachable.clone())
    }
}

/// How the fake verification answers.
#[derive(Clone, Debug)]
pub enum VerifyScript {
    /// Chooses `ip` as the data address and plans from the table.
    Pass,
    Fail(PodReason),
    /// Never answers.
    Hang,
}

#[derive(Clone)]
pub struct FakeVerifier {
    pub node: String,
    pub ip: IpAddr,
    pub script: Arc<Mutex<VecDeque<VerifyScript>>>,
    /// When set, the scripted NIC verification runs beside the real NPU network check
    /// ([`with_npu_check`]) against this fake NPU network, as production does.
    pub npu: Option<FakeNpu>,
    /// When set, `backend: hccl`'s runtime is missing with this message (tcp needs none).
    pub hccl_missing: Arc<Mutex<Option<String>>>,
    /// The table revision and group UID of each verification, in order.
    pub verified_against: Arc<Mutex<Vec<VerifiedAgainst>>>,
    /// What the early sources check answers: Ok (the table's other servers) or this error.
    pub early: Arc<Mutex<std::result::Result<(), String>>>,
    /// The data interface the early sources check chooses (the verification: `data0`).
    pub early_nic: Arc<Mutex<String>>,
}

/// What one verification was given besides the table: (table revision, group UID).
pub type VerifiedAgainst = (Option<String>, String);

impl Verifier for FakeVerifier {
    fn backend_runtime(
        &self,
        backend: hcomm_crds::Backend,
    ) -> BoxFuture<'_, std::result::Result<(), String>> {
        let missing = lock(&self.hccl_missing).clone();
        async move {
            match (backend, missing) {
                (hcomm_crds::Backend::Hccl, Some(m)) => Err(m),
                _ => Ok(()),
            }
        }
        .boxed()
    }

    fn verify<'a>(
        &'a self,
        spec: &'a MemberSpec,
        _socket_ifname: Option<&'a str>,
        connect_timeout: Duration,
        against: Against<'a>,
        nic_passed: Option<NicPassed>,
    ) -> BoxFuture<'a, Verified> {
        let table = against.table;
        lock(&self.verified_against).push((
            against.table_revision.map(str::to_owned),
            against.group_uid.to_owned(),
        ));
        let script = lock(&self.script).pop_front().unwrap_or(VerifyScript::Pass);
        let nic = async move {
            let fail = |reason: PodReason| Verified {
                verdict: Verdict {
                    ok: false,
                    reason,
                    message: format!("scripted {reason}"),
                },
                chosen: None,
                plan: None,
            };
            match script {
                VerifyScript::Hang => std::future::pending().await,
                VerifyScript::Fail(r) => fail(r),
                VerifyScript::Pass => {
                    let devs = spec.devices.clone().unwrap_or_default();
                    let ip = self.ip.to_string();
                    match plan(table, &self.node, Some(&ip), &devs, 29600) {
                        Ok(p) => Verified {
                            verdict: Verdict {
                                ok: true,
                                reason: PodReason::Verified,
                                message: "ok".into(),
                            },
                            chosen: Some(Chosen {
                                name: "data0".into(),
                                ip: self.ip,
                                why: "fake",
                            }),
                            plan: Some(p),
                        },
                        Err(_) => fail(PodReason::DeviceMismatch),
                    }
                }
            }
        };
        async move {
            match &self.npu {
                None => nic.await,
                Some(npu) => {
                    let site = NpuSite {
                        node: &self.node,
                        data_ip: None,
                        table,
                        budget: connect_timeout,
                    };
                    with_npu_check(nic, npu, spec, site, nic_passed).await
                }
            }
        }
        .boxed()
    }

    fn early_sources<'a>(
        &'a self,
        _spec: &'a MemberSpec,
        _socket_ifname: Option<&'a str>,
        against: Against<'a>,
    ) -> BoxFuture<'a, std::result::Result<EarlySources, String>> {
        let ip = self.ip.to_string();
        let peers = super::ranktable::sources(against.table, &self.node, Some(&ip));
        let early = lock(&self.early).clone();
        let nic = lock(&self.early_nic).clone();
        async move {
            early?;
            Ok(EarlySources {
                chosen: Chosen {
                    name: nic,
                    ip: self.ip,
                    why: "fake",
                },
                peers,
            })
        }
        .boxed()
    }
}

/// What the fake NPU network holds, and the pings it was asked for.
pub struct NpuState {
    pub conf: std::result::Result<HccnConf, String>,
    pub devices: Vec<DeviceObservation>,
    pub peer_tls: Vec<PeerTls>,
    /// Addresses that never answer a ping.
    pub unreachable: Vec<IpAddr>,
    /// How long each ping takes (tokio time); past the deadline it is a tool timeout.
    pub ping_time: Duration,
    /// Every ping asked for: (local device, address).
    pub pings: Vec<(u32, IpAddr)>,
}

#[derive(Clone)]
pub struct FakeNpu(pub Arc<Mutex<NpuState>>);

impl FakeNpu {
    /// A node whose devices `(id, address)` are configured, up, healthy, TLS off, and
    /// whose peers published `peer_tls`.
    pub fn healthy(devices: &[(u32, &str)], peer_tls: Vec<PeerTls>) -> FakeNpu {
        let conf: String = devices
            .iter()
            .map(|(id, ip)| format!("address_{id}={ip}\nnetmask_{id}=255.255.255.0\n"))
            .collect();
        FakeNpu(Arc::new(Mutex::new(NpuState {
            conf: Ok(conf::parse(&conf).expect("valid hccn.conf")),
            devices: devices
                .iter()
                .map(|(id, ip)| DeviceObservation::healthy(*id, ip.parse().expect("ipv4"), false))
                .collect(),
            peer_tls,
            unreachable: Vec::new(),
            ping_time: Duration::from_millis(50),
            pings: Vec::new(),
        })))
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut NpuState) -> R) -> R {
        f(&mut lock(&self.0))
    }
}

impl NpuNetwork for FakeNpu {
    fn observe<'a>(
        &'a self,
        devices: &'a [u32],
        _deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, NodeObservation> {
        let o = self.with(|s| NodeObservation {
            conf: s.conf.clone(),
            devices: s
                .devices
                .iter()
                .filter(|d| devices.contains(&d.id))
                .cloned()
                .collect(),
        });
        async move { o }.boxed()
    }

    fn ping(
        &self,
        device: u32,
        address: IpAddr,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'_, std::result::Result<PingResult, String>> {
        let (time, lost) = self.with(|s| {
            s.pings.push((device, address));
            (s.ping_time, s.unreachable.contains(&address))
        });
        async move {
            let done = tokio::time::Instant::now() + time;
            if done > deadline {
                tokio::time::sleep_until(deadline).await;
                return Err(format!(
                    "`hccn_tool -i {device} -ping -g address {address}` timed out"
                ));
            }
            tokio::time::sleep_until(done).await;
            Ok(PingResult {
                transmitted: 3,
                received: if lost { 0 } else { 3 },
            })
        }
        .boxed()
    }

    fn peer_tls<'a>(
        &'a self,
        _peers: &'a [String],
        _deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Vec<PeerTls>> {
        let p = self.with(|s| s.peer_tls.clone());
        async move { p }.boxed()
    }
}

/// One scripted sync: how long it takes (tokio time) and how it ends.
pub type SyncScript = (Duration, std::result::Result<WeightsOutcome, SyncFailure>);

#[derive(Clone, Default)]
pub struct FakeWeights {
    /// Unscripted syncs succeed at once.
    pub script: Arc<Mutex<VecDeque<SyncScript>>>,
    /// Syncs begun.
    pub started: Arc<Mutex<u32>>,
    /// Syncs finished (the transfer ran to its end).
    pub finished: Arc<Mutex<u32>>,
    /// What each sync begun was asked for, in order.
    pub requests: Arc<Mutex<Vec<WeightsRequest>>>,
    /// The peer names each running sync was handed later (`sync_growing`), in order.
    pub grown: Arc<Mutex<Vec<Vec<String>>>>,
}

pub fn synced() -> WeightsOutcome {
    WeightsOutcome {
        path: Some("/w/current".into()),
        bytes: 1 << 20,
        seconds: 1.0,
        message: "1 MiB".into(),
        warnings: Vec::new(),
    }
}

impl WeightsSyncer for FakeWeights {
    fn sync<'a>(&'a self, req: &'a WeightsRequest) -> SyncFuture<'a> {
        lock(&self.requests).push(req.clone());
        let (delay, result) = lock(&self.script)
            .pop_front()
            .unwrap_or((Duration::ZERO, Ok(synced())));
        *lock(&self.started) += 1;
        async move {
            tokio::time::sleep(delay).await;
            *lock(&self.finished) += 1;
            result
        }
        .boxed()
    }

    fn sync_growing<'a>(&'a self, req: &'a WeightsRequest, mut more: PeerFeed) -> SyncFuture<'a> {
        let sync = self.sync(req);
        async move {
            tokio::pin!(sync);
            loop {
                tokio::select! {
                    r = &mut sync => return r,
                    Ok(()) = more.changed() => {
                        let names = more.borrow_and_update().iter().map(|(n, _)| n.clone()).collect();
                        lock(&self.grown).push(names);
                    }
                }
            }
        }
        .boxed()
    }
}

/// One scripted join: how long it takes and how it ends.
pub type JoinScript = (Duration, std::result::Result<(), JoinError>);

#[derive(Default)]
pub struct DomainState {
    /// Unscripted joins succeed at once.
    pub script: VecDeque<JoinScript>,
    /// The epoch of every join attempt, in order.
    pub attempts: Vec<u64>,
    /// The epoch of the serving communicator.
    pub serving: Option<u64>,
    pub leaves: u32,
}

#[derive(Clone, Default)]
pub struct FakeDomain(pub Arc<Mutex<DomainState>>);

impl FakeDomain {
    pub fn with<R>(&self, f: impl FnOnce(&mut DomainState) -> R) -> R {
        f(&mut lock(&self.0))
    }
}

impl CommDomain for FakeDomain {
    fn join<'a>(
        &'a mut self,
        spec: &'a JoinSpec,
    ) -> BoxFuture<'a, std::result::Result<(), JoinError>> {
        let (delay, result) = self.with(|s| {
            s.attempts.push(spec.epoch);
            s.script.pop_front().unwrap_or((Duration::ZERO, Ok(())))
        });
        async move {
            tokio::time::sleep(delay).await;
            if result.is_ok() {
                self.with(|s| s.serving = Some(spec.epoch));
            }
            result
        }
        .boxed()
    }

    fn leave(&mut self) {
        self.with(|s| {
            s.serving = None;
            s.leaves += 1;
        });
    }

    fn group_secret(&self) -> Option<Vec<u8>> {
        self.with(|s| s.serving.map(|_| b"fake group secret".to_vec()))
    }
}

#[derive(Clone)]
pub struct FakeWorker {
    pub in_flight: Arc<watch::Sender<Option<u64>>>,
    pub serving: Arc<watch::Sender<bool>>,
    pub cannot_serve: Arc<watch::Sender<Option<String>>>,
    pub notices: Arc<Mutex<Vec<Notice>>>,
    pub assignments: Arc<Mutex<Vec<Assignment>>>,
    pub forgotten: Arc<Mutex<bool>>,
}

impl Default for FakeWorker {
    fn default() -> FakeWorker {
        FakeWorker {
            in_flight: Arc::new(watch::Sender::new(None)),
            serving: Arc::new(watch::Sender::new(false)),
            cannot_serve: Arc::new(watch::Sender::new(None)),
            notices: Arc::default(),
            assignments: Arc::default(),
            forgotten: Arc::default(),
        }
    }
}

impl Worker for FakeWorker {
    fn assign(&self, a: Assignment) {
        lock(&self.assignments).push(a);
    }

    fn notify(&self, n: Notice) {
        lock(&self.notices).push(n);
    }

    fn in_flight(&self) -> watch::Receiver<Option<u64>> {
        self.in_flight.subscribe()
    }

    fn serving(&self) -> watch::Receiver<bool> {
        self.serving.subscribe()
    }

    fn cannot_serve(&self) -> watch::Receiver<Option<String>> {
        self.cannot_serve.subscribe()
    }

    fn forget(&self) {
        *lock(&self.forgotten) = true;
    }
}

/// A wall clock that moves with tokio's (paused) clock from a fixed start.
#[derive(Clone)]
pub struct PausedClock {
    base: Timestamp,
    start: tokio::time::Instant,
}

impl PausedClock {
    pub fn starting_now() -> PausedClock {
        PausedClock {
            base: "2026-12-01T12:00:00Z".parse().expect("valid"),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for PausedClock {
    fn now(&self) -> Timestamp {
        let d = tokio::time::Instant::now() - self.start;
        self.base + d
    }
}

/// What the fake kubelet answers for the member's Pod: the device ids (`Ok(None)`: the
/// Pod is not listed, the default) or an error; `calls` counts the questions.
#[derive(Clone)]
pub struct FakeAllocations {
    pub answer:
        Arc<Mutex<std::result::Result<Option<Vec<String>>, hcomm_kubelet::PodResourcesError>>>,
    pub calls: Arc<Mutex<u32>>,
}

impl Default for FakeAllocations {
    fn default() -> FakeAllocations {
        FakeAllocations {
            answer: Arc::new(Mutex::new(Ok(None))),
            calls: Arc::default(),
        }
    }
}

impl FakeAllocations {
    pub fn set(
        &self,
        answer: std::result::Result<Option<Vec<String>>, hcomm_kubelet::PodResourcesError>,
    ) {
        *lock(&self.answer) = answer;
    }
}

impl Allocations for FakeAllocations {
    fn kubelet_devices<'a>(
        &'a self,
        _namespace: &'a str,
        _pod: &'a str,
        _resource: &'a str,
    ) -> BoxFuture<'a, std::result::Result<Option<Vec<String>>, hcomm_kubelet::PodResourcesError>>
    {
        *lock(&self.calls) += 1;
        let answer = lock(&self.answer).clone();
        async move { answer }.boxed()
    }
}
