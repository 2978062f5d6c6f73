//! Moving members off cordoned nodes, as examples: the decision alone ([`moves`]) and
//! round by round through the planner ([`plan`]).

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::{MemberPhase, ScalingStrategy};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;
use crate::planner::{Desired, NodeInventory, PlanInput, Recorded};

fn member(name: &str, index: i32, node: &str, phase: MemberPhase) -> ObservedMember {
    ObservedMember {
        name: name.into(),
        node: Some(node.into()),
        devices: vec![0],
        phase,
        serving: phase == MemberPhase::Ready,
        created_at: None,
        ..ObservedMember::ready_for_test(index)
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

const SURGE: Budget = Budget {
    surge: 1,
    max_unavailable: 1,
};
const NO_SURGE: Budget = Budget {
    surge: 0,
    max_unavailable: 1,
};

fn node_json(spec: serde_json::Value) -> Node {
    serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "spec": spec})).unwrap()
}

#[test]
fn a_node_is_cordoned_by_its_unschedulable_flag_or_taint_only() {
    assert!(is_cordoned(&node_json(
        serde_json::json!({"unschedulable": true})
    )));
    assert!(is_cordoned(&node_json(serde_json::json!({"taints": [
        {"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}
    ]}))));
    assert!(!is_cordoned(&node_json(serde_json::json!({"taints": [
        {"key": "huawei.com/npu-fault", "effect": "NoSchedule"}
    ]}))));
    assert!(!is_cordoned(&node_json(serde_json::json!({}))));
    let nodes = [
        node_json(serde_json::json!({"unschedulable": true})),
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n2"}})).unwrap(),
    ];
    assert_eq!(cordoned(&nodes), set(&["n1"]));
}

#[test]
fn with_a_surge_the_replacement_comes_first_and_the_member_drains_once_it_is_ready() {
    let cordoned = set(&["n2"]);
    let mut members = vec![
        member("a", 0, "n1", MemberPhase::Ready),
        member("b", 1, "n2", MemberPhase::Ready),
    ];
    assert_eq!(
        moves(&members, &cordoned, 2, SURGE),
        Moves {
            surge: 1,
            drain: vec![]
        }
    );
    members.push(member("c", 2, "n3", MemberPhase::Joining));
    assert_eq!(
        moves(&members, &cordoned, 2, SURGE).drain,
        Vec::<String>::new()
    );
    members[2].phase = MemberPhase::Ready;
    assert_eq!(
        moves(&members, &cordoned, 2, SURGE),
        Moves {
            surge: 0,
            drain: vec!["b".into()]
        }
    );
    // Once asked, it is on its way out and no longer moves.
    members[1].drain_requested_at = Some(Timestamp::UNIX_EPOCH);
    assert_eq!(moves(&members, &cordoned, 2, SURGE), Moves::default());
}

#[test]
fn members_that_serve_nothing_yet_go_at_once_and_failed_ones_are_the_planners() {
    let cordoned = set(&["n2"]);
    let mut failed = member("f", 2, "n2", MemberPhase::Failed);
    failed.failed = true;
    let members = vec![
        member("a", 0, "n1", MemberPhase::Ready),
        member("b", 1, "n2", MemberPhase::Syncing),
        failed,
    ];
    assert_eq!(
        moves(&members, &cordoned, 2, SURGE),
        Moves {
            surge: 0,
            drain: vec!["b".into()]
        }
    );
}

#[test]
fn without_a_surge_members_go_max_unavailable_at_a_time() {
    let cordoned = set(&["n2"]);
    let mut members = vec![
        member("a", 0, "n2", MemberPhase::Ready),
        member("b", 1, "n2", MemberPhase::Ready),
        member("c", 2, "n1", MemberPhase::Ready),
    ];
    let first = moves(&members, &cordoned, 3, NO_SURGE);
    assert_eq!(first.surge, 0);
    assert_eq!(first.drain, vec!["b".to_string()], "highest index first");
    members[1].drain_requested_at = Some(Timestamp::UNIX_EPOCH);
    assert!(
        moves(&members, &cordoned, 3, NO_SURGE).drain.is_empty(),
        "one is already leaving"
    );
}

fn inventory(name: &str) -> NodeInventory {
    NodeInventory {
        name: name.into(),
        topology: hcomm_crds::TopologyLabels::default(),
        data_address: None,
        devices: Vec::new(),
        npus: 1,
    }
}

fn input(members: Vec<ObservedMember>, nodes: &[&str]) -> PlanInput {
    let used: BTreeMap<String, u32> = members
        .iter()
        .filter_map(|m| Some((m.node.clone()?, 1)))
        .collect();
    PlanInput {
        desired: Desired {
            group: "g".into(),
            replicas: 2,
            standby: 0,
            devices_per_member: 1,
            strategy: ScalingStrategy::Incremental,
            max_joining: 4,
            max_unavailable: 1,
            drain_timeout: SignedDuration::from_secs(60),
            deleting: false,
            weights_digest: None,
            rollout: crate::planner::rollout::Settings::default(),
        },
        recorded: Recorded {
            epoch: 1,
            members: members.iter().map(|m| m.name.clone()).collect(),
        },
        members,
        nodes: nodes.iter().map(|n| inventory(n)).collect(),
        used_npus: used,
        avoid_nodes: BTreeSet::new(),
        new_members_after: None,
        rollout_stopped: None,
        now: Timestamp::from_second(1_800_000_000).unwrap(),
    }
}

#[test]
fn a_cordoned_members_replacement_joins_elsewhere_then_it_drains_and_leaves_the_epoch() {
    let cordoned = set(&["n2"]);
    let start = vec![
        member("a", 0, "n1", MemberPhase::Ready),
        member("b", 1, "n2", MemberPhase::Ready),
    ];
    // Round 1: the surge member, on the only free node that is not cordoned.
    let round1 = plan(&input(start.clone(), &["n1", "n2", "n3"]), &cordoned, SURGE);
    let joiners: Vec<_> = round1.joiners().collect();
    assert_eq!(joiners.len(), 1, "{round1:?}");
    assert_eq!(joiners[0].node, "n3");
    assert!(
        round1.drain.is_empty(),
        "nobody drains before the replacement serves"
    );
    assert!(round1.members.iter().any(|m| m.name == "b"));

    // Round 2: the replacement is Ready; b is asked to drain and leaves the planned set.
    let mut grown = start;
    let mut c = member(&joiners[0].name, joiners[0].index, "n3", MemberPhase::Ready);
    c.epoch = round1.epoch;
    grown.push(c);
    let mut next = input(grown, &["n1", "n2", "n3"]);
    next.recorded = Recorded {
        epoch: round1.epoch,
        members: round1.members.iter().map(|m| m.name.clone()).collect(),
    };
    let round2 = plan(&next, &cordoned, SURGE);
    assert_eq!(round2.drain, vec!["b".to_string()]);
    assert_eq!(round2.joiners().count(), 0, "{round2:?}");
    assert!(round2.changed && round2.epoch == round1.epoch + 1);
    assert!(!round2.members.iter().any(|m| m.name == "b"));
    assert!(round2.delete.is_empty(), "deleted only once drained");
}

#[test]
fn with_no_room_elsewhere_the_member_drains_first_and_nothing_lands_on_the_cordoned_node() {
    let cordoned = set(&["n2"]);
    let members = vec![
        member("a", 0, "n1", MemberPhase::Ready),
        member("b", 1, "n2", MemberPhase::Ready),
    ];
    // n2 has a free NPU of its own (a second one), but it is cordoned.
    let mut no_room = input(members, &["n1", "n2"]);
    no_room.nodes[1].npus = 2;
    let round = plan(&no_room, &cordoned, SURGE);
    assert_eq!(round.drain, vec!["b".to_string()]);
    assert!(round.joiners().all(|j| j.node != "n2"), "{round:?}");
}

#[test]
fn an_hccl_groups_member_moves_in_place_so_its_ranks_stay_dense() {
    let cordoned = set(&["n2"]);
    let start = vec![
        member("a", 0, "n1", MemberPhase::Ready),
        member("b", 1, "n2", MemberPhase::Ready),
    ];
    let mut hccl = input(start, &["n1", "n2", "n3"]);
    hccl.desired.rollout.dense_ranks = true;
    let round = plan(&hccl, &cordoned, SURGE);
    assert_eq!(round.drain, vec!["b".to_string()], "drains first");
    let joiners: Vec<_> = round.joiners().collect();
    assert_eq!(joiners.len(), 1, "{round:?}");
    assert_eq!(
        (joiners[0].index, joiners[0].node.as_str()),
        (1, "n3"),
        "the replacement takes the freed index elsewhere"
    );
    let indices: Vec<i32> = round.members.iter().map(|m| m.index).collect();
    assert_eq!(indices, [0, 1], "dense");
}

#[test]
fn no_cordon_is_the_planners_plan_unchanged() {
    let members = vec![
        member("a", 0, "n1", MemberPhase::Ready),
        member("b", 1, "n2", MemberPhase::Ready),
    ];
    let input = input(members, &["n1", "n2", "n3"]);
    assert_eq!(plan(&input, &BTreeSet::new(), SURGE), planner::plan(&input));
    assert_eq!(plan(&input, &set(&["n9"]), SURGE), planner::plan(&input));
}

#[test]
fn only_a_cordon_flip_wakes_the_groups() {
    let mut changes = CordonChanges::default();
    let plain: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}})).unwrap();
    let cordoned = node_json(serde_json::json!({"unschedulable": true}));
    assert!(!changes.changed(&plain), "an uncordoned node, first seen");
    assert!(!changes.changed(&plain), "a heartbeat");
    assert!(changes.changed(&cordoned));
    assert!(!changes.changed(&cordoned));
    assert!(changes.changed(&plain), "uncordoned");
    let mut fresh = CordonChanges::default();
    assert!(fresh.changed(&cordoned), "a cordoned node, first seen");
}
