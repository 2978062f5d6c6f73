//! Which watch events wake reconciles (pure): of an `HcommNode`, only what can change a
//! group's plan or conditions — its devices and their health, data address, NICs,
//! topology, and for each link test whether the peer answered and whether it was slow by
//! the operator's [`LinkPolicy`]. Not `lastUpdated`, a probe's time or its exact latency:
//! those change on every republish (every 10 s per agent), and waking every group for
//! each of them kept 50 groups on 200 nodes reconciling without pause (issue 20). A link
//! result turning stale changes nothing in the cluster; the reconcile requeues itself
//! for that moment (`reconcile::next_action`).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use hcomm_crds::HcommNode;
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;

use crate::links::LinkPolicy;

/// Remembers each node's last relevant content; says when it changed.
#[derive(Debug, Clone)]
pub struct NodeChanges {
    policy: LinkPolicy,
    seen: HashMap<String, u64>,
}

impl NodeChanges {
    /// Judges slowness with `policy`.
    pub fn new(policy: LinkPolicy) -> Self {
        Self {
            policy,
            seen: HashMap::new(),
        }
    }

    /// Whether `node` differs from its last version in anything that matters (a node
    /// seen for the first time does).
    pub fn changed(&mut self, node: &HcommNode) -> bool {
        let digest = relevant_digest(node, self.policy);
        self.seen.insert(node.name_any(), digest) != Some(digest)
    }
}

/// A digest of what in `node` matters to planning and conditions.
pub fn relevant_digest(node: &HcommNode, policy: LinkPolicy) -> u64 {
    let mut h = DefaultHasher::new();
    node.spec.node_name.hash(&mut h);
    if let Some(status) = &node.status {
        // The inventory types are serde types; their JSON is a faithful digest input.
        for part in [
            serde_json::to_string(&status.devices),
            serde_json::to_string(&status.nics),
            serde_json::to_string(&status.topology),
            serde_json::to_string(&status.data_address),
        ] {
            part.unwrap_or_default().hash(&mut h);
        }
        for test in &status.link_tests {
            let slow = test
                .latency_micros
                .is_some_and(|us| SignedDuration::from_micros(us) > policy.slow_after);
            (&test.peer, &test.peer_address, test.reachable, slow).hash(&mut h);
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests;
