//! Reconcile: a pipeline — fetch → validate → plan → apply (the Volcano PodGroup first,
//! when asked: [`podgroup`]) → status — with the cluster
//! touched only at the ends, a finalizer (`hcomm.io/cleanup`) so deleting a group drains
//! its members first, and an error policy by kind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_crds::conditions::{ConditionStatus, set_condition};
use hcomm_crds::contract::{GroupConditionType, GroupReason};
use hcomm_crds::{HcommGroup, HcommGroupStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, info, info_span, warn};

use crate::apply::{self, Outcome};
use crate::context::Context;
use crate::create_failures::CreateFailure;
use crate::error::{Error, Result};
use crate::links::{self, LinkReport};
use crate::observe::{self, Observed};
use crate::phase::ObservedMember;
use crate::planner::{Desired, Plan, PlanInput, rollout};
use crate::{
    allocation, disruption, group_secret, isolation, pdb, podgroup, revision, revision_history,
};
use crate::{events, finalizer, status, status_writer};

pub use crate::finalizer::FINALIZER;

/// Reconciles one `HcommGroup`.
pub async fn reconcile(group: Arc<HcommGroup>, ctx: Arc<Context>) -> Result<Action> {
    // Planned from a Pod cache that lacks this group's last writes, it would create their
    // Pods again; the event that brings them runs it again (`crate::cache`).
    let own_writes = observe::own_writes(&ctx, &group);
    if let observe::OwnWrites::Unseen { recheck_after } = own_writes {
        ctx.metrics.deferred.inc();
        tracing::debug!(
            namespace = %group.namespace().unwrap_or_default(),
            group = %group.name_any(),
            ?recheck_after,
            "deferred until the Pod cache shows the group's own writes"
        );
        return Ok(Action::requeue(recheck_after));
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let span = info_span!(
        "reconcile",
        namespace = %group.namespace().unwrap_or_default(),
        group = %group.name_any(),
        epoch = tracing::field::Empty,
    );
    let result = pipeline(&group, &ctx, own_writes)
        .instrument(span.clone())
        .await;
    let took = started.elapsed();
    ctx.metrics.duration.observe(took.as_secs_f64());
    span.in_scope(|| tracing::debug!(?took, ok = result.is_ok(), "reconciled"));
    if let Some(message) = result.as_ref().err().and_then(Error::refusal) {
        report_refused(&ctx, &group, message);
    }
    result
}

/// Says on the group what the API server refused (its status and a Warning Event): the
/// log alone is not where a tenant looks. The status write goes off the reconcile path.
fn report_refused(ctx: &Context, group: &HcommGroup, message: String) {
    let uid = group.meta().uid.clone().unwrap_or_default();
    let previous = ctx.status_written.latest(
        &uid,
        group.status.as_ref(),
        group.meta().resource_version.as_deref(),
    );
    let next = status::refused(&previous, group, message.clone(), Timestamp::now());
    if next != previous {
        ctx.status_writer
            .hand_over(status_writer::Target::of(group), next);
    }
    let note = events::Note {
        warning: true,
        reason: GroupReason::RequestRefused.as_str().to_owned(),
        message,
    };
    events::publish(ctx, group, vec![note]);
}

/// Error policy: an invalid spec waits for an edit; anything else retries soon.
pub fn error_policy(group: Arc<HcommGroup>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .errors
        .with_label_values(&[error.category()])
        .inc();
    warn!(group = %group.name_any(), category = error.category(), %error, "reconcile failed");
    match error.retry_after() {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    }
}

/// `own_writes`: judged as the reconcile began, `Seen` or `Overdue` (it does not change
/// before `prepare`: only this reconcile writes the group's Pods, and kube-rs never runs two
/// reconciles of one group at once).
async fn pipeline(
    group: &HcommGroup,
    ctx: &Context,
    own_writes: observe::OwnWrites,
) -> Result<Action> {
    let deleting = group.meta().deletion_timestamp.is_some();
    if !deleting && !group.finalizers().iter().any(|f| f == FINALIZER) {
        finalizer::add(ctx, group).await?;
    }
    // Once per `recently::RECHECK` per group, not on every reconcile: neither object
    // changes with the group's spec or members.
    let uid = group.meta().uid.clone().unwrap_or_default();
    let checked_at = Instant::now();
    if !deleting && ctx.secret_ensured.due(&uid, checked_at) {
        // Before any member exists: members authenticate with it (`crate::group_secret`).
        group_secret::ensure(&ctx.client, &ctx.secrets_namespace, group).await?;
        ctx.secret_ensured.done(&uid, checked_at);
    }
    if !deleting && ctx.budget_ensured.due(&uid, checked_at) {
        // Evictions (`kubectl drain`) are refused; members leave through hcomm's drain.
        pdb::ensure(&ctx.client, group).await?;
        ctx.budget_ensured.done(&uid, checked_at);
    }
    let prepared = observe::prepare(ctx, group, own_writes).await?;
    // The group's status as this process last wrote it, while the cached object lags
    // that write (`crate::status_written`): what planning and the next status start from.
    let latest = ctx.status_written.latest(
        &uid,
        group.status.as_ref(),
        group.meta().resource_version.as_deref(),
    );
    // From reading every group's NPUs to assuming this plan's joiners on their nodes
    // (`crate::cache`): no API call in between when the caches are current.
    let placement = ctx.placement.lock().await;
    let observed = observe::fetch(ctx, group, &latest, prepared).await?;
    let now = Timestamp::now();
    // Links are assessed once per reconcile; the decisions and the status both read it.
    let links = assess_links(&observed, ctx.links, now);
    let replace = isolation::replacements(&observed.members, &links);
    let (members, allocation_recheck) = allocation::judged(
        &isolation::judged(&observed.members, &replace),
        group.spec.devices_per_member,
        allocation::deadline(group.spec.comm.connect_timeout_seconds),
        now,
    );
    let invalid = validate(group).err();
    let mut input = plan_input(
        group,
        &observed,
        &members,
        invalid.is_some() && !deleting,
        now,
    );
    // Members that keep failing, or Pods the API server keeps refusing, hold new members
    // back: the later of the two waits.
    let generation = group.meta().generation;
    let create_failure = ctx.create_failures.current(&uid, generation);
    input.new_members_after = [
        ctx.failure_backoff(group, &members, now),
        create_failure.as_ref().map(CreateFailure::retry_at),
    ]
    .into_iter()
    .flatten()
    .filter(|t| now < *t)
    .max();
    // The planner's plan, with members on cordoned nodes moved off (`disruption`).
    let budget = disruption::Budget::of(&group.spec.scaling);
    let plan = disruption::plan(&input, &observed.cordoned, budget);
    let namespace = group.namespace().unwrap_or_default();
    let resource = group.spec.npu.resource_name.as_str();
    let npus = u32::try_from(group.spec.devices_per_member).unwrap_or(0);
    for joiner in plan.joiners() {
        ctx.assumed
            .assume(&namespace, &joiner.name, &joiner.node, resource, npus);
    }
    drop(placement);
    tracing::Span::current().record("epoch", plan.epoch);
    // The plan's revision is kept before any Pod of it exists (`crate::revision_history`).
    if !deleting && revision_history::needed(group) {
        revision_history::sync(ctx, group, &members).await?;
    }
    // Before the plan's Pods exist, so Volcano finds their PodGroup when they arrive.
    let pod_group = podgroup::sync(ctx, group, &plan).await;
    let outcome = apply::apply(ctx, group, &observed, &plan).await?;
    // Joiners the plan had but `apply` did not create (a refused layout) hold nothing.
    for joiner in plan.joiners() {
        if !outcome.created.contains(&joiner.name) {
            ctx.assumed.forget(&namespace, &joiner.name);
        }
    }
    let (plan, create_failure) = match &outcome.refused {
        Some(refusal) => {
            ctx.metrics
                .create_failures
                .with_label_values(&[&refusal.code_label()])
                .inc();
            let failure = ctx
                .create_failures
                .failed(&uid, refusal.clone(), generation, now);
            // The status shows the set as it stands, as the rounds that wait for the
            // next try plan it: a set with the refused joiners in it (and its epoch) was
            // never made, and the next round's would take it back.
            input.new_members_after = input.new_members_after.max(Some(failure.retry_at()));
            let waiting = disruption::plan(&input, &observed.cordoned, budget);
            (waiting, Some(failure))
        }
        // Created, or no member missing (or the group is going): nothing stands.
        None if !outcome.created.is_empty() || plan.delayed_until.is_none() => {
            ctx.create_failures.forget(&uid);
            (plan, None)
        }
        // Waiting out the delay: the last refusal still says why members are missing.
        None => (plan, create_failure),
    };
    let links = links_after(&links, &members, &outcome);
    update_status(
        ctx,
        group,
        &uid,
        &latest,
        &observed,
        &members,
        &plan,
        &outcome,
        &links,
        invalid.as_deref(),
        create_failure.as_ref(),
        &pod_group,
        now,
    )
    .await?;
    if deleting {
        if plan.finished {
            // The members are gone: nobody needs the group's secret any more.
            if let Some(uid) = group.meta().uid.as_deref() {
                group_secret::delete(&ctx.client, &ctx.secrets_namespace, uid).await?;
                ctx.secret_ensured.forget(uid);
                ctx.budget_ensured.forget(uid);
                ctx.status_written.forget(uid);
            }
            let key = (group.namespace().unwrap_or_default(), group.name_any());
            ctx.table_writes.forget(&key);
            finalizer::remove(ctx, group).await?;
            ctx.metrics
                .forget_group(&group.namespace().unwrap_or_default(), &group.name_any());
            info!("members gone; finalizer removed");
            return Ok(Action::await_change());
        }
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    if invalid.is_some() {
        return Ok(Action::await_change());
    }
    Ok(next_action(&plan, &outcome, &links, allocation_recheck))
}

/// The links between the nodes of the members that move traffic: judged once per
/// reconcile, from the link tests the agents published.
pub fn assess_links(observed: &Observed, policy: links::LinkPolicy, now: Timestamp) -> LinkReport {
    let nodes = traffic_nodes(&observed.members, |_| true);
    links::assess(&nodes, &observed.nodes, &observed.link_tests, policy, now)
        .with_published(&observed.published_at)
}

/// The same report narrowed to the members left after this round's deletions (a deleted
/// member's links no longer matter): what the status shows.
pub fn links_after(
    report: &LinkReport,
    members: &[ObservedMember],
    outcome: &Outcome,
) -> LinkReport {
    let nodes = traffic_nodes(members, |m| {
        !outcome.deleted.iter().any(|r| r.name == m.name)
    });
    report.among(&nodes)
}

/// The nodes of the members that move traffic ([`links::carries_traffic`]) and pass `keep`.
fn traffic_nodes(
    members: &[ObservedMember],
    keep: impl Fn(&ObservedMember) -> bool,
) -> std::collections::BTreeSet<String> {
    members
        .iter()
        .filter(|m| links::carries_traffic(m.phase) && keep(m))
        .filter_map(|m| m.node.clone())
        .collect()
}

/// Checks what the schema cannot (a group stored before its CRD had the rule).
pub fn validate(group: &HcommGroup) -> std::result::Result<(), String> {
    if group.spec.replicas < 0 {
        return Err("replicas must not be negative".into());
    }
    if group.spec.scaling.standby < 0 {
        return Err("scaling.standby must not be negative".into());
    }
    Ok(())
}

/// The planner input for `group`, with the members as judged ([`isolation::judged`]). An
/// invalid spec keeps the members as they are.
pub fn plan_input(
    group: &HcommGroup,
    observed: &Observed,
    members: &[ObservedMember],
    frozen: bool,
    now: Timestamp,
) -> PlanInput {
    let spec = &group.spec;
    let in_set = members.iter().filter(|m| m.in_set()).count() as i32;
    let labelled_standby = members.iter().filter(|m| m.in_set() && m.standby).count() as i32;
    PlanInput {
        desired: Desired {
            group: group.name_any(),
            // Frozen (an invalid spec): the set and its labels stay as they are.
            replicas: if frozen {
                in_set - labelled_standby
            } else {
                spec.replicas
            },
            standby: if frozen {
                labelled_standby
            } else {
                spec.scaling.standby
            },
            devices_per_member: spec.devices_per_member,
            strategy: spec.scaling.strategy,
            max_joining: spec.scaling.max_joining,
            max_unavailable: spec.scaling.max_unavailable,
            drain_timeout: SignedDuration::from_secs(spec.scaling.drain_timeout_seconds.into()),
            deleting: group.meta().deletion_timestamp.is_some(),
            weights_digest: spec.weights.as_ref().map(|w| w.digest.clone()),
            rollout: rollout_settings(group),
        },
        members: members.to_vec(),
        nodes: observed.nodes.clone(),
        used_npus: observed.used_npus.clone(),
        recorded: observed.recorded.clone(),
        avoid_nodes: observe::avoid_nodes(group).into_iter().collect(),
        new_members_after: None,
        rollout_stopped: status::rollout_stopped(group),
        now,
    }
}

/// The rolling update's settings from `spec.updateStrategy` (see `planner::rollout`).
pub fn rollout_settings(group: &HcommGroup) -> rollout::Settings {
    let spec = &group.spec;
    let rolling = &spec.update_strategy.rolling_update;
    rollout::Settings {
        update_revision: revision::of(spec),
        max_surge: rolling.max_surge,
        max_unavailable: rolling.max_unavailable,
        partition: rolling.partition,
        progress_deadline: SignedDuration::from_secs(
            spec.update_strategy.progress_deadline_seconds.into(),
        ),
        dense_ranks: spec.comm.backend == hcomm_crds::Backend::Hccl,
    }
}

#[allow(clippy::too_many_arguments)]
async fn update_status(
    ctx: &Context,
    group: &HcommGroup,
    uid: &str,
    previous: &HcommGroupStatus,
    observed: &Observed,
    members: &[ObservedMember],
    plan: &Plan,
    outcome: &Outcome,
    links: &LinkReport,
    invalid: Option<&str>,
    create_failure: Option<&CreateFailure>,
    pod_group: &podgroup::PodGroupOutcome,
    now: Timestamp,
) -> Result<()> {
    let mut next = status::build(status::StatusInput {
        group,
        previous,
        members,
        plan,
        outcome,
        nodes: &observed.nodes,
        invalid,
        create_failure,
        links,
        now,
    });
    let pod_group_ready = GroupConditionType::PodGroupReady.as_str();
    match pod_group.condition() {
        Some((ok, reason, message)) => {
            set_condition(
                &mut next.conditions,
                pod_group_ready,
                ConditionStatus::from_bool(ok),
                reason.as_str(),
                message,
                group.metadata.generation,
                Time(now),
            );
        }
        // Not asked (any more): no condition about a PodGroup.
        None => next.conditions.retain(|c| c.type_ != pod_group_ready),
    }
    let namespace = group.namespace().unwrap_or_default();
    let phases: Vec<_> = next.members.iter().map(|m| m.phase).collect();
    ctx.metrics
        .set_members(&namespace, &group.name_any(), &phases);
    ctx.metrics
        .set_links(&namespace, &group.name_any(), links.counts());
    for member in members {
        let was_ready = previous
            .members
            .iter()
            .any(|m| m.name == member.name && m.phase == hcomm_crds::MemberPhase::Ready);
        if member.phase == hcomm_crds::MemberPhase::Ready
            && !was_ready
            && let Some(created) = member.created_at
        {
            let seconds = now.duration_since(created).as_secs_f64().max(0.0);
            ctx.metrics.scale_to_ready.observe(seconds);
        }
    }
    let notes = events::for_round(previous, &next, outcome);
    if *previous != next {
        let target = status_writer::Target::of(group);
        if group.meta().deletion_timestamp.is_some() {
            // The finalizer may come off next: the status must be stored first.
            ctx.status_writer.write(target, next).await?;
        } else {
            ctx.status_writer.hand_over(target, next);
        }
    } else {
        let cached_version = group.meta().resource_version.as_deref();
        ctx.status_written.unchanged(uid, &next, cached_version);
    }
    events::publish(ctx, group, notes);
    Ok(())
}

fn next_action(
    plan: &Plan,
    outcome: &Outcome,
    links: &LinkReport,
    allocation_recheck: Option<SignedDuration>,
) -> Action {
    let busy = !outcome.created.is_empty() || !outcome.deleted.is_empty() || !plan.drain.is_empty();
    let mut after = if busy {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(300)
    };
    if plan.unplaced > 0 {
        after = after.min(Duration::from_secs(10));
    }
    // A drain deadline (or the next try of held-back members), a member's
    // placement/allocation deadline, or the moment the freshest link results turn stale
    // (an agent that stops publishing changes nothing in the cluster, so no watch event
    // would wake us).
    for deadline in [plan.recheck_after, links.recheck_after, allocation_recheck]
        .into_iter()
        .flatten()
    {
        let deadline =
            Duration::try_from(deadline).unwrap_or_default() + Duration::from_millis(200);
        after = after.min(deadline);
    }
    Action::requeue(after)
}
