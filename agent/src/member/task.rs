//! One member's task: feeds events into the state machine ([`super::state::step`]) and
//! performs the actions it returns through the member's [`Ports`] — Pod condition writes,
//! verification, weight sync, joining the domain, waiting for the drain, leaving — then
//! waits for the next change (Pod update, group nudge, retry timer). Every wait is bounded
//! and every timer is tokio's, so a test with the clock paused drives a whole lifecycle in
//! milliseconds (see `super::task_tests`). The stages themselves are in [`super::stages`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use super::adapters::{
    EngineDomain, HubWorker, KubeCluster, KubeletAllocations, NicVerifier, SystemClock,
};
use super::group::{GroupView, ReadAt};
use super::ports::{Allocations, Clock, Cluster, CommDomain, Verifier, Worker};
use super::ranktable::{ControlPlan, RankTable};
use super::spec::MemberSpec;
use super::state::{Action, CondUpdate, Event, Phase, step};
use super::weights::WeightsSyncer;
use crate::config::{AgentConfig, Context};
use crate::metrics::Metrics;
use crate::nic::Chosen;

/// The first wait for a rank table that is behind the member's epoch (see `Run::start`).
const START_RETRY_FIRST: Duration = Duration::from_millis(20);

/// Everything a member task touches outside itself.
pub struct Ports {
    pub cluster: Arc<dyn Cluster>,
    pub verifier: Box<dyn Verifier>,
    pub weights: Arc<dyn WeightsSyncer>,
    pub domain: Box<dyn CommDomain>,
    pub worker: Box<dyn Worker>,
    pub allocations: Box<dyn Allocations>,
    pub clock: Box<dyn Clock>,
}

impl Ports {
    /// The production ports of member `spec`.
    pub fn live(ctx: &Arc<Context>, spec: &MemberSpec) -> Ports {
        Ports {
            cluster: Arc::new(KubeCluster::new(ctx.clone(), spec)),
            verifier: Box::new(NicVerifier(ctx.clone())),
            weights: ctx.weights.clone(),
            domain: Box::new(EngineDomain::new(ctx.clone(), spec)),
            worker: Box::new(HubWorker::new(ctx.clone(), spec)),
            allocations: Box::new(KubeletAllocations::new(&ctx.cfg)),
            clock: Box::new(SystemClock),
        }
    }
}

/// Mutable facts of one member's run.
pub(super) struct Run {
    pub(super) cfg: AgentConfig,
    pub(super) metrics: Metrics,
    pub(super) ports: Ports,
    pub(super) spec: MemberSpec,
    pub(super) phase: Phase,
    pub(super) group: GroupView,
    pub(super) table: Option<(RankTable, u64)>,
    /// The `resourceVersion` the last table read came at
    /// ([`super::group::PublishedTable::revision`]).
    pub(super) table_revision: Option<String>,
    /// The `resourceVersion` of the last table that passed the check of its servers
    /// against the group's members (a verification's or a join's): a join at that same
    /// version skips the check (`Run::join_at`).
    pub(super) table_checked: Option<String>,
    /// The member Pods the last table read was written for (None: it named none).
    pub(super) listed: Option<std::collections::BTreeSet<String>>,
    pub(super) chosen: Option<Chosen>,
    pub(super) plan: Option<ControlPlan>,
    /// The member's (rank, physical NPU) entries once its allocation was checked
    /// ([`super::allocation_check`]); None on CPU nodes.
    pub(super) npu_entries: Option<Vec<(u32, u32)>>,
    drain_seen: bool,
    failures: u32,
    pub(super) weights_path: Option<String>,
    /// A weight sync begun during verification, or before it ([`super::prefetch`]).
    pub(super) prefetch: Option<super::prefetch::Prefetch>,
    /// Whether a sync before the member's own table was tried ([`super::early_sync`]).
    pub(super) early_tried: bool,
    /// The Pod as the driver last saw it; None once it is deleted.
    pub(super) spec_rx: watch::Receiver<Option<MemberSpec>>,
    /// Changes when the group's HcommGroup does ([`super::nudge`]).
    group_changed: watch::Receiver<()>,
}

/// Runs a member until its Pod is gone. `spec` yields None when the Pod is deleted.
pub async fn run_member(ctx: Arc<Context>, spec: watch::Receiver<Option<MemberSpec>>) {
    let Some(first) = spec.borrow().clone() else {
        return;
    };
    let span = tracing::info_span!("member", group = %first.group, pod = %first.key(),
        rank = first.first_rank);
    let group_changed = ctx.nudges.subscribe(&first.namespace, &first.group);
    let ports = span.in_scope(|| Ports::live(&ctx, &first));
    drive(
        ctx.cfg.clone(),
        ctx.metrics.clone(),
        ports,
        spec,
        group_changed,
    )
    .instrument(span)
    .await;
}

/// Drives one member through its lifecycle on `ports` until its Pod is gone; returns the
/// last phase.
pub async fn drive(
    cfg: AgentConfig,
    metrics: Metrics,
    ports: Ports,
    spec_rx: watch::Receiver<Option<MemberSpec>>,
    group_changed: watch::Receiver<()>,
) -> Phase {
    let Some(first) = spec_rx.borrow().clone() else {
        return Phase::Gone;
    };
    let mut run = Run {
        cfg,
        metrics,
        ports,
        spec: first,
        phase: Phase::Pending,
        group: GroupView::default(),
        table: None,
        table_revision: None,
        table_checked: None,
        listed: None,
        chosen: None,
        plan: None,
        npu_entries: None,
        drain_seen: false,
        failures: 0,
        weights_path: None,
        prefetch: None,
        early_tried: false,
        spec_rx,
        group_changed,
    };
    run.metrics.phase_change(None, &run.phase);
    run.main().await;
    run.ports.domain.leave();
    run.metrics
        .members
        .with_label_values(&[run.phase.name()])
        .dec();
    run.ports.worker.forget();
    run.phase
}

/// The event a change of the standby label means in `phase`: a promotion of a standby, a
/// serving member moved back to standby; none otherwise (a member still on its way in
/// reads the label when it joins).
fn standby_change(phase: &Phase, standby: bool) -> Option<Event> {
    match phase {
        Phase::Standby { .. } if !standby => Some(Event::Promoted),
        Phase::Ready { .. } if standby => Some(Event::Demoted),
        _ => None,
    }
}

/// Resolves once the Pod behind `rx` is deleted (or its driver is gone).
pub(super) async fn pod_gone(mut rx: watch::Receiver<Option<MemberSpec>>) {
    let _ = rx.wait_for(Option::is_none).await;
}

impl Run {
    /// The span of the epoch the member serves in (or drains from), for everything done
    /// meanwhile; none before its first join.
    fn epoch_span(&self) -> tracing::Span {
        match self.phase {
            Phase::Ready { epoch } | Phase::Standby { epoch } | Phase::Draining { epoch } => {
                tracing::info_span!("epoch", epoch)
            }
            _ => tracing::Span::none(),
        }
    }

    async fn main(&mut self) {
        if !self.start().await {
            return;
        }
        let mut queue: VecDeque<Event> = VecDeque::new();
        queue.push_back(Event::Start {
            epoch: self.planned_epoch(),
        });
        let mut pod_gone = false;
        loop {
            while let Some(ev) = queue.pop_front() {
                let span = self.epoch_span();
                self.apply(ev, &mut queue).instrument(span).await;
            }
            // A deleted Pod ends the task whatever the phase (a Drained member just exits).
            if self.phase == Phase::Gone || pod_gone {
                return;
            }
            let wait = match &self.phase {
                Phase::Failed { .. } => self.cfg.retry_backoff * 2u32.pow(self.failures.min(3)),
                _ => self.cfg.poll_interval,
            };
            match self.wait_spec(wait).await {
                None => {
                    pod_gone = true;
                    queue.push_back(Event::PodGone);
                }
                Some(true) => {
                    if (self.spec.drain_requested.is_some() || self.spec.deleting)
                        && !self.drain_seen
                    {
                        self.drain_seen = true;
                        queue.push_back(Event::DrainRequested);
                    } else if let Some(ev) = standby_change(&self.phase, self.spec.standby) {
                        queue.push_back(ev);
                    }
                }
                Some(false) => {
                    let span = self.epoch_span();
                    self.on_tick(&mut queue).instrument(span).await
                }
            }
        }
    }

    /// Waits until the group and its rank table are readable and the table is at least at
    /// the member's epoch: the operator creates a joiner's Pod before it rewrites the rank
    /// table, and verifying against the older table would refuse a member that is merely
    /// early. The table usually follows within milliseconds, so the first retries come
    /// quickly (doubling from 20 ms up to the poll interval) instead of costing every
    /// joiner a whole poll interval (2 s by default). False when the Pod went away first.
    async fn start(&mut self) -> bool {
        let mut retry = START_RETRY_FIRST.min(self.cfg.poll_interval);
        loop {
            let behind = match self.refresh().await {
                Ok(()) => match (self.spec.epoch, self.table.as_ref()) {
                    (Some(want), Some((_, have))) if *have < want => Some(format!(
                        "rank table is at epoch {have}, the member at {want}"
                    )),
                    _ => None,
                },
                Err(e) => Some(e.to_string()),
            };
            let Some(e) = behind else { return true };
            self.begin_early_sync().await;
            tracing::info!(error = %e, ?retry, "waiting for the group and its rank table");
            if self.wait_spec(retry).await.is_none() {
                return false;
            }
            retry = (retry * 2).min(self.cfg.poll_interval);
        }
    }

    /// Waits up to `d` for the Pod to change: Some(true) when it did (the spec is updated),
    /// None when it is gone, Some(false) when the time is up or the group changed (time to
    /// re-read it) — except while Failed, whose retry keeps its backoff.
    async fn wait_spec(&mut self, d: Duration) -> Option<bool> {
        let follow_group = !matches!(self.phase, Phase::Failed { .. });
        let group = &mut self.group_changed;
        let group_changed = async move {
            if !follow_group || group.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let rx = &mut self.spec_rx;
        let changed = tokio::select! {
            r = tokio::time::timeout(d, rx.changed()) => r,
            () = group_changed => return Some(false),
        };
        match changed {
            Err(_) => Some(false),
            Ok(Err(_)) => None,
            Ok(Ok(())) => {
                let s = self.spec_rx.borrow_and_update().clone()?;
                self.spec = s;
                Some(true)
            }
        }
    }

    async fn on_tick(&mut self, queue: &mut VecDeque<Event>) {
        if matches!(
            self.phase,
            Phase::Drained | Phase::Leaving { .. } | Phase::Draining { .. }
        ) {
            return;
        }
        if let Err(e) = self.refresh().await {
            tracing::debug!(error = %e, "refresh failed; keeping the last rank table");
        }
        match &self.phase {
            Phase::Failed { .. } => queue.push_back(Event::Retry {
                epoch: self.planned_epoch(),
            }),
            Phase::Ready { epoch } | Phase::Standby { epoch }
                if self.planned_epoch() > *epoch && self.in_table() =>
            {
                queue.push_back(Event::EpochPlanned {
                    epoch: self.planned_epoch(),
                });
            }
            _ => {}
        }
    }

    /// The epoch of the last rank table read (0 before any).
    pub(super) fn planned_epoch(&self) -> u64 {
        self.table.as_ref().map_or(0, |(_, e)| *e)
    }

    /// Whether the last rank table read holds this member's ranks: it was written for
    /// this Pod, and it gives this node's devices ranks.
    pub(super) fn in_table(&self) -> bool {
        let (Some((t, _)), Some(devs)) = (&self.table, &self.spec.devices) else {
            return false;
        };
        if !self.listed_in_table() {
            return false;
        }
        let ip = self.chosen.as_ref().map(|c| c.ip.to_string());
        super::ranktable::server_of(t, &self.cfg.node_name, ip.as_deref())
            .is_some_and(|s| !super::ranktable::member_ranks(&s, devs).is_empty())
    }

    /// Whether the last rank table read was written for this Pod (true when it lists no
    /// Pods). A task whose Pod was deleted while its agent could not see it must not take
    /// the ranks a replacement on the same devices was given.
    pub(super) fn listed_in_table(&self) -> bool {
        self.listed
            .as_ref()
            .is_none_or(|m| m.contains(&self.spec.pod))
    }

    /// Re-reads the group's spec and its rank table at their newest.
    pub(super) async fn refresh(&mut self) -> crate::error::Result<()> {
        self.refresh_at(ReadAt::Latest, ReadAt::Latest).await
    }

    /// Re-reads the group's spec and its rank table from the API server's cache, the
    /// table no older than the one this member holds: a cache may trail the newest state
    /// (another API server's, in a control plane of several), and a table older than the
    /// one read before would plan the member into an epoch that is gone.
    pub(super) async fn refresh_cached(&mut self) -> crate::error::Result<()> {
        let table_at = self
            .table_revision
            .clone()
            .map_or(ReadAt::Cache, ReadAt::NotOlderThan);
        self.refresh_at(ReadAt::Cache, table_at).await
    }

    /// Re-reads the group's spec and its rank table as of `group_at` and `table_at` (both
    /// reads at once: they sit on a joiner's path twice, before verifying and before
    /// joining).
    async fn refresh_at(&mut self, group_at: ReadAt, table_at: ReadAt) -> crate::error::Result<()> {
        let (group, published) = futures::join!(
            self.ports.cluster.group(group_at),
            self.ports.cluster.rank_table(table_at)
        );
        self.group = group?;
        let published = published?;
        self.table = Some((published.table, published.epoch));
        self.table_revision = published.revision;
        self.listed = published.members;
        Ok(())
    }

    async fn apply(&mut self, ev: Event, queue: &mut VecDeque<Event>) {
        let (next, actions) = step(&self.phase, ev);
        if next != self.phase {
            tracing::info!(from = self.phase.name(), to = next.name(), "member phase");
            self.metrics.phase_change(Some(&self.phase), &next);
        }
        self.phase = next;
        let mut conds: Vec<CondUpdate> = Vec::new();
        for a in actions {
            if let Action::Condition(c) = a {
                conds.push(c);
                continue;
            }
            let written = write_conditions(self.ports.cluster.clone(), std::mem::take(&mut conds));
            let next = if runs_beside_its_conditions(&a) {
                futures::join!(written, self.act(a)).1
            } else {
                written.await;
                self.act(a).await
            };
            queue.extend(next);
        }
        write_conditions(self.ports.cluster.clone(), conds).await;
        if let Phase::Failed { .. } = self.phase {
            self.failures += 1;
        } else {
            self.failures = 0;
        }
    }

    /// Performs `a`; returns the event it ended in, if any.
    async fn act(&mut self, a: Action) -> Option<Event> {
        match a {
            // apply batches them; one alone is written as it comes.
            Action::Condition(c) => {
                self.ports.cluster.write_conditions(vec![c]).await;
                None
            }
            Action::Verify => {
                let gone = pod_gone(self.spec_rx.clone());
                Some(tokio::select! {
                    ev = self.verify() => ev,
                    () = gone => Event::PodGone,
                })
            }
            Action::SyncWeights => Some(self.sync_weights().await),
            Action::Join { epoch } => Some(self.join(epoch).await),
            Action::AwaitDrain => Some(self.await_drain().await),
            Action::Leave => {
                self.ports.domain.leave();
                matches!(self.phase, Phase::Leaving { .. }).then_some(Event::Left)
            }
            Action::Notify(n) => {
                self.notify(n);
                None
            }
            Action::Event {
                warning,
                reason,
                message,
            } => {
                self.ports.cluster.event(warning, reason, message).await;
                None
            }
        }
    }
}

/// Whether `a` may run while the conditions before it are still being written: the steps
/// of a joiner's way in, whose outcome is written only after both (so the Pod's conditions
/// keep their order), and which nobody waits to see announced. A member's own later
/// conditions follow, so running them beside saves the joiner a Pod status write each.
/// Everything else waits for its conditions: a worker told to drain, an Event or a leave
/// must come after the Pod says so (the router stops sending on the condition).
fn runs_beside_its_conditions(a: &Action) -> bool {
    matches!(
        a,
        Action::Verify | Action::SyncWeights | Action::Join { .. }
    )
}

/// Writes `conds` to the member's Pod (nothing when empty).
async fn write_conditions(cluster: Arc<dyn Cluster>, conds: Vec<CondUpdate>) {
    if !conds.is_empty() {
        cluster.write_conditions(conds).await;
    }
}
