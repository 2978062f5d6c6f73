//! Reconcile: a pipeline — fetch → validate → plan → apply → status — with the cluster
//! touched only at the ends, a finalizer (`hcomm.io/cleanup`) so deleting a group drains
//! its members first, and an error policy by kind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_crds::HcommGroup;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, info, info_span, warn};

use crate::apply::{self, Outcome};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::links::{self, LinkReport};
use crate::observe::{self, Observed};
use crate::planner::{self, Desired, Plan, PlanInput};
use crate::{events, status};

pub use hcomm_crds::contract::FINALIZER;

/// Reconciles one `HcommGroup`.
pub async fn reconcile(group: Arc<HcommGroup>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let span = info_span!(
        "reconcile",
        namespace = %group.namespace().unwrap_or_default(),
        group = %group.name_any(),
        epoch = tracing::field::Empty,
    );
    let result = pipeline(&group, &ctx).instrument(span).await;
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    result
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

async fn pipeline(group: &HcommGroup, ctx: &Context) -> Result<Action> {
    let deleting = group.meta().deletion_timestamp.is_some();
    if !deleting && !group.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(ctx, group).await?;
    }
    let placement = ctx.placement.lock().await;
    let mut observed = observe::fetch(ctx, group).await?;
    let now = Timestamp::now();
    fail_isolated_members(&mut observed, ctx.links, now);
    let invalid = validate(group).err();
    let mut input = plan_input(group, &observed, invalid.is_some() && !deleting, now);
    input.new_members_after = ctx.failure_backoff(group, &observed, now);
    let plan = planner::plan(&input);
    tracing::Span::current().record("epoch", plan.epoch);
    let outcome = apply::apply(ctx, group, &observed, &plan).await?;
    drop(placement);
    let links = link_report(&observed, &outcome, ctx.links, now);
    update_status(
        ctx,
        group,
        &observed,
        &plan,
        &outcome,
        &links,
        invalid.as_deref(),
        now,
    )
    .await?;
    if deleting {
        if plan.finished {
            remove_finalizer(ctx, group).await?;
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
    Ok(next_action(&plan, &outcome, &links))
}

/// The links between the nodes of the members that move traffic, after this round's
/// deletions (a deleted member's links no longer matter).
pub fn link_report(
    observed: &Observed,
    outcome: &Outcome,
    policy: links::LinkPolicy,
    now: Timestamp,
) -> LinkReport {
    let nodes = traffic_nodes(observed, |m| {
        !outcome.deleted.iter().any(|r| r.name == m.name)
    });
    links::assess(&nodes, &observed.nodes, &observed.link_tests, policy, now)
}

/// The nodes of the members that move traffic ([`links::carries_traffic`]) and pass `keep`.
fn traffic_nodes(
    observed: &Observed,
    keep: impl Fn(&crate::phase::ObservedMember) -> bool,
) -> std::collections::BTreeSet<String> {
    observed
        .members
        .iter()
        .filter(|m| links::carries_traffic(m.phase) && keep(m))
        .filter_map(|m| m.node.clone())
        .collect()
}

/// Members on a node the data network has lost ([`LinkReport::isolated_nodes`]) cannot
/// take part in a collective; they count as failed, so the plan replaces them elsewhere
/// while the others keep serving.
pub fn fail_isolated_members(observed: &mut Observed, policy: links::LinkPolicy, now: Timestamp) {
    let nodes = traffic_nodes(observed, |_| true);
    let report = links::assess(&nodes, &observed.nodes, &observed.link_tests, policy, now);
    let isolated = report.isolated_nodes();
    for m in &mut observed.members {
        // Evidence must postdate the member: a link found down before the member was
        // created (e.g. while its node was cut earlier and not probed again since) says
        // nothing about it.
        let after_creation = |node: &str| {
            report
                .links
                .iter()
                .filter(|l| l.to == node && l.state == links::LinkState::Down)
                .all(|l| matches!((l.probed_at, m.created_at), (Some(p), Some(c)) if p > c))
        };
        if let Some((node, why)) = m.node.as_ref().and_then(|n| isolated.get_key_value(n))
            && !m.failed
            && links::carries_traffic(m.phase)
            && after_creation(node)
        {
            tracing::warn!(member = %m.name, reason = %why, "member on an isolated node counts as failed");
            m.failed = true;
            m.unreachable = true;
            m.message = Some(why.clone());
        }
    }
}

/// Checks what the schema cannot (a group stored before its CRD had the rule).
pub fn validate(group: &HcommGroup) -> std::result::Result<(), String> {
    if group.spec.replicas < 0 {
        return Err("replicas must not be negative".into());
    }
    Ok(())
}

/// The planner input for `group`. An invalid spec keeps the members as they are.
pub fn plan_input(
    group: &HcommGroup,
    observed: &Observed,
    frozen: bool,
    now: Timestamp,
) -> PlanInput {
    let spec = &group.spec;
    let in_set = observed.members.iter().filter(|m| m.in_set()).count() as i32;
    PlanInput {
        desired: Desired {
            group: group.name_any(),
            replicas: if frozen { in_set } else { spec.replicas },
            devices_per_member: spec.devices_per_member,
            strategy: spec.scaling.strategy,
            max_joining: spec.scaling.max_joining,
            max_unavailable: spec.scaling.max_unavailable,
            drain_timeout: SignedDuration::from_secs(spec.scaling.drain_timeout_seconds.into()),
            deleting: group.meta().deletion_timestamp.is_some(),
            weights_digest: spec.weights.as_ref().map(|w| w.digest.clone()),
        },
        members: observed.members.clone(),
        nodes: observed.nodes.clone(),
        used_devices: observed.used_devices.clone(),
        recorded: observed.recorded.clone(),
        avoid_nodes: observe::avoid_nodes(group).into_iter().collect(),
        new_members_after: None,
        now,
    }
}

#[allow(clippy::too_many_arguments)]
async fn update_status(
    ctx: &Context,
    group: &HcommGroup,
    observed: &Observed,
    plan: &Plan,
    outcome: &Outcome,
    links: &LinkReport,
    invalid: Option<&str>,
    now: Timestamp,
) -> Result<()> {
    let next = status::build(status::StatusInput {
        group,
        members: &observed.members,
        plan,
        outcome,
        nodes: &observed.nodes,
        invalid,
        links,
        now,
    });
    let previous = group.status.clone().unwrap_or_default();
    let namespace = group.namespace().unwrap_or_default();
    let phases: Vec<_> = next.members.iter().map(|m| m.phase).collect();
    ctx.metrics
        .set_members(&namespace, &group.name_any(), &phases);
    ctx.metrics
        .set_links(&namespace, &group.name_any(), links.counts());
    for member in &observed.members {
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
    let notes = events::for_round(&previous, &next, outcome);
    if next != previous {
        let api: Api<HcommGroup> = Api::namespaced(ctx.client.clone(), &namespace);
        status::write(&api, &group.name_any(), &next).await?;
    }
    events::publish(ctx, group, notes).await;
    Ok(())
}

fn next_action(plan: &Plan, outcome: &Outcome, links: &LinkReport) -> Action {
    let busy = !outcome.created.is_empty() || !outcome.deleted.is_empty() || !plan.drain.is_empty();
    let mut after = if busy {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(300)
    };
    if plan.unplaced > 0 {
        after = after.min(Duration::from_secs(10));
    }
    // A drain deadline, or the moment the freshest link results turn stale (an agent that
    // stops publishing changes nothing in the cluster, so no watch event would wake us).
    for deadline in [plan.recheck_after, links.recheck_after]
        .into_iter()
        .flatten()
    {
        let deadline =
            Duration::try_from(deadline).unwrap_or_default() + Duration::from_millis(200);
        after = after.min(deadline);
    }
    Action::requeue(after)
}

async fn add_finalizer(ctx: &Context, group: &HcommGroup) -> Result<()> {
    let add = |finalizers: &mut Vec<String>| {
        if !finalizers.iter().any(|f| f == FINALIZER) {
            finalizers.push(FINALIZER.to_owned());
        }
    };
    patch_finalizers(ctx, group, add, "add finalizer").await
}

async fn remove_finalizer(ctx: &Context, group: &HcommGroup) -> Result<()> {
    let remove = |finalizers: &mut Vec<String>| finalizers.retain(|f| f != FINALIZER);
    match patch_finalizers(ctx, group, remove, "remove finalizer").await {
        Err(Error::Kube {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 404 => Ok(()),
        other => other,
    }
}

/// Replaces the finalizer list, conditional on the `resourceVersion` just read (a merge
/// patch carrying `metadata.resourceVersion` conflicts when the object changed meanwhile).
async fn patch_finalizers(
    ctx: &Context,
    group: &HcommGroup,
    edit: impl Fn(&mut Vec<String>),
    action: &str,
) -> Result<()> {
    let api: Api<HcommGroup> =
        Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    // The cached object is stale after this round's own status write: read the latest.
    let Some(latest) = api
        .get_opt(&group.name_any())
        .await
        .map_err(Error::kube(action))?
    else {
        return Ok(());
    };
    let mut finalizers = latest.finalizers().to_vec();
    let before = finalizers.clone();
    edit(&mut finalizers);
    if finalizers == before {
        return Ok(());
    }
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": latest.resource_version(),
        }
    });
    api.patch(
        &group.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube(action))?;
    Ok(())
}
