//! Link health of a group (pure): the agents probe every peer node of their members and
//! publish the latest result per peer in `HcommNode.status.linkTests`; this module judges
//! every directed link between the nodes that host the group's members and turns the
//! judgement into the `LinksHealthy` condition, the `Degraded` cause and metric counts.
//!
//! A result older than [`LinkPolicy::stale_after`] proves nothing (the agent may be gone,
//! or its probes stuck), so such a link is *unknown*, never healthy. The agent names a peer
//! by the rank table's `server_id` (the node's data address, else its name), so a result
//! matches a node by name or by data address.

use std::collections::BTreeMap;

use hcomm_crds::MemberPhase;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

mod assess;
mod condition;
mod isolated;
#[cfg(test)]
mod isolation_tests;
#[cfg(test)]
mod tests;

pub use assess::assess;

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
    /// When the results were judged (the reference for their age).
    pub assessed_at: Timestamp,
    /// When each node's agent last published its status (`HcommNode.status.lastUpdated`;
    /// see [`LinkReport::with_published`]).
    pub published_at: BTreeMap<String, Timestamp>,
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
        MemberPhase::Syncing
            | MemberPhase::Joining
            | MemberPhase::Standby
            | MemberPhase::Ready
            | MemberPhase::Draining
    )
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

    pub(super) fn with(&self, pick: impl Fn(&LinkState) -> bool) -> Vec<&Link> {
        self.links.iter().filter(|l| pick(&l.state)).collect()
    }
}
