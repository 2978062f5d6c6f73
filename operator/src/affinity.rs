//! The planner's node choice, expressed so the real scheduler makes it (pure): a REQUIRED
//! node affinity `kubernetes.io/hostname In [node]` on the member Pod. The scheduler then
//! binds the Pod itself, counting the NPU resource, taints, quotas and (with
//! `schedulerName: volcano`) gang rules; the operator never writes `nodeName`.
//!
//! The same term is read back ([`required_node`]) so a Pod not bound yet still counts
//! against the node it was planned for: without it, two reconciles in a row could plan
//! the same free NPUs twice before the scheduler binds the first Pod.

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
};

/// The well-known node label holding the node's name.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Requires `node` on `spec`: the user's required node-affinity terms (ORed by Kubernetes)
/// each get the hostname requirement ANDed in, so both the user's and hcomm's choice hold;
/// without user terms, one term with the hostname alone. Preferred terms and pod
/// (anti-)affinity are kept as written.
pub fn require_node(spec: &mut PodSpec, node: &str) {
    let requirement = NodeSelectorRequirement {
        key: HOSTNAME_LABEL.into(),
        operator: "In".into(),
        values: Some(vec![node.to_owned()]),
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let selector = node_affinity
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    if selector.node_selector_terms.is_empty() {
        selector
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut selector.node_selector_terms {
        let expressions = term.match_expressions.get_or_insert_with(Vec::new);
        expressions.retain(|e| e.key != HOSTNAME_LABEL);
        expressions.push(requirement.clone());
    }
}

/// The node a Pod is required on by [`require_node`], when it names exactly one.
pub fn required_node(spec: &PodSpec) -> Option<String> {
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|e| e.key == HOSTNAME_LABEL && e.operator == "In")
        .and_then(|e| match e.values.as_deref() {
            Some([one]) => Some(one.clone()),
            _ => None,
        })
}

/// The node a member Pod is on or is going to: `nodeName` once bound, else the node it is
/// required on.
pub fn node_of(spec: &PodSpec) -> Option<String> {
    spec.node_name.clone().or_else(|| required_node(spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostname_is_required_and_read_back() {
        let mut spec = PodSpec::default();
        require_node(&mut spec, "n1");
        assert_eq!(required_node(&spec).as_deref(), Some("n1"));
        assert_eq!(node_of(&spec).as_deref(), Some("n1"));
        spec.node_name = Some("n1".into());
        assert_eq!(node_of(&spec).as_deref(), Some("n1"));
    }

    #[test]
    fn the_users_required_terms_each_get_the_hostname_and_keep_their_own_rules() {
        let mut spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["huawei-Ascend910"]}]},
                    {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": ["old"]}]}
                ]}}}
        }))
        .unwrap();
        require_node(&mut spec, "n2");
        let terms = spec
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 2);
        let first = terms[0].match_expressions.as_ref().unwrap();
        assert_eq!(first[0].key, "accelerator");
        assert_eq!(first[1].values.as_deref(), Some(&["n2".to_owned()][..]));
        let second = terms[1].match_expressions.as_ref().unwrap();
        assert_eq!(second.len(), 1, "the stale hostname is replaced, not ANDed");
        assert_eq!(second[0].values.as_deref(), Some(&["n2".to_owned()][..]));
    }
}
