//! In-memory fakes of the member's ports ([`super::ports`]), for driving the member task
//! without a cluster, a network or a worker. Each fake is a cheap clonable handle: the
//! test keeps one clone to script answers and read what the task did, the task owns the
//! other. Time is tokio's (tests run with it paused); [`PausedClock`] derives the wall
//! clock from it so drain deadlines move with the paused clock.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use hcomm_crds::contract::PodReason;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::group::GroupView;
use super::ports::{
    Allocations, Clock, Cluster, CommDomain, JoinError, JoinSpec, Verifier, Worker,
};
use super::ranktable::{RankTable, plan};
use super::spec::MemberSpec;
use super::state::CondUpdate;
use super::verify::Verified;
use super::weights::{SyncFailure, SyncFuture, WeightsOutcome, WeightsRequest, WeightsSyncer};
use crate::error::{Error, Result};
use crate::local_api::{Assignment, Notice};
use crate::nic::Chosen;
use crate::nic::verify::Verdict;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the fake API server holds and what the member wrote to it.
#[derive(Default)]
pub struct ClusterState {
    pub group: GroupView,
    /// None: the rank-table ConfigMap does not exist (yet).
    pub table: Option<(RankTable, u64)>,
    pub arriving: Vec<String>,
    /// Every condition written, in order.
    pub conditions: Vec<CondUpdate>,
    /// Every Event published: (warning, reason, message).
    pub events: Vec<(bool, PodReason, String)>,
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
    fn group(&self) -> BoxFuture<'_, Result<GroupView>> {
        let g = self.with(|s| s.group.clone());
        async move { Ok(g) }.boxed()
    }

    fn rank_table(&self) -> BoxFuture<'_, Result<(RankTable, u64)>> {
        let t = self.with(|s| s.table.clone());
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
        self.with(|s| s.conditions.extend(updates));
        async {}.boxed()
    }

    fn event(&self, warning: bool, reason: PodReason, message: String) -> BoxFuture<'_, ()> {
        self.with(|s| s.events.push((warning, reason, message)));
        async {}.boxed()
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
}

impl Verifier for FakeVerifier {
    fn verify<'a>(
        &'a self,
        spec: &'a MemberSpec,
        _socket_ifname: Option<&'a str>,
        _connect_timeout: Duration,
        table: &'a RankTable,
    ) -> BoxFuture<'a, Verified> {
        let script = lock(&self.script).pop_front().unwrap_or(VerifyScript::Pass);
        async move {
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
        }
        .boxed()
    }
}

/// One scripted sync: how long it takes (tokio time) and how it ends.
pub type SyncScript = (Duration, std::result::Result<WeightsOutcome, SyncFailure>);

#[derive(Clone, Default)]
pub struct FakeWeights {
    /// Unscripted syncs succeed at once.
    pub script: Arc<Mutex<VecDeque<SyncScript>>>,
    /// Syncs finished (the transfer ran to its end).
    pub finished: Arc<Mutex<u32>>,
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
    fn sync<'a>(&'a self, _req: &'a WeightsRequest) -> SyncFuture<'a> {
        let (delay, result) = lock(&self.script)
            .pop_front()
            .unwrap_or((Duration::ZERO, Ok(synced())));
        async move {
            tokio::time::sleep(delay).await;
            *lock(&self.finished) += 1;
            result
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
}

#[derive(Clone)]
pub struct FakeWorker {
    pub in_flight: Arc<watch::Sender<Option<u64>>>,
    pub serving: Arc<watch::Sender<bool>>,
    pub notices: Arc<Mutex<Vec<Notice>>>,
    pub assignments: Arc<Mutex<Vec<Assignment>>>,
    pub forgotten: Arc<Mutex<bool>>,
}

impl Default for FakeWorker {
    fn default() -> FakeWorker {
        FakeWorker {
            in_flight: Arc::new(watch::Sender::new(None)),
            serving: Arc::new(watch::Sender::new(false)),
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
