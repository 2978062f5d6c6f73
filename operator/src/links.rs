//! Link health of a group (pure): the agents probe every peer node of their members and
//! publish the latest result per peer in `HcommNode.status.linkTests`; this module judges
//! every directed link between the nodes that host the group's members and turns the
//! judgement into the `LinksHealthy` condition, the `Degraded` cause and metric counts.
//!
//! A result older than [`LinkPolicy::stale_after`] proves nothing (the agent may be gone,
//! or its probes stuck), so such a link is *unknown*, never healthy. The agent names a peer
//! by the rank table's `server_id` (the node's data address, else its name), so a result
//! matches a node by name or by data address.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use hcomm_crds::conditions::ConditionStatus;
use hcomm_crds::contract::reasons;
use hcomm_crds::{LinkTestResult, MemberPhase};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::planner::NodeInventory;

/// How many links a message lists before it says "and N more" (messages stay readable;
/// the metric carries the full count).
const LISTED: usize = 6;

/// When a link result counts, and when a link counts as slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkPolicy {
    /// Results older than this are unknown. A few times the agent's publishing interval
    /// (`--inventory-interval`, 60 s by default; a change of a link's state is published at
    /// once), so one missed refresh does not flap the condition.
    pub stale_after: SignedDuration,
    /// A reachable link whose probe round trip exceeds this is degraded.
    pub slow_after: SignedDuration,
}

impl Default for LinkPolicy {
    fn default() -> Self {
        Self {
            stale_after: SignedDuration::from_secs(180),
            slow_after: SignedDuration::from_millis(20),
        }
    }
}

/// The judgement of one directed link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// The latest recent probe was answered within the slow threshold.
    Up,
    /// The latest recent probe was answered, but slower than the threshold.
    Slow,
    /// The latest recent probe was not answered.
    Down,
    /// The latest result is older than the staleness limit.
    Stale,
    /// The probing node has published no result for this peer.
    NeverProbed,
}

/// One directed link between two member nodes, as the source node's agent saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The probing node.
    pub from: String,
    /// The probed node.
    pub to: String,
    /// The probed address (the result's `peerAddress`, else the node's data address).
    pub address: Option<String>,
    /// The judgement.
    pub state: LinkState,
    /// When the latest matching result was taken.
    pub probed_at: Option<Timestamp>,
    /// Its round trip, in microseconds.
    pub latency_micros: Option<i64>,
    /// Its error, when the peer did not answer.
    pub error: Option<String>,
}

/// Every directed link between the group's member nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkReport {
    /// The nodes hosting members in the domain, sorted.
    pub nodes: Vec<String>,
    /// Links ordered by (from, to).
    pub links: Vec<Link>,
    /// The earliest moment a result judged now turns stale (relative to now): the group
    /// must be looked at again then even when nothing changes in the cluster.
    pub recheck_after: Option<SignedDuration>,
    /// The slow threshold the report was made with (for messages).
    pub slow_after: SignedDuration,
    /// The staleness limit the report was made with (for messages).
    pub stale_after: SignedDuration,
}

/// Counts of links by state, for the metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounts {
    /// Up.
    pub up: i64,
    /// Slow.
    pub degraded: i64,
    /// Down.
    pub down: i64,
    /// Stale or never probed.
    pub unknown: i64,
}

/// Whether a member in `phase` takes part in the domain's traffic, so its node's links
/// matter. Verification proves the links once (its failure is `VerificationFailed`);
/// from Syncing on the member moves weights and collectives over them.
pub fn carries_traffic(phase: MemberPhase) -> bool {
    matches!(
        phase,
        MemberPhase::Syncing | MemberPhase::Joining | MemberPhase::Ready | MemberPhase::Draining
    )
}

/// Judges every directed link between `member_nodes` from the link tests each node's agent
/// published (`tests`, by node name).
pub fn assess(
    member_nodes: &BTreeSet<String>,
    inventories: &[NodeInventory],
    tests: &BTreeMap<String, Vec<LinkTestResult>>,
    policy: LinkPolicy,
    now: Timestamp,
) -> LinkReport {
    let address_of = |node: &str| {
        inventories
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.data_address.clone())
    };
    let mut links = Vec::new();
    let mut recheck_after: Option<SignedDuration> = None;
    for from in member_nodes {
        let published = tests.get(from).map(Vec::as_slice).unwrap_or_default();
        for to in member_nodes.iter().filter(|to| *to != from) {
            let to_address = address_of(to);
            let latest = published
                .iter()
                .filter(|t| names(t, to, to_address.as_deref()))
                .max_by_key(|t| t.time.0);
            let Some(result) = latest else {
                links.push(Link {
                    from: from.clone(),
                    to: to.clone(),
                    address: to_address,
                    state: LinkState::NeverProbed,
                    probed_at: None,
                    latency_micros: None,
                    error: None,
                });
                continue;
            };
            let age = now.duration_since(result.time.0);
            let state = if age > policy.stale_after {
                LinkState::Stale
            } else {
                let left = policy.stale_after - age.max(SignedDuration::ZERO);
                recheck_after = Some(recheck_after.map_or(left, |r| r.min(left)));
                if !result.reachable {
                    LinkState::Down
                } else if result
                    .latency_micros
                    .is_some_and(|us| SignedDuration::from_micros(us) > policy.slow_after)
                {
                    LinkState::Slow
                } else {
                    LinkState::Up
                }
            };
            links.push(Link {
                from: from.clone(),
                to: to.clone(),
                address: Some(result.peer_address.clone())
                    .filter(|a| !a.is_empty())
                    .or(to_address),
                state,
                probed_at: Some(result.time.0),
                latency_micros: result.latency_micros,
                error: result.error.clone(),
            });
        }
    }
    LinkReport {
        nodes: member_nodes.iter().cloned().collect(),
        links,
        recheck_after,
        slow_after: policy.slow_after,
        stale_after: policy.stale_after,
    }
}

/// Whether a published result is about node `to` (by name, or by its data address).
fn names(test: &LinkTestResult, to: &str, to_address: Option<&str>) -> bool {
    test.peer == to
        || to_address.is_some_and(|a| !a.is_empty() && (test.peer == a || test.peer_address == a))
}

impl LinkReport {
    /// Links by state.
    pub fn counts(&self) -> LinkCounts {
        let mut c = LinkCounts::default();
        for link in &self.links {
            match link.state {
                LinkState::Up => c.up += 1,
                LinkState::Slow => c.degraded += 1,
                LinkState::Down => c.down += 1,
                LinkState::Stale | LinkState::NeverProbed => c.unknown += 1,
            }
        }
        c
    }

    fn with(&self, pick: impl Fn(&LinkState) -> bool) -> Vec<&Link> {
        self.links.iter().filter(|l| pick(&l.state)).collect()
    }

    /// The `LinksHealthy` condition: status, reason and a message naming the links (pairs,
    /// addresses, last probe time and latency or error). Worst first: a dead link, then a
    /// slow one, then a link nobody vouched for recently.
    pub fn condition(&self) -> (ConditionStatus, &'static str, String) {
        let down = self.with(|s| *s == LinkState::Down);
        let slow = self.with(|s| *s == LinkState::Slow);
        let unknown = self.with(|s| matches!(s, LinkState::Stale | LinkState::NeverProbed));
        let also = |parts: &[(usize, &str)]| {
            let extra: Vec<String> = parts
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect();
            if extra.is_empty() {
                String::new()
            } else {
                format!(" (also {})", extra.join(", "))
            }
        };
        if !down.is_empty() {
            let message = format!(
                "{} of {} link(s) down: {}{}",
                down.len(),
                self.links.len(),
                list(&down, describe),
                also(&[
                    (slow.len(), "slow"),
                    (unknown.len(), "without a recent probe")
                ])
            );
            return (ConditionStatus::False, reasons::LINK_DOWN, message);
        }
        if !slow.is_empty() {
            let message = format!(
                "{} of {} link(s) slower than {}: {}{}",
                slow.len(),
                self.links.len(),
                millis(self.slow_after),
                list(&slow, describe),
                also(&[(unknown.len(), "without a recent probe")])
            );
            return (ConditionStatus::False, reasons::LINK_DEGRADED, message);
        }
        if !unknown.is_empty() {
            let message = format!(
                "{} of {} link(s) without a probe result newer than {}s: {}",
                unknown.len(),
                self.links.len(),
                self.stale_after.as_secs(),
                list(&unknown, describe)
            );
            return (ConditionStatus::Unknown, reasons::NO_RECENT_PROBE, message);
        }
        let message = match self.links.iter().max_by_key(|l| l.latency_micros) {
            None if self.nodes.len() == 1 => format!(
                "every member in the domain is on node {}; no links between nodes to probe",
                self.nodes[0]
            ),
            None => "no members in the domain yet; no links between nodes to probe".to_owned(),
            Some(slowest) => format!(
                "all {} link(s) between {} answered; slowest {}",
                self.links.len(),
                self.nodes.join(", "),
                describe(slowest)
            ),
        };
        (ConditionStatus::True, reasons::ALL_LINKS_UP, message)
    }

    /// Why the group is `Degraded` because of its links, if it is: a dead or slow link. The
    /// message names only the links and addresses (no times or latencies), so it stays the
    /// same while the same links are bad — a changed message is a new Warning Event. Links
    /// without a recent probe do not degrade the group: nothing is known to be wrong.
    pub fn degraded(&self) -> Option<(&'static str, String)> {
        let down = self.with(|s| *s == LinkState::Down);
        if !down.is_empty() {
            let message = format!("link(s) down: {}", list(&down, pair));
            return Some((reasons::LINK_DOWN, message));
        }
        let slow = self.with(|s| *s == LinkState::Slow);
        if !slow.is_empty() {
            let message = format!(
                "link(s) slower than {}: {}",
                millis(self.slow_after),
                list(&slow, pair)
            );
            return Some((reasons::LINK_DEGRADED, message));
        }
        None
    }
}

/// `from → to (address)`.
fn pair(link: &Link) -> String {
    match &link.address {
        Some(address) => format!("{} → {} ({address})", link.from, link.to),
        None => format!("{} → {}", link.from, link.to),
    }
}

/// The pair, then what the latest result said and when.
fn describe(link: &Link) -> String {
    let mut text = pair(link);
    let at = link
        .probed_at
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    match (&link.state, at) {
        (LinkState::NeverProbed, _) | (_, None) => text.push_str(" never probed"),
        (LinkState::Down, Some(at)) => {
            let _ = write!(
                text,
                " unreachable at {at}: {}",
                link.error.as_deref().unwrap_or("no answer")
            );
        }
        (LinkState::Stale, Some(at)) => {
            let _ = write!(text, " last probed at {at}");
        }
        (LinkState::Up | LinkState::Slow, Some(at)) => match link.latency_micros {
            Some(us) => {
                let _ = write!(text, " {us} µs at {at}");
            }
            None => {
                let _ = write!(text, " answered at {at}");
            }
        },
    }
    text
}

fn list(links: &[&Link], show: impl Fn(&Link) -> String) -> String {
    let mut shown: Vec<String> = links.iter().take(LISTED).map(|l| show(l)).collect();
    if links.len() > LISTED {
        shown.push(format!("and {} more", links.len() - LISTED));
    }
    shown.join("; ")
}

fn millis(d: SignedDuration) -> String {
    format!("{} ms", d.as_millis())
}

#[cfg(test)]
mod tests {
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
}

impl LinkReport {
    /// Nodes the data network has lost, each with why: every other member node that
    /// probed it recently found it down and none reached it, and the fault is its own —
    /// another node is still reached by a third node (evidence that does not come from the
    /// suspect itself), or the node has gone silent: its own results, all taken before it
    /// was found down, still call its links up. A node that never published proves
    /// nothing. A one-way fault between two nodes (one finds the other down, the other,
    /// publishing fresh results, still reaches it) and a split with no side to blame (each
    /// reports the other down) name nobody: the condition shows them, but replacing members
    /// on a guess would move healthy ones.
    pub fn isolated_nodes(&self) -> BTreeMap<String, String> {
        let inbound =
            |node: &str| -> Vec<&Link> { self.links.iter().filter(|l| l.to == node).collect() };
        let answered = |l: &Link| matches!(l.state, LinkState::Up | LinkState::Slow);
        let suspect = |node: &str| {
            let links = inbound(node);
            links.iter().any(|l| l.state == LinkState::Down) && !links.iter().any(|l| answered(l))
        };
        // Its agent has gone silent: it last published before anyone found it down, and
        // those results still call a link up. Fresh results from it are not silence, even
        // when they disagree with its peers (an unknown time proves nothing either).
        let silent = |node: &str| {
            let Some(found_down) = inbound(node)
                .iter()
                .filter(|l| l.state == LinkState::Down)
                .filter_map(|l| l.probed_at)
                .max()
            else {
                return false;
            };
            let own: Vec<&Link> = self
                .links
                .iter()
                .filter(|l| l.from == node && l.probed_at.is_some())
                .collect();
            own.iter().any(|l| answered(l))
                && own
                    .iter()
                    .all(|l| l.probed_at.is_some_and(|p| p < found_down))
        };
        // Another node that a third node reached: positive evidence, not mere silence, and
        // not the suspect's own word.
        let some_node_fine = |node: &str| {
            self.nodes.iter().any(|n| {
                n != node
                    && !suspect(n)
                    && self
                        .links
                        .iter()
                        .any(|l| &l.to == n && l.from != node && answered(l))
            })
        };
        self.nodes
            .iter()
            .filter(|n| suspect(n) && (some_node_fine(n) || silent(n)))
            .map(|n| {
                let seen_by: Vec<String> = inbound(n)
                    .into_iter()
                    .filter(|l| l.state == LinkState::Down)
                    .map(|l| l.from.clone())
                    .collect();
                let why = format!(
                    "node {n} is unreachable over the data network from {}",
                    seen_by.join(", ")
                );
                (n.clone(), why)
            })
            .collect()
    }
}

#[cfg(test)]
mod isolation_tests {
    use super::*;

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
                    probed_at: (*state != NeverProbed)
                        .then(|| Timestamp::from_second(1_800_000_000 + at).unwrap()),
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
}
