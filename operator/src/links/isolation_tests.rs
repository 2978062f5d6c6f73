//! Unit tests of finding isolated nodes.

use std::collections::BTreeMap;

use k8s_openapi::jiff::SignedDuration;

use super::*;

/// At second `at` of the tests' clock.
fn second(at: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + at).unwrap()
}

/// Links as (from, to, state, probed at second); a link never probed has no time.
fn report(nodes: &[&str], links: &[(&str, &str, LinkState, i64)]) -> LinkReport {
    LinkReport {
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        links: links
            .iter()
            .map(|(from, to, state, at)| Link {
                from: (*from).into(),
                to: (*to).into(),
                address: None,
                probed_at: (*state != NeverProbed).then(|| second(*at)),
                state: state.clone(),
                latency_micros: None,
                error: None,
            })
            .collect(),
        ..LinkReport::default()
    }
}

use LinkState::{Down, NeverProbed, Up};

#[test]
fn a_silent_node_that_everyone_finds_down_is_isolated() {
    // n2 is cut off entirely: its agent's last results, older than n1's finding, still
    // say up.
    let r = report(
        &["n1", "n2"],
        &[("n1", "n2", Down, 10), ("n2", "n1", Up, 4)],
    );
    let isolated = r.isolated_nodes();
    assert_eq!(isolated.keys().collect::<Vec<_>>(), ["n2"]);
    assert!(isolated["n2"].contains("from n1"), "{isolated:?}");
}

#[test]
fn a_one_way_fault_between_two_nodes_names_nobody() {
    // n1 cannot reach n2 while n2, publishing as fresh as n1, still reaches n1: either
    // side may be at fault, and n2's word for n1 is no independent evidence.
    for n2_published in [10, 11] {
        let r = report(
            &["n1", "n2"],
            &[("n1", "n2", Down, 10), ("n2", "n1", Up, n2_published)],
        );
        assert!(r.isolated_nodes().is_empty(), "n2 at {n2_published}");
    }
}

#[test]
fn a_node_whose_data_link_is_cut_is_blamed_when_the_others_still_reach_each_other() {
    let r = report(
        &["n1", "n2", "n3"],
        &[
            ("n1", "n2", Up, 10),
            ("n1", "n3", Down, 10),
            ("n2", "n1", Up, 10),
            ("n2", "n3", Down, 10),
            ("n3", "n1", Down, 10),
            ("n3", "n2", Down, 10),
        ],
    );
    assert_eq!(r.isolated_nodes().keys().collect::<Vec<_>>(), ["n3"]);
}

#[test]
fn a_split_with_no_side_to_blame_or_no_evidence_names_nobody() {
    let split = report(
        &["n1", "n2"],
        &[("n1", "n2", Down, 10), ("n2", "n1", Down, 10)],
    );
    assert!(split.isolated_nodes().is_empty());
    let fresh = report(
        &["n1", "n2"],
        &[("n1", "n2", NeverProbed, 0), ("n2", "n1", Up, 10)],
    );
    assert!(fresh.isolated_nodes().is_empty());
    // n2 is found down, but its own agent never published: no evidence it is the one cut.
    let never_published = report(
        &["n1", "n2"],
        &[("n1", "n2", Down, 10), ("n2", "n1", NeverProbed, 0)],
    );
    assert!(never_published.isolated_nodes().is_empty());
    let mixed = report(
        &["n1", "n2", "n3"],
        &[
            ("n1", "n3", Down, 10),
            ("n2", "n3", Up, 10),
            ("n3", "n1", Up, 10),
        ],
    );
    assert!(
        mixed.isolated_nodes().is_empty(),
        "one peer still reaches n3"
    );
}

#[test]
fn peers_finding_a_node_down_while_it_still_reaches_them_names_nobody() {
    // A stranger saturates n3's probe port: n1 and n2 find it down, but n3's agent,
    // publishing as fresh as they do, still reaches both. Its members stay.
    let r = report(
        &["n1", "n2", "n3"],
        &[
            ("n1", "n2", Up, 10),
            ("n1", "n3", Down, 10),
            ("n2", "n1", Up, 10),
            ("n2", "n3", Down, 10),
            ("n3", "n1", Up, 10),
            ("n3", "n2", Up, 11),
        ],
    );
    assert!(r.isolated_nodes().is_empty(), "{:?}", r.isolated_nodes());
    // Its own agent finding only some peers down is no confession either.
    let partly = report(
        &["n1", "n2", "n3"],
        &[
            ("n1", "n2", Up, 10),
            ("n1", "n3", Down, 10),
            ("n2", "n1", Up, 10),
            ("n2", "n3", Down, 10),
            ("n3", "n1", Down, 10),
            ("n3", "n2", Up, 11),
        ],
    );
    assert!(partly.isolated_nodes().is_empty());
}

#[test]
fn a_node_that_stopped_publishing_before_it_probed_its_finders_is_isolated_once_silent() {
    // n3 joined the group's nodes just before it was cut off: it never published a result
    // about n1 or n2, who both find it down. Its agent's last status is from second 5.
    let links = [
        ("n1", "n2", Up, 10),
        ("n2", "n1", Up, 10),
        ("n1", "n3", Down, 10),
        ("n2", "n3", Down, 10),
        ("n3", "n1", NeverProbed, 0),
        ("n3", "n2", NeverProbed, 0),
    ];
    let mut r = report(&["n1", "n2", "n3"], &links);
    r.stale_after = SignedDuration::from_secs(60);
    let published = BTreeMap::from([
        ("n1".to_owned(), second(10)),
        ("n2".to_owned(), second(10)),
        ("n3".to_owned(), second(5)),
    ]);
    // Not yet: its agent may still be about to publish.
    r.assessed_at = second(30);
    let early = r.clone().with_published(&published);
    assert!(early.isolated_nodes().is_empty());
    assert_eq!(
        early.recheck_after,
        Some(SignedDuration::from_secs(36)),
        "looked at again just past the silence limit"
    );
    // Silent for longer than a result stays fresh.
    r.assessed_at = second(66);
    let late = r.clone().with_published(&published);
    assert_eq!(late.isolated_nodes().keys().collect::<Vec<_>>(), ["n3"]);
    // A node that keeps publishing is never blamed on its peers' word alone, however long
    // they find it down (a stranger saturating its probe port).
    let fresh = BTreeMap::from([("n3".to_owned(), second(64))]);
    assert!(r.with_published(&fresh).isolated_nodes().is_empty());
}
