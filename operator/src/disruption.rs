//! Voluntary disruptions (pure): moving members off nodes being drained.
//!
//! `kubectl drain NODE` first cordons the node (`spec.unschedulable`, the
//! `node.kubernetes.io/unschedulable` taint), then evicts its Pods. The group's
//! PodDisruptionBudget (`crate::pdb`, `maxUnavailable: 0`) makes the apiserver refuse
//! those evictions, so a member never goes by a bare eviction; this module is the other
//! half: it sees the cordon and moves each member off the node through hcomm's own drain.
//! Make before break when the group allows a surge (`Incremental`, a surge budget above
//! 0, room elsewhere): the replacement is created on another node and joins first; only
//! once it is Ready is the old member asked to drain (gate off → in-flight 0 → leave the
//! epoch), and it is deleted when drained, after which the drain's next eviction retry
//! finds nothing left. Without a surge (no room, `Rebuild`, `backend: hccl` whose rank ids
//! must stay `0..n-1`, or a budget of 0) members go `maxUnavailable` at a time and are
//! replaced afterwards, each replacement taking the freed index.
//!
//! Data flow: `observe` → [`cordoned`] nodes → [`plan`] (wraps `planner::plan`: the
//! decision is folded into the planner's input and output, the planner itself knows
//! nothing of cordons) → `apply`.

use std::collections::{BTreeSet, HashMap};

use hcomm_crds::{MemberPhase, ScalingSpec, ScalingStrategy};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use crate::phase::ObservedMember;
use crate::planner::{self, Plan, PlanInput};

/// The taint the node controller puts on a cordoned node (kept with `spec.unschedulable`).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Whether `node` is cordoned: `spec.unschedulable`, or the unschedulable taint.
pub fn is_cordoned(node: &Node) -> bool {
    let Some(spec) = node.spec.as_ref() else {
        return false;
    };
    spec.unschedulable == Some(true)
        || spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.key == TAINT_UNSCHEDULABLE)
}

/// The names of the cordoned nodes among `nodes`.
pub fn cordoned<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> BTreeSet<String> {
    nodes
        .into_iter()
        .filter(|n| is_cordoned(n))
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// How fast members may be moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Extra members allowed above `replicas` while moving (make before break); 0: none.
    pub surge: i32,
    /// Members that may be draining at once when there is no surge.
    pub max_unavailable: i32,
}

impl Budget {
    /// The group's budget: as many replacements ahead of their members as may join at
    /// once (`maxJoining`: a replacement is a joiner), and `maxUnavailable`.
    pub fn of(scaling: &ScalingSpec) -> Budget {
        Budget {
            surge: scaling.max_joining,
            max_unavailable: scaling.max_unavailable,
        }
    }
}

/// Remembers whether each Node was cordoned; says when that flipped (a Node seen for the
/// first time counts when it is cordoned). Node status heartbeats change nothing here, so
/// they wake no reconcile.
#[derive(Debug, Clone, Default)]
pub struct CordonChanges {
    seen: HashMap<String, bool>,
}

impl CordonChanges {
    /// Whether `node`'s cordon differs from what was last seen of it.
    pub fn changed(&mut self, node: &Node) -> bool {
        let now = is_cordoned(node);
        self.seen.insert(node.name_any(), now).unwrap_or(false) != now
    }
}

/// What to do about members on cordoned nodes this round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moves {
    /// Extra members to plan for (their replacements, created before they go).
    pub surge: i32,
    /// Members on cordoned nodes to ask to drain now (Pod names).
    pub drain: Vec<String>,
}

/// Decides the moves (pure). A member moves when it is in the planned set, not failed
/// (a failed one is replaced anyway) and on a cordoned node (bound there, or planned
/// there). With a surge, a moving member is asked to drain only while the Ready members
/// elsewhere plus the moving ones still Ready, minus it, keep `replicas` serving; members
/// that serve nothing yet go at once. Without a surge, `max_unavailable` at a time,
/// counting those already leaving.
pub fn moves(
    members: &[ObservedMember],
    cordoned: &BTreeSet<String>,
    replicas: i32,
    budget: Budget,
) -> Moves {
    let on_cordoned = |m: &ObservedMember| m.node.as_ref().is_some_and(|n| cordoned.contains(n));
    let mut moving: Vec<&ObservedMember> = members
        .iter()
        .filter(|m| m.in_set() && !m.failed && on_cordoned(m))
        .collect();
    if moving.is_empty() {
        return Moves::default();
    }
    // Members that serve nothing first: they cost no capacity.
    moving.sort_by_key(|m| (m.phase == MemberPhase::Ready, std::cmp::Reverse(m.index)));
    let replicas = replicas.max(0) as usize;
    let drain: Vec<String> = if budget.surge > 0 {
        let ready_elsewhere = members
            .iter()
            .filter(|m| m.in_set() && !m.failed && !on_cordoned(m))
            .filter(|m| m.phase == MemberPhase::Ready)
            .count();
        let ready_moving = moving
            .iter()
            .filter(|m| m.phase == MemberPhase::Ready)
            .count();
        let idle = moving.len() - ready_moving;
        let spare = (ready_elsewhere + ready_moving).saturating_sub(replicas);
        moving
            .iter()
            .take(idle + spare.min(ready_moving))
            .map(|m| m.name.clone())
            .collect()
    } else {
        let leaving = members.iter().filter(|m| !m.in_set() && !m.failed).count();
        let room = (budget.max_unavailable.max(1) as usize).saturating_sub(leaving);
        moving.iter().take(room).map(|m| m.name.clone()).collect()
    };
    let remaining = (moving.len() - drain.len()) as i32;
    Moves {
        surge: remaining.min(budget.surge.max(0)),
        drain,
    }
}

/// Plans the round with the members on `cordoned` nodes moved off (see the module docs):
/// no new member is placed on a cordoned node; the surge raises the replicas the planner
/// aims at; members asked to drain leave the planned set (a new epoch without them) and
/// join the plan's drain requests. When the surge finds no room elsewhere the round is
/// planned again without one (a drain the cluster cannot absorb still completes, at
/// `max_unavailable` at a time).
pub fn plan(input: &PlanInput, cordoned: &BTreeSet<String>, budget: Budget) -> Plan {
    if cordoned.is_empty() {
        return planner::plan(input);
    }
    let budget = match input.desired.strategy {
        // Dense ranks (`backend: hccl`, ids exactly `0..n-1`): a replacement made first
        // would take a new index and leave a hole once the old member goes, a table HCCL
        // refuses (and the operator would never publish). Move in place, like an hccl
        // rollout: the member drains, its replacement takes the freed index.
        _ if input.desired.rollout.dense_ranks => Budget { surge: 0, ..budget },
        ScalingStrategy::Incremental if !input.desired.deleting => budget,
        // Rebuild tears every member down on any change: a surge would rebuild the
        // whole group; a deleted group drains everything anyway.
        _ => Budget { surge: 0, ..budget },
    };
    let surging = moved_plan(input, cordoned, budget);
    if surging.1 > 0 && surging.0.unplaced > 0 {
        tracing::info!(
            nodes = ?cordoned,
            "no room for the replacements of members on cordoned nodes; moving them without a surge"
        );
        return moved_plan(input, cordoned, Budget { surge: 0, ..budget }).0;
    }
    surging.0
}

/// The plan for `budget`, and the surge it used.
fn moved_plan(input: &PlanInput, cordoned: &BTreeSet<String>, budget: Budget) -> (Plan, i32) {
    let moves = moves(&input.members, cordoned, input.desired.replicas, budget);
    let mut input = input.clone();
    input.nodes.retain(|n| !cordoned.contains(&n.name));
    if moves.drain.is_empty() && moves.surge == 0 {
        return (planner::plan(&input), 0);
    }
    tracing::info!(surge = moves.surge, drain = ?moves.drain, "moving members off cordoned nodes");
    input.desired.replicas += moves.surge;
    for m in &mut input.members {
        if moves.drain.contains(&m.name) {
            m.drain_requested_at = Some(input.now);
        }
    }
    let mut plan = planner::plan(&input);
    for name in moves.drain {
        if !plan.drain.contains(&name) {
            plan.drain.push(name);
        }
    }
    (plan, moves.surge)
}

#[cfg(test)]
#[path = "disruption_tests.rs"]
mod tests;
