//! The planner (pure): from the spec, the observed members and the node inventory to the
//! next plan — who joins (index, node, name; the device plugin picks the NPUs), who is asked to drain, who is
//! deleted, the planned member set and its epoch.
//!
//! Data flow: `reconcile` fetches the cluster state and builds a [`PlanInput`];
//! [`plan`] decides; `apply` carries the [`Plan`] out; `status` reports it. Nothing here
//! does I/O or reads a clock (`now` is an input), so every rule is tested as a plain
//! function, including a seeded simulation in `tests`.

pub mod epoch;
pub mod placement;
pub mod ranks;
pub mod rollout;
#[cfg(test)]
mod rollout_tests;
pub mod standby;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::contract::ascend::DeviceAllocation;
use hcomm_crds::{MemberPhase, ScalingStrategy};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::phase::ObservedMember;
pub use epoch::Recorded;
pub use placement::{Capacity, Device, NodeInventory};

/// The parts of the spec the planner needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The group name (prefix of member names).
    pub group: String,
    /// Desired members that serve.
    pub replicas: i32,
    /// Warm standby members kept beside them (`spec.scaling.standby`).
    pub standby: i32,
    /// Devices per member.
    pub devices_per_member: i32,
    /// Incremental or Rebuild.
    pub strategy: ScalingStrategy,
    /// Members joining at once (Incremental).
    pub max_joining: i32,
    /// Members draining at once (Incremental scale-in).
    pub max_unavailable: i32,
    /// How long a drain may take.
    pub drain_timeout: SignedDuration,
    /// The group is being deleted: drain and remove everything.
    pub deleting: bool,
    /// `spec.weights.digest`: members made before revisions existed are rolled when it
    /// differs from theirs.
    pub weights_digest: Option<String>,
    /// The rolling update: the revision to roll to and its pace (`spec.updateStrategy`).
    pub rollout: rollout::Settings,
}

/// Everything the planner looks at.
#[derive(Debug, Clone)]
pub struct PlanInput {
    /// The spec.
    pub desired: Desired,
    /// This group's member Pods (all of them, also leaving and terminating ones).
    pub members: Vec<ObservedMember>,
    /// Node inventories.
    pub nodes: Vec<NodeInventory>,
    /// NPUs requested by the operator's member Pods of every group, per node.
    pub used_npus: BTreeMap<String, u32>,
    /// The recorded epoch and member set.
    pub recorded: Recorded,
    /// Nodes where members of this group failed recently.
    pub avoid_nodes: BTreeSet<String>,
    /// No new member (replacement or scale-out) before this time: the group's members
    /// keep failing (see `crate::backoff`).
    pub new_members_after: Option<Timestamp>,
    /// A stop of the rollout to the same update revision, from an earlier round (the
    /// group's `Progressing` condition): it holds until the update revision changes.
    pub rollout_stopped: Option<rollout::Stop>,
    /// The current time.
    pub now: Timestamp,
}

/// A member of the planned set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMember {
    /// Pod name.
    pub name: String,
    /// Member index.
    pub index: i32,
    /// Node.
    pub node: String,
    /// Physical device ids in local-rank order, from the device plugin's allocation; empty
    /// for a joiner (not allocated yet).
    pub devices: Vec<i32>,
    /// The device plugin's allocation, once written (never for a joiner).
    pub allocation: Option<DeviceAllocation>,
    /// Created by this plan.
    pub joiner: bool,
    /// Held out of traffic as a warm standby (label `hcomm.io/standby`; see `standby`).
    pub standby: bool,
}

/// Why a member Pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovalReason {
    /// The agent reported `hcomm.io/drained=True`.
    Drained,
    /// The drain deadline passed first.
    DrainTimedOut,
    /// The member never served (not running, or failed): nothing to drain.
    NotServing,
    /// The member's node is lost to the data network and its drain deadline passed
    /// unanswered. Peers' evidence alone never deletes a member at once: it was asked to
    /// drain first like any other, because that evidence is what a stranger can fake.
    Unreachable,
}

/// A member Pod to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// Pod name.
    pub name: String,
    /// Why.
    pub reason: RemovalReason,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// The epoch of the planned member set.
    pub epoch: i64,
    /// Whether the planned set differs from the recorded one (a new rank table).
    pub changed: bool,
    /// The planned member set, by index.
    pub members: Vec<PlannedMember>,
    /// Members to ask to drain (Pod names).
    pub drain: Vec<String>,
    /// Member Pods to delete.
    pub delete: Vec<Removal>,
    /// Desired members that could not be placed for lack of devices.
    pub unplaced: i32,
    /// Members that failed (names), to be replaced.
    pub failed: Vec<String>,
    /// Nodes where members failed, to avoid for replacements.
    pub failed_nodes: BTreeSet<String>,
    /// When to look again at least (a drain deadline).
    pub recheck_after: Option<SignedDuration>,
    /// Members are missing, but none is added before this time: the failure backoff
    /// ([`PlanInput::new_members_after`]) holds them back.
    pub delayed_until: Option<Timestamp>,
    /// The group is being deleted and no member Pod is left.
    pub finished: bool,
    /// Where the rolling update stands.
    pub rollout: rollout::Progress,
    /// Existing members whose standby label changes: `(name, standby)`. A promotion
    /// (`false`) is what a scale-out served from the standby costs.
    pub relabel: Vec<(String, bool)>,
}

impl Plan {
    /// The joiners of this plan.
    pub fn joiners(&self) -> impl Iterator<Item = &PlannedMember> {
        self.members.iter().filter(|m| m.joiner)
    }

    /// World size: ranks in the planned set.
    pub fn world_size(&self, devices_per_member: i32) -> i32 {
        self.members.len() as i32 * devices_per_member
    }
}

/// Plans the next step. See the module docs and `README.md` for the rules.
pub fn plan(input: &PlanInput) -> Plan {
    let desired = &input.desired;
    let in_set: Vec<&ObservedMember> = input.members.iter().filter(|m| m.in_set()).collect();
    let failed: Vec<&ObservedMember> = in_set.iter().copied().filter(|m| m.failed).collect();
    let healthy: Vec<&ObservedMember> = in_set.iter().copied().filter(|m| !m.failed).collect();
    // Standby members are members like any other for placement, joining and rollouts;
    // only their label (assigned last) differs.
    let serving = desired.replicas.max(0) as usize;
    let standby = desired.standby.max(0) as usize;
    let replicas = serving + standby;

    // 1. Who leaves the set now.
    let mut victims: Vec<&ObservedMember> = Vec::new();
    let step = rollout::step(
        &desired.rollout,
        desired.weights_digest.as_deref(),
        &healthy,
        &failed,
        replicas,
        input.rollout_stopped.clone(),
        input.now,
    );
    let mut target = replicas;
    if desired.deleting {
        victims.extend(in_set.iter().copied());
    } else {
        victims.extend(failed.iter().copied());
        match desired.strategy {
            ScalingStrategy::Incremental if step.active => {
                victims.extend(
                    healthy
                        .iter()
                        .copied()
                        .filter(|m| step.drain.contains(&m.name)),
                );
                target = step.target;
            }
            ScalingStrategy::Incremental if healthy.len() > replicas => {
                let leaving = input
                    .members
                    .iter()
                    .filter(|m| !m.in_set() && !m.failed)
                    .count();
                let budget = (desired.max_unavailable.max(1) as usize).saturating_sub(leaving);
                let indices: Vec<i32> = healthy.iter().map(|m| m.index).collect();
                let chosen = ranks::victims(&indices, (healthy.len() - replicas).min(budget));
                victims.extend(
                    healthy
                        .iter()
                        .copied()
                        .filter(|m| chosen.contains(&m.index)),
                );
            }
            ScalingStrategy::Rebuild
                if healthy.len() != replicas
                    || !failed.is_empty()
                    || any_outdated(&healthy, desired) =>
            {
                // Tear down everything; the new set is built once the old one is gone.
                victims.extend(healthy.iter().copied());
            }
            _ => {}
        }
    }
    let victim_names: BTreeSet<&str> = victims.iter().map(|m| m.name.as_str()).collect();
    let kept: Vec<&ObservedMember> = in_set
        .iter()
        .copied()
        .filter(|m| !victim_names.contains(m.name.as_str()))
        .collect();

    // 2. Who joins, and where.
    let mut capacity = Capacity::new(&input.nodes, &input.used_npus);
    let mut avoid = input.avoid_nodes.clone();
    avoid.extend(failed.iter().filter_map(|m| m.node.clone()));
    let (joiner_slots, unplaced) =
        plan_joiners(input, target, &kept, &victims, &mut capacity, &avoid);

    // 3. The epoch of the new set.
    let kept_names: BTreeSet<String> = kept.iter().map(|m| m.name.clone()).collect();
    let newest_label = kept.iter().map(|m| m.epoch).max().unwrap_or(0);
    let changing_now = !joiner_slots.is_empty() || !victims.is_empty();
    let epoch = epoch::next_epoch(&input.recorded, &kept_names, newest_label, changing_now);

    let existing: BTreeSet<&str> = input.members.iter().map(|m| m.name.as_str()).collect();
    let mut members: Vec<PlannedMember> = kept
        .iter()
        .map(|m| PlannedMember {
            name: m.name.clone(),
            index: m.index,
            node: m.node.clone().unwrap_or_default(),
            devices: m.devices.clone(),
            allocation: m.allocation.clone().and_then(Result::ok),
            joiner: false,
            standby: false,
        })
        .collect();
    for (index, node) in joiner_slots {
        let name = ranks::member_name(&desired.group, index, epoch);
        // A Pod of that name may still exist (terminating); never reuse it: wait.
        if existing.contains(name.as_str()) {
            continue;
        }
        members.push(PlannedMember {
            name,
            index,
            node,
            devices: Vec::new(),
            allocation: None,
            joiner: true,
            standby: false,
        });
    }
    members.sort_by_key(|m| m.index);
    let held = standby::assign(&members, &input.members, serving, standby);
    for m in &mut members {
        m.standby = held.contains(&m.name);
    }
    let relabel = if desired.deleting {
        Vec::new()
    } else {
        standby::relabels(&members, &input.members, &held)
    };
    let planned_names: BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();

    // 4. Drains and deletions of members outside the set.
    let (delete, mut recheck_after) = removals(input);
    if let Some(left) = step.recheck_after {
        recheck_after = Some(recheck_after.map_or(left, |r| r.min(left)));
    }
    if let Some(t) = input.new_members_after.filter(|t| input.now < *t) {
        let wait = t.duration_since(input.now);
        recheck_after = Some(recheck_after.map_or(wait, |r| r.min(wait)));
    }
    Plan {
        epoch,
        changed: planned_names != input.recorded.members || epoch != input.recorded.epoch,
        members,
        drain: victims.iter().map(|m| m.name.clone()).collect(),
        delete,
        unplaced: unplaced as i32,
        failed: failed.iter().map(|m| m.name.clone()).collect(),
        failed_nodes: failed.iter().filter_map(|m| m.node.clone()).collect(),
        recheck_after,
        delayed_until: input
            .new_members_after
            .filter(|t| input.now < *t && !desired.deleting && kept.len() < target),
        finished: desired.deleting && input.members.is_empty(),
        rollout: step.progress,
        relabel,
    }
}

/// Whether a member runs another revision than the group's (Rebuild tears those down).
fn any_outdated(members: &[&ObservedMember], desired: &Desired) -> bool {
    let update = desired.rollout.update_revision.as_str();
    let digest = desired.weights_digest.as_deref();
    members
        .iter()
        .any(|m| crate::revision::outdated(m, update, digest))
}

/// Joiner slots `(index, node)` up to `target` members (`replicas`, or more while a
/// rollout surges) and how many desired members found no room.
fn plan_joiners(
    input: &PlanInput,
    target: usize,
    kept: &[&ObservedMember],
    victims: &[&ObservedMember],
    capacity: &mut Capacity<'_>,
    avoid: &BTreeSet<String>,
) -> (Vec<(i32, String)>, usize) {
    let desired = &input.desired;
    let replicas = target;
    if desired.deleting || kept.len() >= replicas {
        return (Vec::new(), 0);
    }
    if input.new_members_after.is_some_and(|t| input.now < t) {
        return (Vec::new(), 0);
    }
    let need = replicas - kept.len();
    let per_member = desired.devices_per_member.max(1) as usize;
    let count = match desired.strategy {
        ScalingStrategy::Incremental => {
            // Every joiner is a new epoch, and an epoch forms only once all its members
            // have synced. A joiner created while the planned epoch is forming (members
            // past their sync, building its domain) makes them start over on one that
            // cannot form for seconds; created as each slot freed, a 64-member group grew
            // in ~50 epochs of 2–3 and its joins timed out (docs/benchmarks.md, "The agent
            // under many members"). New joiners wait for the forming epoch and then come
            // together.
            if kept.iter().any(|m| m.phase == MemberPhase::Joining) {
                return (Vec::new(), 0);
            }
            let joining = kept.iter().filter(|m| m.phase.is_joining()).count();
            need.min((desired.max_joining.max(1) as usize).saturating_sub(joining))
        }
        ScalingStrategy::Rebuild => {
            // The classic way: only once every old member is gone, all at once.
            let old_left = input.members.iter().any(|m| !m.in_set()) || !victims.is_empty();
            if old_left {
                return (Vec::new(), 0);
            }
            if capacity.members_that_fit(per_member) < need {
                return (Vec::new(), need);
            }
            need
        }
    };
    let taken: BTreeSet<i32> = kept.iter().map(|m| m.index).collect();
    let mut nodes_by_index: BTreeMap<i32, String> = kept
        .iter()
        .filter_map(|m| Some((m.index, m.node.clone()?)))
        .collect();
    let mut slots = Vec::new();
    for index in ranks::lowest_free(&taken, count) {
        // Ring neighbour: the nearest lower index, else the nearest higher one.
        let neighbour = nodes_by_index
            .range(..index)
            .next_back()
            .or_else(|| nodes_by_index.range(index..).next())
            .map(|(_, node)| node.clone());
        match capacity.place(per_member, neighbour.as_deref(), avoid) {
            Some(node) => {
                nodes_by_index.insert(index, node.clone());
                slots.push((index, node));
            }
            None => break,
        }
    }
    let unplaced = count - slots.len();
    (slots, unplaced)
}

/// Deletions of members already asked to drain, and the nearest drain deadline.
fn removals(input: &PlanInput) -> (Vec<Removal>, Option<SignedDuration>) {
    let mut delete = Vec::new();
    let mut recheck: Option<SignedDuration> = None;
    for member in &input.members {
        let Some(requested) = member.drain_requested_at else {
            continue;
        };
        if member.deleting {
            continue;
        }
        // Only the member's own agent (drained, or failed and not serving) or the drain
        // deadline ends a member. A member judged unreachable from its peers' probes
        // (`isolation`) carries `failed` from that judgement, not from its agent, so it
        // waits for its drain or the deadline like a healthy one.
        let reason = if member.drained {
            Some(RemovalReason::Drained)
        } else if !member.unreachable && !member.serving && (member.failed || !member.running) {
            Some(RemovalReason::NotServing)
        } else {
            let waited = input.now.duration_since(requested);
            let left = input.desired.drain_timeout - waited;
            if left <= SignedDuration::ZERO && member.unreachable {
                Some(RemovalReason::Unreachable)
            } else if left <= SignedDuration::ZERO {
                Some(RemovalReason::DrainTimedOut)
            } else {
                recheck = Some(recheck.map_or(left, |r| r.min(left)));
                None
            }
        };
        if let Some(reason) = reason {
            delete.push(Removal {
                name: member.name.clone(),
                reason,
            });
        }
    }
    (delete, recheck)
}
