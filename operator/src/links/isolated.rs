//! Which nodes the data network has lost, from the judged links (the evidence the
//! operator's replacement decisions rest on, see `crate::isolation`).

use std::collections::BTreeMap;

use super::{Link, LinkReport, LinkState};

impl LinkReport {
    /// Nodes the data network has lost, each with why: every other member node that
    /// probed it recently found it down and none reached it, and the fault is its own —
    /// either the node has gone silent (its own results, all taken before it was found
    /// down, still call its links up: its agent cannot publish), or its own agent, still
    /// publishing, finds every peer down too while another node is still reached by a third
    /// node (evidence that does not come from the suspect itself), or its agent has
    /// published nothing at all for longer than a result stays fresh
    /// ([`LinkReport::published_at`]). A node that never published proves nothing.
    ///
    /// Why the suspect's own word is needed while it still publishes: peers finding a node
    /// down is all a stranger can cause (saturate its probe port), so that alone must
    /// never cost it its members; a node whose agent is alive, reaches its peers and says
    /// so keeps them (issue 17: no eviction by a stranger). A one-way fault between two nodes (one finds the other down, the other,
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
        // Or its agent has stopped publishing anything: no status for longer than a result
        // stays fresh (a live agent refreshes it every inventory interval, well within
        // that), while the others find it down. This also covers a node cut off before it
        // ever probed the nodes that find it down, which leaves no result of its own to
        // weigh.
        let stopped_publishing = |node: &str| {
            self.published_at
                .get(node)
                .is_some_and(|p| self.assessed_at.duration_since(*p) > self.stale_after)
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
        // Its own fresh results find every peer down: the node agrees it is cut off.
        let finds_all_down = |node: &str| {
            let own: Vec<&Link> = self
                .links
                .iter()
                .filter(|l| l.from == node && l.probed_at.is_some())
                .collect();
            !own.is_empty() && own.iter().all(|l| l.state == LinkState::Down)
        };
        self.nodes
            .iter()
            .filter(|n| {
                suspect(n)
                    && (silent(n)
                        || stopped_publishing(n)
                        || (finds_all_down(n) && some_node_fine(n)))
            })
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
