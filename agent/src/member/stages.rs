//! The member task's stages — what each [`Action`](super::state::Action) does through the
//! ports, reporting its outcome as the next [`Event`]: verification (bounded by
//! [`verify_deadline`]), weight sync (finishing a transfer the deleted Pod no longer
//! needs, but not joining after it), joining the domain (waiting for members still on their
//! way, following a newer epoch), waiting for the worker, and the drain.
//!
//! Size: one `impl Run` block per stage of the same task, each reading the others' state;
//! splitting it by stage would only move the shared fields' access into more files.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use super::domain::DomainConfig;
use super::ports::{JoinError, JoinSpec};
use super::prefetch::{Prefetch, Start as PrefetchStart};
use super::ranktable::{ControlPlan, PeerRefusal, RankTable};
use super::state::{Event, WorkerNotice};
use super::task::{Run, pod_gone};
use super::verify::Against;
use super::weights::WeightsRequest;
use crate::local_api::{Assignment, Notice};
use crate::nic::Chosen;
use crate::weights::Place;
use hcomm_crds::contract::PodReason;

/// The peers of a plan (server id, address) whose address is among `unreachable` (pure):
/// the members a join waits for the operator to replace rather than failing.
pub fn lost_peers(peers: &[(String, String)], unreachable: &[String]) -> Vec<String> {
    peers
        .iter()
        .filter(|(_, addr)| unreachable.contains(addr))
        .map(|(server, _)| server.clone())
        .collect()
}

/// Whether a member with this Pod spec is leaving: drained, being deleted, or gone.
fn spec_leaving(spec: &Option<super::spec::MemberSpec>) -> bool {
    spec.as_ref()
        .is_none_or(|s| s.deleting || s.drain_requested.is_some())
}

/// How long a join keeps waiting for members still verifying or syncing weights (see
/// [`Run::join_when_all_arrive`]); a sync of a large model over a slow link takes minutes.
const ARRIVAL_WAIT: Duration = Duration::from_secs(30 * 60);

/// Verification bounds its own probes by the connect timeout; this is the backstop for a
/// verification stuck elsewhere (an API read, the inventory lock): twice that, plus a
/// margin. Past it the member reports `hcomm.io/verified=False` with
/// [`PodReason::VerificationTimedOut`].
pub fn verify_deadline(connect_timeout: Duration) -> Duration {
    connect_timeout * 2 + Duration::from_secs(5)
}

/// Why [`Run::join_when_all_arrive`] gave up.
enum JoinStop {
    /// The domain could not be built.
    Failed(JoinError),
    /// The group planned a newer epoch (with this member in it) while this one waited.
    EpochMoved(u64),
}

impl Run {
    pub(super) async fn verify(&mut self) -> Event {
        let timeout = DomainConfig::from_comm(&self.group.comm).timeouts.connect;
        let deadline = verify_deadline(timeout);
        // One deadline for the whole verification, the backend's runtime check included.
        let until = tokio::time::Instant::now() + deadline;
        // First, as it needs no rank table: a `backend: hccl` group on a node whose HCCL
        // runtime cannot be loaded is refused here, whatever else would pass.
        let runtime = self.ports.verifier.backend_runtime(self.group.comm.backend);
        match tokio::time::timeout_at(until, runtime).await {
            Err(_) => return self.verify_timed_out(deadline),
            Ok(Err(message)) => {
                self.metrics
                    .verifications
                    .with_label_values(&[PodReason::HcclRuntimeUnavailable])
                    .inc();
                tracing::warn!(backend = ?self.group.comm.backend, %message, "verification");
                return Event::Verified {
                    ok: false,
                    reason: PodReason::HcclRuntimeUnavailable,
                    message,
                };
            }
            Ok(Ok(())) => {}
        }
        let Some((table, _)) = self.table.clone() else {
            return Event::Verified {
                ok: false,
                reason: PodReason::NoRankTable,
                message: "no rank table yet".into(),
            };
        };
        let ifname = self.socket_ifname();
        // The kubelet, the device plugin and the rank table must agree on the NPUs first,
        // within what is left of the one deadline.
        let begun = tokio::time::Instant::now();
        let left = until.saturating_duration_since(begun);
        if let Some(failed) = self.check_allocation(&table, left).await {
            return failed;
        }
        tracing::debug!(took = ?begun.elapsed(), "allocation checked");
        // An `hccl` group's nodes must run one driver and one CANN.
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if let Some(failed) = self.check_versions(left).await {
            return failed;
        }
        tracing::debug!(took = ?begun.elapsed(), "versions checked");
        // A sync begun before the member's own table (`super::early_sync`) is kept when
        // the verified request is one it serves; any other sync a verification began
        // stopped when it failed (see below).
        let early = self
            .prefetch
            .take()
            .filter(|p| p.start_kind() == PrefetchStart::Early);
        let (passed, nic_passed) = tokio::sync::oneshot::channel();
        let against = Against {
            table: &table,
            table_revision: self.table_revision.as_deref(),
            group_uid: &self.group.uid,
        };
        let checked = self.ports.verifier.verify(
            &self.spec,
            ifname.as_deref(),
            timeout,
            against,
            Some(passed),
        );
        let (checked, prefetch) = self
            .sync_once_nic_passed(tokio::time::timeout_at(until, checked), nic_passed, early)
            .await;
        let Ok(v) = checked else {
            return self.verify_timed_out(deadline);
        };
        if v.verdict.ok {
            self.prefetch = prefetch;
            // A passed verification checked this table's servers (`Verifier::verify`).
            self.table_checked = self.table_revision.clone();
        }
        self.metrics
            .verifications
            .with_label_values(&[v.verdict.reason])
            .inc();
        tracing::info!(ok = v.verdict.ok, reason = v.verdict.reason.as_str(), message = %v.verdict.message, "verification");
        self.chosen = v.chosen;
        self.plan = v.plan;
        if v.verdict.ok {
            self.publish_assignment();
        }
        Event::Verified {
            ok: v.verdict.ok,
            reason: v.verdict.reason,
            message: v.verdict.message,
        }
    }

    /// Runs the verification `checked` and, once its data NIC part passed, starts the weight
    /// sync beside the rest ([`super::prefetch`]) — or keeps the `early` one when it serves
    /// the verified request or takes its new sources ([`Prefetch::takes_on`]), and stops it
    /// otherwise; the caller drops the sync unless the whole verification passed.
    async fn sync_once_nic_passed<T>(
        &self,
        checked: impl std::future::Future<Output = T>,
        mut nic_passed: tokio::sync::oneshot::Receiver<(Chosen, ControlPlan)>,
        mut early: Option<Prefetch>,
    ) -> (T, Option<Prefetch>) {
        tokio::pin!(checked);
        let mut waiting = true;
        let mut started = None;
        loop {
            tokio::select! {
                // The NIC's word first: a verdict that came with it still has its sync.
                biased;
                passed = &mut nic_passed, if waiting => {
                    waiting = false;
                    if let Ok((chosen, plan)) = passed {
                        let req = self.weights_request(&chosen, Some(&plan));
                        let keep = early.as_mut().is_some_and(|e| e.takes_on(&req));
                        started = match early.take() {
                            Some(e) if keep => Some(e),
                            other => {
                                if let Some(e) = other {
                                    tracing::debug!("the early weight sync is for another set or interface; syncing anew");
                                    e.stop().await;
                                }
                                Some(Prefetch::start(self.ports.weights.clone(), req, PrefetchStart::NicPassed))
                            }
                        };
                    }
                }
                out = &mut checked => return (out, started.or(early)),
            }
        }
    }

    /// The interface rule of the data NIC: the group's, else the Pod's, else the node's.
    pub(super) fn socket_ifname(&self) -> Option<String> {
        self.group
            .comm
            .socket_ifname
            .clone()
            .or_else(|| self.spec.socket_ifname.clone())
            .or_else(|| self.cfg.socket_ifname.clone())
    }

    fn verify_timed_out(&self, deadline: Duration) -> Event {
        self.metrics
            .verifications
            .with_label_values(&[PodReason::VerificationTimedOut])
            .inc();
        Event::Verified {
            ok: false,
            reason: PodReason::VerificationTimedOut,
            message: format!("verification did not finish within {deadline:?}"),
        }
    }

    pub(super) fn publish_assignment(&self) {
        let Some(plan) = &self.plan else { return };
        let world = self.table.as_ref().map_or(0, |(t, _)| t.world()) as u32;
        let local = plan.devices_in_rank_order.len().max(1) as u32;
        self.ports.worker.assign(Assignment {
            group: self.spec.group.clone(),
            // The domain's dense numbering (the table's ids may have holes, see
            // `ranktable::plan`), not the Pod's rank label.
            rank: (plan.rank as u32) * local,
            world,
            local_ranks: local,
            rank_table_path: self.spec.rank_table_file.clone(),
            interface: self.chosen.as_ref().map(|c| c.name.clone()),
            devices: plan.devices_in_rank_order.clone(),
            weights_path: self.weights_path.clone(),
            epoch: self.planned_epoch(),
            processes: self.processes(),
            comm: self.worker_comm(plan),
            backend: crate::local_api::bootstrap::worker_backend(self.group.comm.backend),
        });
    }

    /// Where the worker's communicator of the planned epoch stands (see
    /// `local_api::bootstrap`): only once this member is in the group's domain, whose
    /// secret the placement derives from.
    fn worker_comm(&self, plan: &ControlPlan) -> Option<hcomm_crds::local_api::WorkerComm> {
        let secret = self.ports.domain.group_secret()?;
        let ip = self.chosen.as_ref()?.ip;
        let wp = crate::local_api::bootstrap::WorkerPlan {
            namespace: &self.spec.namespace,
            group: &self.spec.group,
            epoch: self.planned_epoch(),
            rank: plan.rank as u32,
            world: plan.world as u32,
            control_root: plan.root,
            control_own: std::net::SocketAddr::new(ip, plan.own_port),
        };
        match crate::local_api::bootstrap::worker_comm(&wp, &secret, &self.group.comm) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "no worker communicator placement");
                None
            }
        }
    }

    /// Syncs the weights, or takes the outcome of the sync begun when the data NIC passed
    /// ([`super::prefetch`]). A Pod deleted meanwhile ends the member ([`Event::PodGone`]),
    /// but only once the transfer finished: the set lands in the node's store either way
    /// (a replacement on this node reuses it), and no transfer is left half-written.
    pub(super) async fn sync_weights(&mut self) -> Event {
        let epoch = self.planned_epoch();
        let Some(chosen) = self.chosen.clone() else {
            return Event::WeightsFailed {
                reason: PodReason::SyncFailed,
                message: "no verified data interface".into(),
            };
        };
        let req = self.weights_request(&chosen, self.plan.as_ref());
        let sync = super::prefetch::outcome(self.prefetch.take(), self.ports.weights.clone(), req);
        tokio::pin!(sync);
        let result = tokio::select! {
            r = &mut sync => r,
            () = pod_gone(self.spec_rx.clone()) => {
                tracing::info!("pod deleted during the weight sync; finishing the transfer, then stopping");
                let _ = sync.await;
                return Event::PodGone;
            }
        };
        let warnings = match &result {
            Ok(o) => o.warnings.clone(),
            Err(f) => f.warnings.clone(),
        };
        for (reason, message) in warnings {
            self.ports.cluster.event(true, reason, message).await;
        }
        match result {
            Ok(o) => {
                self.metrics.sync_bytes.inc_by(o.bytes);
                if o.seconds > 0.0 {
                    self.metrics.sync_throughput.set(o.bytes as f64 / o.seconds);
                }
                self.weights_path = o.path.map(|p| p.display().to_string());
                self.publish_assignment();
                Event::WeightsSynced {
                    epoch,
                    message: o.message,
                }
            }
            Err(f) => Event::WeightsFailed {
                reason: f.reason,
                message: f.message,
            },
        }
    }

    /// What this member's sync asks for over `chosen`, with `plan`'s peers and stripe.
    pub(super) fn weights_request(
        &self,
        chosen: &Chosen,
        plan: Option<&ControlPlan>,
    ) -> WeightsRequest {
        WeightsRequest {
            namespace: self.spec.namespace.clone(),
            group: self.spec.group.clone(),
            group_uid: self.group.uid.clone(),
            pod: self.spec.pod.clone(),
            node: self.cfg.node_name.clone(),
            spec: self.group.weights.clone(),
            interface: chosen.name.clone(),
            local_ip: chosen.ip,
            peers: plan.map(|p| p.peers.clone()).unwrap_or_default(),
            place: match (plan, self.spec.member_index) {
                (Some(p), _) => Place::Stripe {
                    index: p.rank,
                    count: p.world,
                },
                (None, Some(index)) => Place::Spread(index.into()),
                (None, None) => Place::Unknown,
            },
            epoch: self.planned_epoch(),
        }
    }

    pub(super) async fn join(&mut self, epoch: u64) -> Event {
        // The table read before a long sync may be old: join the epoch planned now. Read
        // from the API server's cache (`Run::refresh_cached`): the agent's watch of the
        // table already wakes the member on every new epoch, and a consistent read here
        // waited ~100 ms for etcd while a scale-out's joiners all wrote their conditions
        // at once (issue 20). A table newer than the cache knows fails the join's first
        // try, which reads the newest and moves to its epoch.
        if let Err(e) = self.refresh_cached().await {
            tracing::debug!(error = %e, "refresh failed; joining with the last rank table");
        }
        let epoch = epoch.max(self.planned_epoch());
        // A span of its own (inside the serving epoch's, see `task::Run::epoch_span`):
        // recording the new epoch into the member's long-lived span would append one more
        // `epoch=` to every later line of that member, one per epoch it ever joined.
        self.join_at(epoch)
            .instrument(tracing::info_span!("join", epoch))
            .await
    }

    async fn join_at(&mut self, epoch: u64) -> Event {
        let Some((table, _)) = self.table.clone() else {
            return Event::JoinFailed {
                epoch,
                message: "no rank table".into(),
            };
        };
        if !self.listed_in_table() {
            return Event::JoinFailed {
                epoch,
                message: format!(
                    "the rank table of epoch {} was not written for Pod {}: the ranks of \
                     this node's devices belong to another member",
                    self.planned_epoch(),
                    self.spec.pod
                ),
            };
        }
        let (Some(chosen), Some(devs)) = (self.chosen.clone(), self.spec.devices.clone()) else {
            return Event::JoinFailed {
                epoch,
                message: "not verified".into(),
            };
        };
        let plan = match super::ranktable::plan(
            &table,
            &self.cfg.node_name,
            Some(&chosen.ip.to_string()),
            &devs,
            self.cfg.comm_port_base,
        ) {
            Ok(p) => p,
            Err(e) => return Event::JoinFailed { epoch, message: e },
        };
        // Every epoch's table is checked as the first one was, before anything is dialled:
        // a member verified against a clean table may be handed a forged one later. The
        // table this member was verified against, at the same `resourceVersion`, is the
        // one checked then: checking it again cost a joiner a list of the group's Pods and
        // a read of every member's node on its way to Ready.
        if self.table_revision.is_some() && self.table_checked == self.table_revision {
            tracing::debug!(revision = ?self.table_revision, "the table was checked at this version");
        } else {
            if let Err(refusal) = self.check_table(&table).await {
                let message = format!("rank table of epoch {epoch}: {refusal}");
                tracing::warn!(epoch, %refusal, "rank table refused at join");
                self.ports
                    .cluster
                    .event(true, PeerRefusal::REASON, message.clone())
                    .await;
                return Event::JoinFailed { epoch, message };
            }
            self.table_checked = self.table_revision.clone();
        }
        let spec = JoinSpec {
            plan,
            epoch,
            bind_ip: chosen.ip,
            config: DomainConfig::from_comm(&self.group.comm),
            group_uid: self.group.uid.clone(),
        };
        match self.join_when_all_arrive(&spec).await {
            Ok(()) => {
                let plan: &ControlPlan = &spec.plan;
                tracing::info!(
                    epoch,
                    rank = plan.rank,
                    world = plan.world,
                    "joined the domain"
                );
                self.plan = Some(spec.plan);
                self.publish_assignment();
                if let Err(message) = self.await_worker().await {
                    return Event::JoinFailed { epoch, message };
                }
                // The label as it is now: a promotion while joining opens the gate here.
                let standby = self.spec_rx.borrow().as_ref().is_some_and(|s| s.standby);
                Event::Joined { epoch, standby }
            }
            Err(JoinStop::EpochMoved(next)) => {
                tracing::info!(
                    epoch,
                    next,
                    "the group moved on before the domain formed; joining its new epoch"
                );
                Event::EpochPlanned { epoch: next }
            }
            Err(JoinStop::Failed(e)) => Event::JoinFailed {
                epoch,
                message: e.message,
            },
        }
    }

    /// The table's servers and ports against the static rules and the group's members
    /// ([`super::ranktable_members::check_table`]).
    async fn check_table(&self, table: &RankTable) -> Result<(), PeerRefusal> {
        let members = self
            .ports
            .cluster
            .member_addresses(self.table_revision.clone())
            .await
            .map_err(|e| PeerRefusal::MembersUnknown(e.to_string()))?;
        let rules = super::ranktable_members::PeerRules::from_config(&self.cfg);
        super::ranktable_members::check_table(table, &members, &rules)
    }

    /// Builds the domain of `spec.epoch`. A domain forms only once every member of the new
    /// set is in it, and members still verifying or syncing weights may take longer than
    /// one init deadline (2 × `connectTimeoutSeconds`): a Rebuild's member whose weights
    /// are local would otherwise fail its join and, with it, the whole new set. An init
    /// that timed out while peers' own conditions show them still on their way is
    /// therefore begun again (bounded by [`ARRIVAL_WAIT`]); one that failed otherwise, or
    /// after the others arrived, fails. If the rank table moved to a newer epoch meanwhile
    /// (a member of this one was replaced) with this member in it, the member joins that
    /// one instead of failing. A peer of the epoch that this node's own link probes cannot
    /// reach (its agent or host died) will never arrive: the join waits for the epoch that
    /// replaces it (same bound) instead of failing and getting this member replaced too. A
    /// drain or deletion of this member ends the wait.
    async fn join_when_all_arrive(&mut self, spec: &JoinSpec) -> Result<(), JoinStop> {
        let epoch = spec.epoch;
        let started = Instant::now();
        loop {
            let err = match self.ports.domain.join(spec).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if self.leaving() {
                return Err(JoinStop::Failed(err));
            }
            if let Err(e) = self.refresh().await {
                tracing::debug!(error = %e, "refresh failed; keeping the last rank table");
            }
            // A member of this epoch was replaced meanwhile: this epoch can never form.
            if self.planned_epoch() > epoch && self.in_table() {
                return Err(JoinStop::EpochMoved(self.planned_epoch()));
            }
            if !err.waiting || started.elapsed() > ARRIVAL_WAIT || self.planned_epoch() != epoch {
                return Err(JoinStop::Failed(err));
            }
            let arriving = match self.ports.cluster.arriving_peers().await {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(error = %e, "could not read the peers' conditions");
                    Vec::new()
                }
            };
            if !arriving.is_empty() {
                tracing::info!(
                    epoch,
                    ?arriving,
                    "the domain is waiting for members still verifying or syncing; initialising again"
                );
                continue;
            }
            // A peer of this epoch that this node's own probes cannot reach (its agent or
            // host is gone) never arrives; the operator replaces a lost node's members and
            // plans a new epoch without them, which the check above joins. Failing here
            // instead would have this member replaced too, for a peer's fault.
            let lost = lost_peers(&spec.plan.peers, &self.ports.cluster.unreachable_peers());
            if lost.is_empty() {
                return Err(JoinStop::Failed(err));
            }
            tracing::info!(
                epoch,
                ?lost,
                "the domain is waiting for a peer this node cannot reach; waiting for the epoch that replaces it"
            );
        }
    }

    /// Whether this member's Pod is being drained or deleted (or is gone).
    fn leaving(&self) -> bool {
        spec_leaving(&self.spec_rx.borrow())
    }

    /// With `hcomm.io/worker-readiness: local-api`, waits until the worker reports that it
    /// serves, so the readiness gate — and with it the first request — never comes before
    /// the worker has its weights loaded (a readiness probe's job under a kubelet). Bounded
    /// by `--worker-ready-timeout-secs`.
    async fn await_worker(&self) -> Result<(), String> {
        if !self.spec.await_worker {
            return Ok(());
        }
        let mut serving = self.ports.worker.serving();
        let mut cannot = self.ports.worker.cannot_serve();
        let limit = self.cfg.worker_ready_timeout;
        // A drain or deletion ends the wait: the member leaves (and frees its ports) now,
        // not when the worker timeout passes, which may be after the Pod is gone.
        let mut spec = self.spec_rx.clone();
        let leaving = spec.wait_for(spec_leaving);
        tokio::select! {
            waited = tokio::time::timeout(limit, serving.wait_for(|s| *s)) => match waited {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(_)) => Err("the member's local API slot went away".into()),
                Err(_) => Err(format!(
                    "the worker did not report `serving` over the local API within {limit:?} \
                     (Pod annotation hcomm.io/worker-readiness: local-api)"
                )),
            },
            _ = leaving => Err(
                "drained or deleted before its worker reported `serving` over the local API".into(),
            ),
            said = cannot.wait_for(Option::is_some) => Err(match said {
                Ok(reason) => format!("the worker cannot serve: {}", reason.as_deref().unwrap_or("")),
                Err(_) => "the member's local API slot went away".into(),
            }),
        }
    }

    /// Waits until the worker reports zero in flight or the drain deadline (counted from
    /// the drain request's time) passes. A worker that never reported counts as zero.
    pub(super) async fn await_drain(&mut self) -> Event {
        let timeout = Duration::from_secs(
            u64::try_from(self.group.scaling.drain_timeout_seconds).unwrap_or(300),
        );
        let requested = self
            .spec
            .drain_requested
            .as_deref()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let now = self.ports.clock.now();
        let elapsed = requested
            .map(|t| now.duration_since(t))
            .and_then(|d| Duration::try_from(d).ok())
            .unwrap_or_default();
        let remaining = timeout.saturating_sub(elapsed);
        let mut rx = self.ports.worker.in_flight();
        let drained = tokio::time::timeout(remaining, rx.wait_for(|n| n.unwrap_or(0) == 0)).await;
        let timed_out = !matches!(drained, Ok(Ok(_)));
        self.metrics
            .drains
            .with_label_values(&[if timed_out { "timed_out" } else { "drained" }])
            .inc();
        tracing::info!(timed_out, "drain finished");
        Event::DrainFinished { timed_out }
    }

    pub(super) fn notify(&self, n: WorkerNotice) {
        let notice = match n {
            WorkerNotice::WeightsReady => Notice::WeightsReady {
                path: self.weights_path.clone(),
            },
            WorkerNotice::DrainRequested => Notice::DrainRequested {
                deadline: self.spec.drain_requested.clone(),
            },
            WorkerNotice::EpochChanged { epoch } => Notice::EpochChanged { epoch },
        };
        self.ports.worker.notify(notice);
    }
}
