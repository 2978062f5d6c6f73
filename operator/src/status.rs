//! The `HcommGroup` status (pure builder; `crate::status_writer` writes it).
//!
//! `replicas` counts member Pods that exist (any phase but gone) other than the warm
//! standby ones, which `standbyReplicas` counts; `readyReplicas` those whose readiness gate
//! is True; `members`, `topology`, `epoch`, `rankTable`, `selector` and the
//! `Ready` / `Progressing` / `Degraded` conditions follow from the plan and what was observed;
//! `LinksHealthy` (and a `LinkDown` / `LinkDegraded` cause of `Degraded`) from the
//! [`LinkReport`] of the members' nodes.
//!
//! Size: one status builder whose conditions read each other (Ready, Progressing,
//! Degraded, LinksHealthy, the rollout's counts), and their tests.

use std::collections::BTreeMap;

use hcomm_crds::conditions::{ConditionStatus, find_condition, set_condition};
use hcomm_crds::contract::{
    CONDITION_DEGRADED, CONDITION_LINKS_HEALTHY, CONDITION_PROGRESSING, CONDITION_READY,
    GroupReason, reasons,
};
use hcomm_crds::{
    GroupPhase, HcommGroup, HcommGroupStatus, MemberPhase, MemberStatus, TopologyEntry,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::apply::Outcome;
use crate::create_failures::CreateFailure;
use crate::links::LinkReport;
use crate::phase::ObservedMember;
use crate::planner::rollout::{Progress, Stop, StopReason};
use crate::planner::{NodeInventory, Plan, RemovalReason, ranks};
use crate::pod_builder::selector_string;
use crate::rank_table::config_map_name;
use crate::revision;

/// How long a `DrainTimedOut` stays on the `Degraded` condition when nothing else is wrong.
const DRAIN_TIMEOUT_STICKS: SignedDuration = SignedDuration::from_mins(10);

/// What the status is computed from.
#[derive(Debug, Clone, Copy)]
pub struct StatusInput<'a> {
    /// The group as fetched.
    pub group: &'a HcommGroup,
    /// Its status as last written: this process's last write while the cached object does
    /// not show it yet (`crate::status_written`). Phase times and condition transition
    /// times carry on from it; from a cached status older than the last write, a member
    /// that just changed phase would change "again", and every round would write.
    pub previous: &'a HcommGroupStatus,
    /// Its member Pods as observed before applying the plan.
    pub members: &'a [ObservedMember],
    /// The plan.
    pub plan: &'a Plan,
    /// What applying it did.
    pub outcome: &'a Outcome,
    /// Node inventories.
    pub nodes: &'a [NodeInventory],
    /// Why the spec is invalid, when it is.
    pub invalid: Option<&'a str>,
    /// The member Pods the API server would not create, while that stands.
    pub create_failure: Option<&'a CreateFailure>,
    /// The links between the members' nodes.
    pub links: &'a LinkReport,
    /// The current time.
    pub now: Timestamp,
}

/// Computes the next status.
pub fn build(input: StatusInput<'_>) -> HcommGroupStatus {
    let group = input.group;
    let name = group.metadata.name.clone().unwrap_or_default();
    let generation = group.metadata.generation;
    let previous = input.previous;
    let dpm = group.spec.devices_per_member;
    let weights = group.spec.weights.as_ref().map(|w| w.version.clone());
    let since: BTreeMap<&str, (MemberPhase, Option<Time>)> = previous
        .members
        .iter()
        .map(|m| (m.name.as_str(), (m.phase, m.phase_since.clone())))
        .collect();
    let data_ip = |node: &Option<String>| {
        let node = node.as_deref()?;
        input
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.data_address.clone())
    };

    let mut members: Vec<MemberStatus> = Vec::new();
    for m in input.members {
        if input.outcome.deleted.iter().any(|r| r.name == m.name) {
            continue;
        }
        let phase = if input.outcome.drain_requested.contains(&m.name) {
            MemberPhase::Draining
        } else {
            m.phase
        };
        members.push(MemberStatus {
            name: m.name.clone(),
            index: m.index,
            node: m.node.clone(),
            ranks: ranks::rank_range(m.index, dpm),
            device_ids: m.devices.clone(),
            data_ip: data_ip(&m.node),
            phase,
            phase_since: phase_since(&since, &m.name, phase, input.now),
            epoch: m.epoch,
            weights_version: matches!(
                phase,
                MemberPhase::Joining
                    | MemberPhase::Standby
                    | MemberPhase::Ready
                    | MemberPhase::Draining
            )
            .then(|| weights.clone())
            .flatten(),
            message: m.message.clone(),
        });
    }
    for joiner in input.plan.joiners() {
        if !input.outcome.created.contains(&joiner.name) {
            continue;
        }
        members.push(MemberStatus {
            name: joiner.name.clone(),
            index: joiner.index,
            node: Some(joiner.node.clone()),
            ranks: ranks::rank_range(joiner.index, dpm),
            device_ids: joiner.devices.clone(),
            data_ip: data_ip(&Some(joiner.node.clone())),
            phase: MemberPhase::Pending,
            phase_since: Some(Time(input.now)),
            epoch: input.plan.epoch,
            weights_version: None,
            message: None,
        });
    }
    members.sort_by(|a, b| (a.index, &a.name).cmp(&(b.index, &b.name)));

    let topology = topology(input, dpm);
    // The planned set's standby members that exist (this round's joiners once created).
    let standby = input
        .plan
        .members
        .iter()
        .filter(|p| p.standby && (!p.joiner || input.outcome.created.contains(&p.name)))
        .count() as i32;
    let warm = members
        .iter()
        .filter(|m| m.phase == MemberPhase::Standby)
        .count() as i32;
    let replicas = members.len() as i32 - standby;
    let ready = members
        .iter()
        .filter(|m| m.phase == MemberPhase::Ready)
        .count() as i32;
    let desired = if group.metadata.deletion_timestamp.is_some() {
        0
    } else {
        group.spec.replicas
    };
    let joining = members.iter().filter(|m| m.phase.is_joining()).count();
    let leaving = members
        .iter()
        .filter(|m| m.phase.is_leaving() || m.phase == MemberPhase::Failed)
        .count();

    let mut conditions = previous.conditions.clone();
    let now = Time(input.now);
    let all_ready = ready == desired && replicas == desired && input.plan.unplaced == 0;
    let progress_reason = if leaving > 0 && joining == 0 {
        reasons::SCALING_IN
    } else {
        reasons::SCALING_OUT
    };
    let mut ready_message = format!("{ready}/{desired} members ready");
    if group.spec.scaling.standby > 0 || standby > 0 {
        ready_message.push_str(&format!(
            ", {warm}/{} standby warm",
            group.spec.scaling.standby
        ));
    }
    if all_ready {
        set(
            &mut conditions,
            CONDITION_READY,
            true,
            reasons::ALL_MEMBERS_READY,
            ready_message,
            generation,
            &now,
        );
    } else {
        set(
            &mut conditions,
            CONDITION_READY,
            false,
            progress_reason,
            ready_message,
            generation,
            &now,
        );
    }
    let held = input.outcome.held.as_ref();
    let revisions = revision_summary(input);
    if let Some((status, reason, message)) = rollout_condition(input, &revisions) {
        set(
            &mut conditions,
            CONDITION_PROGRESSING,
            status,
            reason,
            message,
            generation,
            &now,
        );
    } else if joining > 0 || leaving > 0 || input.plan.unplaced > 0 || held.is_some() {
        let mut message = format!(
            "epoch {}: {joining} joining, {leaving} leaving, {} waiting for capacity",
            input.plan.epoch, input.plan.unplaced
        );
        let mut reason = progress_reason;
        if let Some(held) = held {
            message.push_str(&format!("; rank table not published: {held}"));
            if held.reason() == GroupReason::WaitingForAllocation {
                reason = GroupReason::WaitingForAllocation.as_str();
            }
        }
        set(
            &mut conditions,
            CONDITION_PROGRESSING,
            true,
            reason,
            message,
            generation,
            &now,
        );
    } else if let Some(until) = input.plan.delayed_until {
        // Not "Stable": members are missing, held back by a backoff — their Pods were
        // refused, or members keep failing.
        let (reason, why, see) = match input.create_failure {
            Some(_) => (
                GroupReason::FailedCreate,
                "new member Pods were refused, tried again at",
                "the Degraded condition says why",
            ),
            None => (
                GroupReason::FailureBackoff,
                "members keep failing, so new members wait until",
                "see the failed members' messages and the group's Events",
            ),
        };
        let message = format!(
            "epoch {}: {} of {} members; {why} {until} ({see})",
            input.plan.epoch,
            input.plan.members.len(),
            group.spec.replicas + group.spec.scaling.standby,
        );
        set(
            &mut conditions,
            CONDITION_PROGRESSING,
            true,
            reason.as_str(),
            message,
            generation,
            &now,
        );
    } else {
        let message = format!("epoch {}: membership matches the spec", input.plan.epoch);
        set(
            &mut conditions,
            CONDITION_PROGRESSING,
            false,
            reasons::STABLE,
            message,
            generation,
            &now,
        );
    }
    let (links_status, links_reason, links_message) = input.links.condition();
    set_condition(
        &mut conditions,
        CONDITION_LINKS_HEALTHY,
        links_status,
        links_reason,
        links_message,
        generation,
        now.clone(),
    );
    let (degraded, reason, message) = degraded(input, previous);
    set(
        &mut conditions,
        CONDITION_DEGRADED,
        degraded,
        reason,
        message,
        generation,
        &now,
    );

    let phase = if group.metadata.deletion_timestamp.is_some() {
        GroupPhase::Deleting
    } else if degraded {
        GroupPhase::Degraded
    } else if all_ready {
        GroupPhase::Ready
    } else if ready == 0 {
        GroupPhase::Pending
    } else {
        GroupPhase::Scaling
    };
    HcommGroupStatus {
        replicas,
        ready_replicas: ready,
        standby_replicas: standby,
        selector: Some(selector_string(&name)),
        epoch: input.plan.epoch,
        phase: Some(phase),
        observed_generation: generation,
        rank_table: Some(config_map_name(&name)),
        current_revision: Some(revisions.current),
        update_revision: Some(revisions.update),
        updated_replicas: revisions.updated,
        current_replicas: revisions.current_count,
        members,
        topology,
        conditions,
    }
}

/// The revisions of the members in the set after this round: this round's drains and
/// deletions left it, its joiners (of the update revision) entered it.
fn revision_summary(input: StatusInput<'_>) -> revision::Summary {
    let outcome = input.outcome;
    let left = |name: &String| {
        outcome.drain_requested.contains(name) || outcome.deleted.iter().any(|r| &r.name == name)
    };
    let staying: Vec<ObservedMember> = input
        .members
        .iter()
        .filter(|m| !left(&m.name))
        .cloned()
        .collect();
    let mut summary = revision::summary(&staying, &revision::of(&input.group.spec));
    let joined = outcome.created.len() as i32;
    summary.updated += joined;
    if summary.current == summary.update {
        summary.current_count += joined;
    }
    summary
}

/// The `Progressing` condition while a rollout is under way, paused or stopped; `None`
/// when every member runs the update revision (membership decides then).
fn rollout_condition(
    input: StatusInput<'_>,
    revisions: &revision::Summary,
) -> Option<(bool, &'static str, String)> {
    let spec = &input.group.spec;
    let counts = format!(
        "{}/{} members on revision {} ({} still on {})",
        revisions.updated,
        spec.replicas,
        revisions.update,
        revisions.current_count,
        revisions.current
    );
    match &input.plan.rollout {
        Progress::Complete => None,
        Progress::Rolling => Some((
            true,
            GroupReason::RollingUpdate.as_str(),
            format!("rolling update: {counts}"),
        )),
        Progress::Paused => Some((
            false,
            GroupReason::PartitionPaused.as_str(),
            format!(
                "members below partition {} keep their revision: {counts}",
                spec.update_strategy.rolling_update.partition
            ),
        )),
        Progress::Stopped(stop) => Some((
            false,
            stop.reason.reason().as_str(),
            format!("{STOPPED}{}", stop.message),
        )),
    }
}

/// How the `Progressing` message of a stopped rollout starts; the stop's own message
/// follows.
const STOPPED: &str =
    "rollout stopped, the old members keep serving; apply a fixed template or the old one: ";

/// A stop of the rollout to the group's current revision, from the status an earlier
/// round wrote (`Progressing=False` with a stop reason, for the same `updateRevision`):
/// a stopped rollout stays stopped until the template or weights change.
pub fn rollout_stopped(group: &HcommGroup) -> Option<Stop> {
    let status = group.status.as_ref()?;
    if status.update_revision.as_deref() != Some(revision::of(&group.spec).as_str()) {
        return None;
    }
    let condition = find_condition(&status.conditions, CONDITION_PROGRESSING)?;
    if condition.status != "False" {
        return None;
    }
    let reason = StopReason::from_reason(&condition.reason)?;
    let message = condition
        .message
        .strip_prefix(STOPPED)
        .unwrap_or(&condition.message);
    Some(Stop {
        reason,
        message: message.to_owned(),
    })
}

/// `previous` with `Degraded=True` (reason `RequestRefused`, the API server's words in
/// `message`) for a round a refused write stopped. Everything else stands as it was: the
/// round saw no further (pure).
pub fn refused(
    previous: &HcommGroupStatus,
    group: &HcommGroup,
    message: String,
    now: Timestamp,
) -> HcommGroupStatus {
    let mut next = previous.clone();
    set(
        &mut next.conditions,
        CONDITION_DEGRADED,
        true,
        GroupReason::RequestRefused.as_str(),
        message,
        group.metadata.generation,
        &Time(now),
    );
    if group.metadata.deletion_timestamp.is_none() {
        next.phase = Some(GroupPhase::Degraded);
    }
    next
}

fn set(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) {
    set_condition(
        conditions,
        type_,
        ConditionStatus::from_bool(status),
        reason,
        message,
        generation,
        now.clone(),
    );
}

fn phase_since(
    previous: &BTreeMap<&str, (MemberPhase, Option<Time>)>,
    name: &str,
    phase: MemberPhase,
    now: Timestamp,
) -> Option<Time> {
    match previous.get(name) {
        Some((old, since)) if *old == phase && since.is_some() => since.clone(),
        _ => Some(Time(now)),
    }
}

/// Whether the group is degraded, why, and the message.
fn degraded(input: StatusInput<'_>, previous: &HcommGroupStatus) -> (bool, &'static str, String) {
    if let Some(invalid) = input.invalid {
        return (true, reasons::INVALID_SPEC, invalid.to_owned());
    }
    // Before the others: a refused Pod is the tenant's to fix, and the API server's words
    // are the only place that says how.
    if let Some(failure) = input.create_failure {
        return (true, GroupReason::FailedCreate.as_str(), failure.describe());
    }
    let timed_out: Vec<&str> = input
        .outcome
        .deleted
        .iter()
        .filter(|r| r.reason == RemovalReason::DrainTimedOut)
        .map(|r| r.name.as_str())
        .collect();
    if !timed_out.is_empty() {
        return (
            true,
            reasons::DRAIN_TIMED_OUT,
            format!(
                "drain of {} did not finish within {}s; removed anyway",
                timed_out.join(", "),
                input.group.spec.scaling.drain_timeout_seconds
            ),
        );
    }
    if input.plan.unplaced > 0 {
        return (
            true,
            reasons::INSUFFICIENT_CAPACITY,
            format!(
                "{} member(s) of {} healthy free device(s) each cannot be placed on any node",
                input.plan.unplaced, input.group.spec.devices_per_member
            ),
        );
    }
    if let Some(held) = input
        .outcome
        .held
        .as_ref()
        .filter(|h| h.reason() != GroupReason::WaitingForAllocation)
    {
        return (
            true,
            held.reason().as_str(),
            format!("epoch {}: {held}", input.plan.epoch),
        );
    }
    if !input.plan.failed.is_empty() {
        let failed: Vec<&ObservedMember> = input
            .members
            .iter()
            .filter(|m| input.plan.failed.contains(&m.name))
            .collect();
        let messages: Vec<String> = failed
            .iter()
            .map(|m| format!("{}: {}", m.name, m.message.clone().unwrap_or_default()))
            .collect();
        // A member given up for its placement or allocation says so; any other failure is
        // the agent's verdict.
        let reason = failed
            .iter()
            .find_map(|m| m.blocked)
            .map_or(reasons::VERIFICATION_FAILED, GroupReason::as_str);
        return (true, reason, messages.join("; "));
    }
    let unschedulable: Vec<String> = input
        .members
        .iter()
        .filter(|m| m.blocked == Some(GroupReason::Unschedulable))
        .map(|m| format!("{}: {}", m.name, m.message.clone().unwrap_or_default()))
        .collect();
    if !unschedulable.is_empty() {
        return (
            true,
            GroupReason::Unschedulable.as_str(),
            unschedulable.join("; "),
        );
    }
    // A dead link between serving members is current trouble: it outranks the reminder of
    // a past drain timeout below.
    if let Some((reason, message)) = input.links.degraded() {
        return (true, reason, message);
    }
    if let Some(c) = find_condition(&previous.conditions, CONDITION_DEGRADED)
        && c.status == "True"
        && c.reason == reasons::DRAIN_TIMED_OUT
        && input.now.duration_since(c.last_transition_time.0) < DRAIN_TIMEOUT_STICKS
    {
        return (true, reasons::DRAIN_TIMED_OUT, c.message.clone());
    }
    (false, reasons::HEALTHY, "no problem found".to_owned())
}

/// Ranks beyond which `status.topology` is left empty: one entry is about 150 bytes of
/// JSON, so 4,096 ranks take about 600 KiB of the 1.5 MiB an object may have in etcd,
/// beside 1,000 members' `status.members` (about 250 KiB). Larger groups find the same
/// rank → device → node map in their rank-table ConfigMap and in `status.members` (node,
/// rank range and device ids of each member); see `docs/design.md`, "Rank-table and
/// status size".
pub const MAX_TOPOLOGY_RANKS: usize = 4096;

/// Rank → device → node map of the planned set (empty above [`MAX_TOPOLOGY_RANKS`]).
fn topology(input: StatusInput<'_>, dpm: i32) -> Vec<TopologyEntry> {
    let ranks: usize = input.plan.members.iter().map(|m| m.devices.len()).sum();
    if ranks > MAX_TOPOLOGY_RANKS {
        return Vec::new();
    }
    let mut entries = Vec::new();
    for member in &input.plan.members {
        if member.joiner && !input.outcome.created.contains(&member.name) {
            continue;
        }
        let node = input.nodes.iter().find(|n| n.name == member.node);
        for (local, device) in member.devices.iter().enumerate() {
            entries.push(TopologyEntry {
                rank: member.index * dpm + local as i32,
                member: member.name.clone(),
                node: member.node.clone(),
                device_id: *device,
                nic: None,
                data_ip: node.and_then(|n| n.data_address.clone()),
                super_pod: node.and_then(|n| n.topology.super_pod.clone()),
                rack: node.and_then(|n| n.topology.rack.clone()),
                switch: node.and_then(|n| n.topology.switch.clone()),
            });
        }
    }
    entries
}

#[cfg(test)]
mod tests;
