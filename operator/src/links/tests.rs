//! Unit tests of judging links and of the `LinksHealthy` condition.

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::LinkTestResult;
use hcomm_crds::conditions::ConditionStatus;

use super::*;
use crate::planner::NodeInventory;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const NOW: i64 = 1_700_000_000;

fn at(seconds_before_now: i64) -> Time {
    Time(Timestamp::from_second(NOW - seconds_before_now).unwrap())
}

fn node(name: &str, ip: &str) -> NodeInventory {
    NodeInventory {
        name: name.into(),
        topology: Default::default(),
        data_address: Some(ip.into()),
        devices: vec![],
        npus: 0,
    }
}

/// A result as the agent writes it: the peer is the rank table's server id (the data
/// address).
fn test(peer_ip: &str, reachable: bool, latency: Option<i64>, age: i64) -> LinkTestResult {
    LinkTestResult {
        peer: peer_ip.into(),
        peer_address: peer_ip.into(),
        interface: "data0".into(),
        reachable,
        latency_micros: latency,
        bandwidth_mbps: None,
        error: (!reachable).then(|| "connect timed out after 5s".to_owned()),
        time: at(age),
    }
}

fn nodes() -> Vec<NodeInventory> {
    vec![node("n1", "10.0.0.1"), node("n2", "10.0.0.2")]
}

fn members(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn report(tests: &[(&str, Vec<LinkTestResult>)]) -> LinkReport {
    let tests = tests
        .iter()
        .map(|(n, t)| ((*n).to_owned(), t.clone()))
        .collect();
    assess(
        &members(&["n1", "n2"]),
        &nodes(),
        &tests,
        LinkPolicy::default(),
        Timestamp::from_second(NOW).unwrap(),
    )
}

#[test]
fn fresh_answers_both_ways_are_all_links_up_with_the_slowest_named() {
    let r = report(&[
        ("n1", vec![test("10.0.0.2", true, Some(250), 5)]),
        ("n2", vec![test("10.0.0.1", true, Some(900), 5)]),
    ]);
    let (status, reason, message) = r.condition();
    assert_eq!(
        (status, reason),
        (
            ConditionStatus::True,
            hcomm_crds::contract::GroupReason::AllLinksUp.as_str()
        )
    );
    assert!(
        message.contains("n2 → n1 (10.0.0.1) 900 µs at 2023-11-14T22:13:"),
        "{message}"
    );
    assert_eq!(r.degraded(), None);
    assert_eq!(r.counts().up, 2);
    // The earliest result turns stale 175 s from now.
    assert_eq!(r.recheck_after, Some(SignedDuration::from_secs(175)));
}

#[test]
fn a_dead_link_is_link_down_naming_the_pair_address_time_and_error() {
    let r = report(&[
        ("n1", vec![test("10.0.0.2", false, None, 3)]),
        ("n2", vec![test("10.0.0.1", true, Some(200), 3)]),
    ]);
    let (status, reason, message) = r.condition();
    assert_eq!(
        (status, reason),
        (
            ConditionStatus::False,
            hcomm_crds::contract::GroupReason::LinkDown.as_str()
        )
    );
    assert!(
        message.starts_with("1 of 2 link(s) down: n1 → n2 (10.0.0.2) unreachable at ")
            && message.ends_with("connect timed out after 5s"),
        "{message}"
    );
    let (why, stable) = r.degraded().unwrap();
    assert_eq!(why, hcomm_crds::contract::GroupReason::LinkDown.as_str());
    assert_eq!(stable, "link(s) down: n1 → n2 (10.0.0.2)");
    assert_eq!(r.counts().down, 1);
}

#[test]
fn a_stale_result_is_unknown_not_healthy_and_does_not_degrade_the_group() {
    let r = report(&[
        ("n1", vec![test("10.0.0.2", true, Some(100), 600)]),
        ("n2", vec![test("10.0.0.1", true, Some(100), 1)]),
    ]);
    let (status, reason, message) = r.condition();
    assert_eq!(
        (status, reason),
        (
            ConditionStatus::Unknown,
            hcomm_crds::contract::GroupReason::NoRecentProbe.as_str()
        )
    );
    assert!(
        message.contains("n1 → n2 (10.0.0.2) last probed at"),
        "{message}"
    );
    assert_eq!(r.degraded(), None);
    assert_eq!(r.counts().unknown, 1);
}

#[test]
fn a_stale_failure_is_unknown_too() {
    let r = report(&[
        ("n1", vec![test("10.0.0.2", false, None, 600)]),
        ("n2", vec![test("10.0.0.1", true, Some(100), 1)]),
    ]);
    assert_eq!(
        r.condition().1,
        hcomm_crds::contract::GroupReason::NoRecentProbe.as_str()
    );
}

#[test]
fn a_node_whose_agent_published_nothing_is_never_probed() {
    let r = report(&[("n1", vec![test("10.0.0.2", true, Some(100), 1)])]);
    let (status, reason, message) = r.condition();
    assert_eq!(
        (status, reason),
        (
            ConditionStatus::Unknown,
            hcomm_crds::contract::GroupReason::NoRecentProbe.as_str()
        )
    );
    assert!(
        message.contains("n2 → n1 (10.0.0.1) never probed"),
        "{message}"
    );
}

#[test]
fn a_slow_answer_is_link_degraded() {
    let r = report(&[
        ("n1", vec![test("10.0.0.2", true, Some(45_000), 1)]),
        ("n2", vec![test("10.0.0.1", true, Some(100), 1)]),
    ]);
    let (status, reason, message) = r.condition();
    assert_eq!(
        (status, reason),
        (
            ConditionStatus::False,
            hcomm_crds::contract::GroupReason::LinkDegraded.as_str()
        )
    );
    assert!(message.contains("slower than 20 ms: n1 → n2 (10.0.0.2) 45000 µs"));
    assert_eq!(
        r.degraded().unwrap().0,
        hcomm_crds::contract::GroupReason::LinkDegraded.as_str()
    );
}

#[test]
fn the_latest_result_wins_and_peers_match_by_name_or_address() {
    let mut by_name = test("n2", true, Some(100), 1);
    by_name.peer_address = "10.0.0.2".into();
    let r = report(&[
        (
            "n1",
            vec![
                test("10.0.0.2", false, None, 30),
                by_name,
                test("10.9.9.9", false, None, 1),
            ],
        ),
        ("n2", vec![test("10.0.0.1", true, Some(100), 1)]),
    ]);
    assert_eq!(
        r.condition().1,
        hcomm_crds::contract::GroupReason::AllLinksUp.as_str(),
        "{:?}",
        r.links
    );
}

#[test]
fn one_node_or_none_has_no_links_and_is_healthy() {
    let one = assess(
        &members(&["n1"]),
        &nodes(),
        &BTreeMap::new(),
        LinkPolicy::default(),
        Timestamp::from_second(NOW).unwrap(),
    );
    let (status, reason, message) = one.condition();
    assert_eq!(
        (status, reason),
        (
            ConditionStatus::True,
            hcomm_crds::contract::GroupReason::AllLinksUp.as_str()
        )
    );
    assert!(message.contains("node n1"), "{message}");
    assert_eq!(one.recheck_after, None);
}

#[test]
fn long_lists_are_cut_and_counted() {
    let names: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
    let inventories: Vec<NodeInventory> = names
        .iter()
        .enumerate()
        .map(|(i, n)| node(n, &format!("10.0.1.{i}")))
        .collect();
    let r = assess(
        &names.iter().cloned().collect(),
        &inventories,
        &BTreeMap::new(),
        LinkPolicy::default(),
        Timestamp::from_second(NOW).unwrap(),
    );
    let (_, _, message) = r.condition();
    assert!(message.starts_with("20 of 20 link(s)"), "{message}");
    assert!(message.ends_with("and 14 more"), "{message}");
}

#[test]
fn only_members_moving_traffic_count() {
    assert!(!carries_traffic(MemberPhase::Pending));
    assert!(!carries_traffic(MemberPhase::Verifying));
    assert!(carries_traffic(MemberPhase::Syncing));
    assert!(carries_traffic(MemberPhase::Draining));
    assert!(!carries_traffic(MemberPhase::Failed));
}

#[test]
fn narrowing_a_report_equals_judging_the_fewer_nodes_again() {
    let inventories = vec![
        node("n1", "10.0.0.1"),
        node("n2", "10.0.0.2"),
        node("n3", "10.0.0.3"),
    ];
    let tests: BTreeMap<String, Vec<LinkTestResult>> = [
        (
            "n1",
            vec![
                test("10.0.0.2", true, Some(100), 5),
                test("10.0.0.3", false, None, 2),
            ],
        ),
        ("n2", vec![test("10.0.0.1", true, Some(30_000), 30)]),
        ("n3", vec![test("10.0.0.1", true, Some(100), 1)]),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_owned(), t))
    .collect();
    let now = Timestamp::from_second(NOW).unwrap();
    let policy = LinkPolicy::default();
    let all = assess(
        &members(&["n1", "n2", "n3"]),
        &inventories,
        &tests,
        policy,
        now,
    );
    for fewer in [members(&["n1", "n2"]), members(&["n1"]), members(&[])] {
        assert_eq!(
            all.among(&fewer),
            assess(&fewer, &inventories, &tests, policy, now),
            "{fewer:?}"
        );
    }
}
