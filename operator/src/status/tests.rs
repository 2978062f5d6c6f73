//! Unit tests of the status builder.

use super::*;
use crate::links::{LinkPolicy, assess};
use hcomm_crds::LinkTestResult;
use std::collections::{BTreeMap, BTreeSet};

fn group() -> HcommGroup {
    serde_json::from_value(serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
        "metadata": {"name": "decode", "namespace": "ns", "generation": 3},
        "spec": {
            "replicas": 0, "role": "decode", "devicesPerMember": 1,
            "template": {"spec": {"containers": [{"name": "w", "image": "w"}]}}
        }
    }))
    .expect("group")
}

fn report(reachable: bool, at: Timestamp) -> LinkReport {
    let nodes: BTreeSet<String> = ["n1".to_owned(), "n2".to_owned()].into();
    let tests: BTreeMap<String, Vec<LinkTestResult>> = [(
        "n1".to_owned(),
        vec![LinkTestResult {
            peer: "n2".into(),
            peer_address: "10.0.0.2".into(),
            interface: "data0".into(),
            reachable,
            latency_micros: reachable.then_some(300),
            bandwidth_mbps: None,
            error: (!reachable).then(|| "connection refused".to_owned()),
            time: Time(at),
        }],
    )]
    .into();
    let mut report = assess(&nodes, &[], &tests, LinkPolicy::default(), at);
    // Only one direction matters for these tests.
    report.links.retain(|l| l.from == "n1");
    report
}

fn build_at(group: &HcommGroup, links: &LinkReport, now: Timestamp) -> HcommGroupStatus {
    build(StatusInput {
        group,
        previous: &group.status.clone().unwrap_or_default(),
        members: &[],
        plan: &Plan::default(),
        outcome: &Outcome::default(),
        nodes: &[],
        invalid: None,
        create_failure: None,
        links,
        now,
    })
}

#[test]
fn a_dead_link_sets_links_healthy_false_and_degraded_and_recovers() {
    let t0 = Timestamp::from_second(1_700_000_000).unwrap();
    let mut g = group();
    let up = build_at(&g, &report(true, t0), t0);
    let links = find_condition(&up.conditions, CONDITION_LINKS_HEALTHY).unwrap();
    assert_eq!(
        (links.status.as_str(), links.reason.as_str()),
        (
            "True",
            hcomm_crds::contract::GroupReason::AllLinksUp.as_str()
        )
    );
    assert_eq!(links.observed_generation, Some(3));
    assert_eq!(
        find_condition(&up.conditions, CONDITION_DEGRADED)
            .unwrap()
            .status,
        "False"
    );

    let t1 = t0 + SignedDuration::from_secs(10);
    g.status = Some(up);
    let down = build_at(&g, &report(false, t1), t1);
    let links = find_condition(&down.conditions, CONDITION_LINKS_HEALTHY).unwrap();
    assert_eq!(
        (links.status.as_str(), links.reason.as_str()),
        (
            "False",
            hcomm_crds::contract::GroupReason::LinkDown.as_str()
        )
    );
    assert!(
        links.message.contains("n1 → n2 (10.0.0.2) unreachable"),
        "{}",
        links.message
    );
    assert_eq!(links.last_transition_time, Time(t1));
    let degraded = find_condition(&down.conditions, CONDITION_DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", hcomm_crds::contract::GroupReason::LinkDown.as_str())
    );
    assert_eq!(down.phase, Some(GroupPhase::Degraded));

    // Still down later: the message moves with the probe time, the transition does not.
    let t2 = t1 + SignedDuration::from_secs(10);
    g.status = Some(down);
    let still = build_at(&g, &report(false, t2), t2);
    let links = find_condition(&still.conditions, CONDITION_LINKS_HEALTHY).unwrap();
    assert_eq!(links.last_transition_time, Time(t1));

    let t3 = t2 + SignedDuration::from_secs(10);
    g.status = Some(still);
    let back = build_at(&g, &report(true, t3), t3);
    let links = find_condition(&back.conditions, CONDITION_LINKS_HEALTHY).unwrap();
    assert_eq!(
        (links.status.as_str(), links.last_transition_time.clone()),
        ("True", Time(t3))
    );
    assert_eq!(
        find_condition(&back.conditions, CONDITION_DEGRADED)
            .unwrap()
            .reason,
        hcomm_crds::contract::GroupReason::Healthy.as_str()
    );
}

#[test]
fn a_failed_verification_outranks_a_dead_link_on_degraded() {
    let t0 = Timestamp::from_second(1_700_000_000).unwrap();
    let g = group();
    let plan = Plan {
        failed: vec!["decode-0-e1".into()],
        ..Plan::default()
    };
    let status = build(StatusInput {
        group: &g,
        previous: &g.status.clone().unwrap_or_default(),
        members: &[],
        plan: &plan,
        outcome: &Outcome::default(),
        nodes: &[],
        invalid: None,
        create_failure: None,
        links: &report(false, t0),
        now: t0,
    });
    let degraded = find_condition(&status.conditions, CONDITION_DEGRADED).unwrap();
    assert_eq!(
        degraded.reason,
        hcomm_crds::contract::GroupReason::VerificationFailed.as_str()
    );
    let links = find_condition(&status.conditions, CONDITION_LINKS_HEALTHY).unwrap();
    assert_eq!(
        links.reason,
        hcomm_crds::contract::GroupReason::LinkDown.as_str()
    );
}

/// A planned set of `count` members of `dpm` devices, one node each, every one Ready.
fn big_plan(count: i32, dpm: i32) -> (Plan, Vec<NodeInventory>) {
    let members = (0..count)
        .map(|i| crate::planner::PlannedMember {
            name: format!("decode-{i}-e12"),
            index: i,
            node: format!("npu-node-{i:04}"),
            devices: (0..dpm).collect(),
            allocation: None,
            joiner: false,
            standby: false,
        })
        .collect();
    let nodes = (0..count)
        .map(|i| NodeInventory {
            name: format!("npu-node-{i:04}"),
            data_address: Some(format!("10.100.{}.{}", i / 256, i % 256)),
            topology: hcomm_crds::TopologyLabels {
                super_pod: Some("sp0".into()),
                rack: Some(format!("rack-{}", i / 16)),
                switch: Some(format!("switch-{}", i / 64)),
            },
            devices: Vec::new(),
            npus: 16,
        })
        .collect();
    (
        Plan {
            members,
            epoch: 12,
            ..Plan::default()
        },
        nodes,
    )
}

fn status_bytes(count: i32, dpm: i32) -> (usize, HcommGroupStatus) {
    let (plan, nodes) = big_plan(count, dpm);
    let now = Timestamp::from_second(1_700_000_000).unwrap();
    let status = build(StatusInput {
        group: &group(),
        previous: &HcommGroupStatus::default(),
        members: &[],
        plan: &plan,
        outcome: &Outcome::default(),
        nodes: &nodes,
        invalid: None,
        create_failure: None,
        links: &LinkReport::default(),
        now,
    });
    (serde_json::to_vec(&status).unwrap().len(), status)
}

#[test]
fn a_thousand_member_status_stays_within_etcds_object_limit_at_16_devices() {
    const ETCD_LIMIT: usize = 1536 * 1024;
    // status.members comes from the observed Pods; 1,000 of them, every field set.
    let members: Vec<hcomm_crds::MemberStatus> = (0..1000)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "name": format!("decode-{i}-e12"), "index": i, "node": format!("npu-node-{i:04}"),
                "ranks": {"first": i * 16, "count": 16}, "deviceIds": (0..16).collect::<Vec<_>>(),
                "dataIp": "10.100.3.231", "phase": "Ready", "phaseSince": "2026-12-02T03:00:00Z",
                "epoch": 12, "weightsVersion": "llama-3-70b-v1"
            }))
            .unwrap()
        })
        .collect();
    let members_bytes = serde_json::to_vec(&members).unwrap().len();
    let (bytes, status) = status_bytes(1000, 16);
    assert!(
        status.topology.is_empty(),
        "16,000 ranks: no per-rank topology"
    );
    assert!(
        bytes + members_bytes < ETCD_LIMIT / 3,
        "{bytes} + {members_bytes} bytes"
    );
    let (bytes, status) = status_bytes(256, 16);
    assert_eq!(
        status.topology.len(),
        MAX_TOPOLOGY_RANKS,
        "at the cap it is kept"
    );
    assert!(
        bytes + members_bytes < ETCD_LIMIT * 2 / 3,
        "{bytes} + {members_bytes} bytes at the cap"
    );
}

#[test]
fn standby_members_are_counted_apart_from_the_scale_subresources_replicas() {
    let now = Timestamp::from_second(1_700_000_000).unwrap();
    let mut g = group();
    g.spec.replicas = 2;
    g.spec.scaling.standby = 1;
    let mut members: Vec<ObservedMember> = (0..3).map(ObservedMember::ready_for_test).collect();
    members[2].phase = MemberPhase::Standby;
    members[2].serving = false;
    members[2].standby = true;
    let planned = |m: &ObservedMember| crate::planner::PlannedMember {
        name: m.name.clone(),
        index: m.index,
        node: "n".into(),
        devices: Vec::new(),
        allocation: None,
        joiner: false,
        standby: m.standby,
    };
    let plan = Plan {
        members: members.iter().map(planned).collect(),
        ..Plan::default()
    };
    let links = report(true, now);
    let status = build(StatusInput {
        group: &g,
        previous: &g.status.clone().unwrap_or_default(),
        members: &members,
        plan: &plan,
        outcome: &Outcome::default(),
        nodes: &[],
        invalid: None,
        create_failure: None,
        links: &links,
        now,
    });
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.standby_replicas
        ),
        (2, 2, 1)
    );
    assert_eq!(status.members[2].phase, MemberPhase::Standby);
    let ready = find_condition(&status.conditions, CONDITION_READY).unwrap();
    assert_eq!(ready.status, "True", "{ready:?}");
    assert!(ready.message.contains("1/1 standby warm"), "{ready:?}");
}

/// The status of a group whose plan holds new members back, by a refused create or not.
fn held_back(
    g: &HcommGroup,
    plan: &Plan,
    nodes: &[NodeInventory],
    create_failure: Option<&CreateFailure>,
    now: Timestamp,
) -> HcommGroupStatus {
    build(StatusInput {
        group: g,
        previous: &g.status.clone().unwrap_or_default(),
        members: &[],
        plan,
        outcome: &Outcome::default(),
        nodes,
        invalid: None,
        create_failure,
        links: &report(true, now),
        now,
    })
}

#[test]
fn members_held_back_by_the_failure_backoff_are_progressing_not_stable() {
    let t0 = Timestamp::from_second(1_700_000_000).unwrap();
    let mut g = group();
    g.spec.replicas = 4;
    let until = Timestamp::from_second(1_700_000_008).unwrap();
    let (mut plan, nodes) = big_plan(1, 1);
    plan.delayed_until = Some(until);
    let status = held_back(&g, &plan, &nodes, None, t0);
    let progressing = find_condition(&status.conditions, CONDITION_PROGRESSING).unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        (
            "True",
            hcomm_crds::contract::GroupReason::FailureBackoff.as_str()
        )
    );
    assert!(
        progressing
            .message
            .contains(&format!("1 of {} members", g.spec.replicas))
            && progressing.message.contains(&until.to_string()),
        "{}",
        progressing.message
    );
}

#[test]
fn refused_member_pods_make_the_group_degraded_in_the_api_servers_words() {
    use crate::create_failures::Refusal;
    let t0 = Timestamp::from_second(1_700_000_000).unwrap();
    let mut g = group();
    g.spec.replicas = 4;
    let status = kube::core::Status::failure(
        "pods \"g-1\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1",
        "Forbidden",
    )
    .with_code(403);
    let refusal = Refusal::new(vec!["g-1".into()], &kube::Error::Api(Box::new(status)));
    let failure = CreateFailure::next(None, refusal, g.metadata.generation, t0);
    let (mut plan, nodes) = big_plan(1, 1);
    plan.delayed_until = Some(failure.retry_at());
    let status = held_back(&g, &plan, &nodes, Some(&failure), t0);
    let failed_create = hcomm_crds::contract::GroupReason::FailedCreate.as_str();
    let degraded = find_condition(&status.conditions, CONDITION_DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", failed_create)
    );
    assert!(
        degraded.message.starts_with(
            "member Pod g-1 not created (Forbidden): pods \"g-1\" is forbidden: exceeded quota"
        ) && degraded.message.contains("tried 1 time(s), next try at"),
        "{}",
        degraded.message
    );
    let progressing = find_condition(&status.conditions, CONDITION_PROGRESSING).unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("True", failed_create)
    );
    assert_eq!(status.phase, Some(hcomm_crds::GroupPhase::Degraded));
}

#[test]
fn a_refused_round_marks_the_last_status_degraded_and_changes_nothing_else() {
    let t0 = Timestamp::from_second(1_700_000_000).unwrap();
    let g = group();
    let (plan, nodes) = big_plan(1, 1);
    let last = held_back(&g, &plan, &nodes, None, t0);
    let refused = refused(
        &last,
        &g,
        "apply PodDisruptionBudget x: forbidden".into(),
        t0,
    );
    let degraded = find_condition(&refused.conditions, CONDITION_DEGRADED).unwrap();
    assert_eq!(
        (
            degraded.status.as_str(),
            degraded.reason.as_str(),
            degraded.message.as_str()
        ),
        (
            "True",
            hcomm_crds::contract::GroupReason::RequestRefused.as_str(),
            "apply PodDisruptionBudget x: forbidden"
        )
    );
    assert_eq!(refused.phase, Some(hcomm_crds::GroupPhase::Degraded));
    let mut unchanged = refused.clone();
    unchanged.conditions = last.conditions.clone();
    unchanged.phase = last.phase;
    assert_eq!(unchanged, last, "only Degraded and the phase change");
}
