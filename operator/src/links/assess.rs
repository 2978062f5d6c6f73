//! Judging the links: every directed link between the member nodes, from the latest
//! result each node's agent published, and the same judgement narrowed to fewer nodes.

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::LinkTestResult;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{Link, LinkPolicy, LinkReport, LinkState};
use crate::planner::NodeInventory;

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
        assessed_at: now,
        published_at: BTreeMap::new(),
    }
}

/// Whether a published result is about node `to` (by name, or by its data address).
fn names(test: &LinkTestResult, to: &str, to_address: Option<&str>) -> bool {
    test.peer == to
        || to_address.is_some_and(|a| !a.is_empty() && (test.peer == a || test.peer_address == a))
}

impl LinkReport {
    /// The report with when each of its nodes' agents last published its status: a node
    /// found down whose agent has published nothing for longer than a result stays fresh
    /// has gone silent, even when it never published a result about the nodes that found
    /// it down ([`LinkReport::isolated_nodes`]). The group is looked at again when such a
    /// node would turn silent.
    pub fn with_published(mut self, published: &BTreeMap<String, Timestamp>) -> Self {
        self.published_at = published
            .iter()
            .filter(|(node, _)| self.nodes.contains(node))
            .map(|(node, at)| (node.clone(), *at))
            .collect();
        let found_down: BTreeSet<&String> = self
            .links
            .iter()
            .filter(|l| l.state == LinkState::Down)
            .map(|l| &l.to)
            .collect();
        // One second past the limit: silence is an age strictly beyond it.
        let turns_silent = found_down
            .iter()
            .filter_map(|n| self.published_at.get(*n))
            .map(|p| {
                self.stale_after - self.assessed_at.duration_since(*p)
                    + SignedDuration::from_secs(1)
            })
            .filter(|left| left.is_positive())
            .min();
        self.recheck_after = match (self.recheck_after, turns_silent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self
    }

    /// The report narrowed to `nodes` (a subset of [`LinkReport::nodes`]): the links between
    /// them as judged, without judging again, and when the freshest of those turns stale.
    pub fn among(&self, nodes: &BTreeSet<String>) -> LinkReport {
        let links: Vec<Link> = self
            .links
            .iter()
            .filter(|l| nodes.contains(&l.from) && nodes.contains(&l.to))
            .cloned()
            .collect();
        let recheck_after = links
            .iter()
            .filter(|l| matches!(l.state, LinkState::Up | LinkState::Slow | LinkState::Down))
            .filter_map(|l| l.probed_at)
            .map(|p| {
                let age = self.assessed_at.duration_since(p);
                self.stale_after - age.max(SignedDuration::ZERO)
            })
            .min();
        LinkReport {
            nodes: nodes.iter().cloned().collect(),
            links,
            recheck_after,
            ..self.clone()
        }
    }
}
