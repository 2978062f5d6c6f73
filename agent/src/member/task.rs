//! One member's task: feeds events into the state machine ([`super::state::step`]) and
//! performs the actions it returns — Pod condition writes, verification, weight sync,
//! joining the domain, waiting for the drain, leaving — then waits for the next change
//! (Pod update, new epoch in the rank table, retry timer). Every wait is bounded.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use tokio::sync::watch;
use tracing::Instrument;

use super::conditions;
use super::domain::{Domain, DomainTimeouts};
use super::group::{GroupView, fetch_group, fetch_rank_table, still_arriving};
use super::ranktable::{ControlPlan, RankTable};
use super::spec::MemberSpec;
use super::state::{Action, CondUpdate, Event, Phase, WorkerNotice, step};
use super::verify::verify;
use super::weights::WeightsRequest;
use crate::config::Context;
use crate::error::{Error, Result};
use crate::local_api::{Assignment, Notice};
use crate::nic::Chosen;

/// The first wait for a rank table that is behind the member's epoch (see `Run::main`).
const START_RETRY_FIRST: Duration = Duration::from_millis(20);

/// Mutable facts of one member's run.
struct Run {
    ctx: Arc<Context>,
    spec: MemberSpec,
    phase: Phase,
    group: GroupView,
    table: Option<(RankTable, u64)>,
    chosen: Option<Chosen>,
    plan: Option<ControlPlan>,
    domain: Option<Domain>,
    health: Option<tokio::task::JoinHandle<()>>,
    drain_seen: bool,
    failures: u32,
    weights_path: Option<String>,
    /// The Pod as the driver last saw it (read, never marked seen: `main` owns that).
    spec_rx: watch::Receiver<Option<MemberSpec>>,
    /// Changes when the group's HcommGroup does ([`super::nudge`]).
    group_changed: watch::Receiver<()>,
}

/// Why [`Run::join_when_all_arrive`] gave up.
enum JoinStop {
    /// The domain could not be built.
    Failed(hcomm_comm::CommError),
    /// The group planned a newer epoch (with this member in it) while this one waited.
    EpochMoved(u64),
}

/// How long a join keeps waiting for members still verifying or syncing weights (see
/// [`Run::join_when_all_arrive`]); a sync of a large model over a slow link takes minutes.
const ARRIVAL_WAIT: Duration = Duration::from_secs(30 * 60);

/// Runs a member until its Pod is gone. `spec` yields None when the Pod is deleted.
pub async fn run_member(ctx: Arc<Context>, mut spec: watch::Receiver<Option<MemberSpec>>) {
    let Some(first) = spec.borrow().clone() else {
        return;
    };
    let span = tracing::info_span!("member", group = %first.group, pod = %first.key(),
        epoch = tracing::field::Empty, rank = first.first_rank);
    let group_changed = ctx.nudges.subscribe(&first.namespace, &first.group);
    let mut run = Run {
        ctx: ctx.clone(),
        spec: first,
        phase: Phase::Pending,
        group: GroupView::default(),
        table: None,
        chosen: None,
        plan: None,
        domain: None,
        health: None,
        drain_seen: false,
        failures: 0,
        weights_path: None,
        spec_rx: spec.clone(),
        group_changed,
    };
    ctx.metrics.phase_change(None, &run.phase);
    async move {
        run.main(&mut spec).await;
        run.stop_health();
        ctx.metrics
            .members
            .with_label_values(&[run.phase.name()])
            .dec();
        ctx.hub.remove(&run.spec.key());
    }
    .instrument(span)
    .await;
}

impl Run {
    async fn main(&mut self, spec_rx: &mut watch::Receiver<Option<MemberSpec>>) {
        let mut queue: VecDeque<Event> = VecDeque::new();
        // The group and rank table must be readable before anything starts, and the table
        // must be at least the member's epoch: the operator creates a joiner's Pod before
        // it rewrites the rank table, and verifying against the older table would refuse
        // a member that is merely early. The table usually follows within milliseconds, so
        // the first retries come quickly (doubling from 20 ms up to the poll interval)
        // instead of costing every joiner a whole poll interval (2 s by default).
        let mut retry = START_RETRY_FIRST.min(self.ctx.cfg.poll_interval);
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
            match behind {
                None => break,
                Some(e) => {
                    tracing::info!(error = %e, ?retry, "waiting for the group and its rank table");
                    if self.wait_spec(spec_rx, retry).await.is_none() {
                        return;
                    }
                    retry = (retry * 2).min(self.ctx.cfg.poll_interval);
                }
            }
        }
        queue.push_back(Event::Start {
            epoch: self.planned_epoch(),
        });
        let mut pod_gone = false;
        loop {
            while let Some(ev) = queue.pop_front() {
                self.apply(ev, &mut queue).await;
            }
            // A deleted Pod ends the task whatever the phase (a Drained member just exits).
            if self.phase == Phase::Gone || pod_gone {
                return;
            }
            let wait = match &self.phase {
                Phase::Failed { .. } => self.ctx.cfg.retry_backoff * 2u32.pow(self.failures.min(3)),
                _ => self.ctx.cfg.poll_interval,
            };
            match self.wait_spec(spec_rx, wait).await {
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
                    }
                }
                Some(false) => self.on_tick(&mut queue).await,
            }
        }
    }

    /// Waits up to `d` for the Pod to change: Some(true) when it did (the spec is updated),
    /// None when it is gone, Some(false) when the time is up or the group changed (time to
    /// re-read it) — except while Failed, whose retry keeps its backoff.
    async fn wait_spec(
        &mut self,
        rx: &mut watch::Receiver<Option<MemberSpec>>,
        d: Duration,
    ) -> Option<bool> {
        let follow_group = !matches!(self.phase, Phase::Failed { .. });
        let group = &mut self.group_changed;
        let group_changed = async move {
            if !follow_group || group.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let changed = tokio::select! {
            r = tokio::time::timeout(d, rx.changed()) => r,
            () = group_changed => return Some(false),
        };
        match changed {
            Err(_) => Some(false),
            Ok(Err(_)) => None,
            Ok(Ok(())) => {
                let s = rx.borrow_and_update().clone()?;
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
            Phase::Ready { epoch } if self.planned_epoch() > *epoch && self.in_table() => {
                queue.push_back(Event::EpochPlanned {
                    epoch: self.planned_epoch(),
                });
            }
            _ => {}
        }
    }

    fn planned_epoch(&self) -> u64 {
        self.table.as_ref().map_or(self.group.epoch, |(_, e)| *e)
    }

    fn in_table(&self) -> bool {
        let (Some((t, _)), Some(devs)) = (&self.table, &self.spec.devices) else {
            return false;
        };
        let ip = self.chosen.as_ref().map(|c| c.ip.to_string());
        super::ranktable::server_of(t, &self.ctx.cfg.node_name, ip.as_deref())
            .is_some_and(|s| !super::ranktable::member_ranks(&s, devs).is_empty())
    }

    async fn refresh(&mut self) -> Result<()> {
        let c = &self.ctx.client;
        self.group = fetch_group(c, &self.spec.namespace, &self.spec.group).await?;
        let name = self
            .group
            .rank_table
            .clone()
            .ok_or_else(|| Error::RankTable {
                name: format!("{}/{}", self.spec.namespace, self.spec.group),
                reason: "the group has no status.rankTable yet".into(),
            })?;
        self.table = Some(fetch_rank_table(c, &self.spec.namespace, &name).await?);
        Ok(())
    }

    async fn apply(&mut self, ev: Event, queue: &mut VecDeque<Event>) {
        let (next, actions) = step(&self.phase, ev);
        if next != self.phase {
            tracing::info!(from = self.phase.name(), to = next.name(), "member phase");
            self.ctx.metrics.phase_change(Some(&self.phase), &next);
        }
        self.phase = next;
        let mut conds: Vec<CondUpdate> = Vec::new();
        for a in actions {
            if !matches!(a, Action::Condition(_)) && !conds.is_empty() {
                self.write_conditions(std::mem::take(&mut conds)).await;
            }
            match a {
                Action::Condition(c) => conds.push(c),
                Action::Verify => queue.push_back(self.verify().await),
                Action::SyncWeights => queue.push_back(self.sync_weights().await),
                Action::Join { epoch } => queue.push_back(self.join(epoch).await),
                Action::AwaitDrain => queue.push_back(self.await_drain().await),
                Action::Leave => {
                    self.stop_health();
                    if let Some(mut d) = self.domain.take() {
                        d.leave();
                    }
                    if matches!(self.phase, Phase::Leaving { .. }) {
                        queue.push_back(Event::Left);
                    }
                }
                Action::Notify(n) => self.notify(n),
                Action::Event {
                    warning,
                    reason,
                    message,
                } => self.event(warning, reason, message).await,
            }
        }
        if !conds.is_empty() {
            self.write_conditions(conds).await;
        }
        if let Phase::Failed { .. } = self.phase {
            self.failures += 1;
        } else {
            self.failures = 0;
        }
    }

    async fn verify(&mut self) -> Event {
        let Some((table, _)) = self.table.clone() else {
            return Event::Verified {
                ok: false,
                reason: hcomm_crds::contract::PodReason::NoRankTable.as_str(),
                message: "no rank table yet".into(),
            };
        };
        let ifname = self
            .group
            .comm
            .socket_ifname
            .clone()
            .or_else(|| self.spec.socket_ifname.clone())
            .or_else(|| self.ctx.cfg.socket_ifname.clone());
        let timeout = Duration::from_secs(
            u64::try_from(self.group.comm.connect_timeout_seconds).unwrap_or(30),
        );
        let v = verify(&self.ctx, &self.spec, ifname.as_deref(), timeout, &table).await;
        self.ctx
            .metrics
            .verifications
            .with_label_values(&[v.verdict.reason])
            .inc();
        tracing::info!(ok = v.verdict.ok, reason = v.verdict.reason, message = %v.verdict.message, "verification");
        if let Some(p) = &v.plan {
            self.ctx.add_peers(&p.peers);
        }
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

    fn publish_assignment(&self) {
        let Some(plan) = &self.plan else { return };
        let world = self.table.as_ref().map_or(0, |(t, _)| t.world()) as u32;
        let local = plan.devices_in_rank_order.len().max(1) as u32;
        let a = Assignment {
            group: self.spec.group.clone(),
            rank: self.spec.first_rank.unwrap_or((plan.rank as u32) * local),
            world,
            local_ranks: local,
            rank_table_path: self.spec.rank_table_file.clone(),
            interface: self.chosen.as_ref().map(|c| c.name.clone()),
            devices: plan.devices_in_rank_order.clone(),
            weights_path: self.weights_path.clone(),
            epoch: self.planned_epoch(),
        };
        self.ctx
            .hub
            .slot(&self.spec.key())
            .assignment
            .send_replace(Some(a));
    }

    async fn sync_weights(&mut self) -> Event {
        let epoch = self.planned_epoch();
        let Some(chosen) = self.chosen.clone() else {
            return Event::WeightsFailed {
                reason: super::weights::reasons::SYNC_FAILED,
                message: "no verified data interface".into(),
            };
        };
        let req = WeightsRequest {
            namespace: self.spec.namespace.clone(),
            group: self.spec.group.clone(),
            pod: self.spec.pod.clone(),
            node: self.ctx.cfg.node_name.clone(),
            spec: self.group.weights.clone(),
            interface: chosen.name,
            local_ip: chosen.ip,
            peers: self
                .plan
                .as_ref()
                .map(|p| p.peers.clone())
                .unwrap_or_default(),
            epoch,
        };
        let result = self.ctx.weights.sync(&req).await;
        let warnings = match &result {
            Ok(o) => o.warnings.clone(),
            Err(f) => f.warnings.clone(),
        };
        for (reason, message) in warnings {
            self.event(true, reason, message).await;
        }
        match result {
            Ok(o) => {
                self.ctx.metrics.sync_bytes.inc_by(o.bytes);
                if o.seconds > 0.0 {
                    self.ctx
                        .metrics
                        .sync_throughput
                        .set(o.bytes as f64 / o.seconds);
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

    async fn secret(&self) -> Vec<u8> {
        if let Some(dir) = &self.ctx.cfg.group_secret_dir {
            let f = dir.join(format!("{}_{}", self.spec.namespace, self.spec.group));
            if let Ok(s) = tokio::fs::read(&f).await {
                return s;
            }
        }
        format!("hcomm-group-uid:{}", self.group.uid).into_bytes()
    }

    async fn join(&mut self, epoch: u64) -> Event {
        // The table read before a long sync may be old: join the epoch planned now.
        if let Err(e) = self.refresh().await {
            tracing::debug!(error = %e, "refresh failed; joining with the last rank table");
        }
        let epoch = epoch.max(self.planned_epoch());
        tracing::Span::current().record("epoch", epoch);
        let Some((table, _)) = self.table.clone() else {
            return Event::JoinFailed {
                epoch,
                message: "no rank table".into(),
            };
        };
        let (Some(chosen), Some(devs)) = (self.chosen.clone(), self.spec.devices.clone()) else {
            return Event::JoinFailed {
                epoch,
                message: "not verified".into(),
            };
        };
        let plan = match super::ranktable::plan(
            &table,
            &self.ctx.cfg.node_name,
            Some(&chosen.ip.to_string()),
            &devs,
            self.ctx.cfg.comm_port_base,
        ) {
            Ok(p) => p,
            Err(e) => return Event::JoinFailed { epoch, message: e },
        };
        if self.domain.is_none() {
            let secs = |s: i32| Duration::from_secs(u64::try_from(s).unwrap_or(30));
            let t = DomainTimeouts {
                connect: secs(self.group.comm.connect_timeout_seconds),
                init: secs(self.group.comm.connect_timeout_seconds) * 2,
                op: secs(self.group.comm.op_timeout_seconds),
            };
            let secret = self.secret().await;
            self.domain = Some(Domain::new(
                &self.spec.namespace,
                &self.spec.group,
                secret,
                chosen.ip,
                t,
                self.ctx.metrics.clone(),
            ));
        }
        match self.join_when_all_arrive(&plan, epoch).await {
            Ok(()) => {
                tracing::info!(
                    epoch,
                    rank = plan.rank,
                    world = plan.world,
                    "joined the domain"
                );
                self.plan = Some(plan);
                self.publish_assignment();
                self.start_health();
                if let Err(message) = self.await_worker().await {
                    return Event::JoinFailed { epoch, message };
                }
                Event::Joined { epoch }
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
                message: e.to_string(),
            },
        }
    }

    /// Builds the domain of `epoch`. A domain forms only once every member of the new set
    /// is in it, and members still verifying or syncing weights may take longer than one
    /// init deadline (2 × `connectTimeoutSeconds`): a Rebuild's member whose weights are
    /// local would otherwise fail its join and, with it, the whole new set. An init that
    /// timed out while the group's status shows others still on their way is therefore
    /// begun again (bounded by [`ARRIVAL_WAIT`]); one that failed otherwise, or after the
    /// others arrived, fails. If the group planned a newer epoch meanwhile (a member of
    /// this one was replaced), the member joins that one instead of failing. A drain or
    /// deletion of this member ends the wait.
    async fn join_when_all_arrive(
        &mut self,
        plan: &ControlPlan,
        epoch: u64,
    ) -> std::result::Result<(), JoinStop> {
        let started = std::time::Instant::now();
        loop {
            let domain = self.domain.as_mut().expect("created by join");
            let err = match domain.join(plan, epoch).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if self.leaving() {
                return Err(JoinStop::Failed(err));
            }
            if let Err(e) = self.refresh().await {
                tracing::debug!(error = %e, "refresh failed; keeping the last group view");
            }
            // A member of this epoch was replaced meanwhile: this epoch can never form.
            if self.planned_epoch() > epoch && self.in_table() {
                return Err(JoinStop::EpochMoved(self.planned_epoch()));
            }
            let arriving = still_arriving(&self.group, &self.spec.pod);
            if !matches!(err.category(), "timeout" | "unreachable")
                || started.elapsed() > ARRIVAL_WAIT
                || arriving.is_empty()
                || self.planned_epoch() != epoch
            {
                return Err(JoinStop::Failed(err));
            }
            tracing::info!(
                epoch,
                ?arriving,
                "the domain is waiting for members still verifying or syncing; initialising again"
            );
        }
    }

    /// Whether this member's Pod is being drained or deleted (or is gone).
    fn leaving(&self) -> bool {
        self.spec_rx
            .borrow()
            .as_ref()
            .is_none_or(|s| s.deleting || s.drain_requested.is_some())
    }

    /// With `hcomm.io/worker-readiness: local-api`, waits until the worker reports that it
    /// serves, so the readiness gate — and with it the first request — never comes before
    /// the worker has its weights loaded (a readiness probe's job under a kubelet). Bounded
    /// by `--worker-ready-timeout-secs`.
    async fn await_worker(&self) -> std::result::Result<(), String> {
        if !self.spec.await_worker {
            return Ok(());
        }
        let mut serving = self.ctx.hub.slot(&self.spec.key()).serving.subscribe();
        let limit = self.ctx.cfg.worker_ready_timeout;
        match tokio::time::timeout(limit, serving.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err("the member's local API slot went away".into()),
            Err(_) => Err(format!(
                "the worker did not report `serving` over the local API within {limit:?} \
                 (Pod annotation hcomm.io/worker-readiness: local-api)"
            )),
        }
    }

    fn start_health(&mut self) {
        if self.health.is_some() {
            return;
        }
        let Some(d) = &self.domain else { return };
        let rx = d.watch();
        let ctx = self.ctx.clone();
        let group = format!("{}/{}", self.spec.namespace, self.spec.group);
        self.health = Some(tokio::spawn(crate::health::allreduce_loop(ctx, group, rx)));
    }

    fn stop_health(&mut self) {
        if let Some(h) = self.health.take() {
            h.abort();
        }
    }

    /// Waits until the worker reports zero in flight or the drain deadline (counted from
    /// the drain request's time) passes. A worker that never reported counts as zero.
    async fn await_drain(&mut self) -> Event {
        let timeout = Duration::from_secs(
            u64::try_from(self.group.scaling.drain_timeout_seconds).unwrap_or(300),
        );
        let requested = self
            .spec
            .drain_requested
            .as_deref()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let elapsed = requested
            .map(|t| k8s_openapi::jiff::Timestamp::now().duration_since(t))
            .and_then(|d| Duration::try_from(d).ok())
            .unwrap_or_default();
        let remaining = timeout.saturating_sub(elapsed);
        let mut rx = self.ctx.hub.slot(&self.spec.key()).inflight.subscribe();
        let drained = tokio::time::timeout(remaining, rx.wait_for(|n| n.unwrap_or(0) == 0)).await;
        let timed_out = !matches!(drained, Ok(Ok(_)));
        self.ctx
            .metrics
            .drains
            .with_label_values(&[if timed_out { "timed_out" } else { "drained" }])
            .inc();
        tracing::info!(timed_out, "drain finished");
        Event::DrainFinished { timed_out }
    }

    fn notify(&self, n: WorkerNotice) {
        let notice = match n {
            WorkerNotice::WeightsReady => Notice::WeightsReady {
                path: self.weights_path.clone(),
            },
            WorkerNotice::DrainRequested => Notice::DrainRequested {
                deadline: self.spec.drain_requested.clone(),
            },
            WorkerNotice::EpochChanged { epoch } => Notice::EpochChanged { epoch },
        };
        self.ctx.hub.notify(&self.spec.key(), notice);
    }

    fn pod_ref(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(self.spec.pod.clone()),
            namespace: Some(self.spec.namespace.clone()),
            uid: Some(self.spec.uid.clone()),
            ..Default::default()
        }
    }

    async fn event(&self, warning: bool, reason: &str, message: String) {
        let ev = KubeEvent {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(message.chars().take(1000).collect()),
            action: "MemberLifecycle".into(),
            secondary: None,
        };
        if let Err(e) = self.ctx.recorder.publish(&ev, &self.pod_ref()).await {
            tracing::warn!(error = %e, "could not publish an Event");
        }
    }

    async fn write_conditions(&self, updates: Vec<CondUpdate>) {
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.spec.namespace);
        for attempt in 0..3 {
            let pod = match api.get_status(&self.spec.pod).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "read pod status");
                    return;
                }
            };
            let existing = pod.status.and_then(|s| s.conditions).unwrap_or_default();
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let Some(merged) = conditions::merge(&existing, &updates, &now) else {
                return;
            };
            let body = conditions::patch_body(&merged);
            match api
                .patch_status(
                    &self.spec.pod,
                    &PatchParams {
                        field_manager: Some(crate::FIELD_MANAGER.into()),
                        ..Default::default()
                    },
                    &Patch::Strategic(&body),
                )
                .await
            {
                Ok(_) => {
                    for c in &updates {
                        tracing::info!(
                            condition = c.type_,
                            status = c.status,
                            reason = c.reason,
                            "pod condition"
                        );
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "patch pod conditions");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}
