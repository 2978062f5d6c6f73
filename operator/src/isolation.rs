//! Decisions from link health (pure): which members to replace because their node is lost
//! to the data network. The observation (Pods, `HcommNode` link tests) is never edited;
//! the decision is a separate value ([`Replacement`]) that the reconciler folds into the
//! members the planner and the status see ([`judged`]).
//!
//! Data flow: `observe` → one [`LinkReport`] per reconcile (`links::assess`) →
//! [`replacements`] → [`judged`] members → `planner` and `status`.

use crate::links::{self, LinkReport, LinkState};
use crate::phase::ObservedMember;

/// A planned action: replace `member`, whose node the data network has lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// The member Pod's name.
    pub member: String,
    /// Why, naming the node and the peers that found it down.
    pub reason: String,
}

/// Members on a node the data network has lost ([`LinkReport::isolated_nodes`]) cannot
/// take part in a collective: they are to be replaced elsewhere while the others keep
/// serving. Only members that move traffic and have not failed already count, and the
/// evidence must postdate the member: a link found down before the member was created
/// (e.g. while its node was cut earlier and not probed again since) says nothing about it.
pub fn replacements(members: &[ObservedMember], report: &LinkReport) -> Vec<Replacement> {
    let isolated = report.isolated_nodes();
    let mut out = Vec::new();
    for m in members {
        let after_creation = |node: &str| {
            report
                .links
                .iter()
                .filter(|l| l.to == node && l.state == LinkState::Down)
                .all(|l| matches!((l.probed_at, m.created_at), (Some(p), Some(c)) if p > c))
        };
        if let Some((node, why)) = m.node.as_ref().and_then(|n| isolated.get_key_value(n))
            && !m.failed
            && links::carries_traffic(m.phase)
            && after_creation(node)
        {
            tracing::warn!(member = %m.name, reason = %why, "member on an isolated node is to be replaced");
            out.push(Replacement {
                member: m.name.clone(),
                reason: why.clone(),
            });
        }
    }
    out
}

/// The members as the operator judges them: the observation, with each member to be
/// replaced counted as failed and unreachable (so the planner replaces it at once and asks
/// it to drain; it is deleted once drained or at the drain deadline, never before — see
/// `planner::RemovalReason::Unreachable`) and the reason as its message.
pub fn judged(members: &[ObservedMember], replacements: &[Replacement]) -> Vec<ObservedMember> {
    members
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(r) = replacements.iter().find(|r| r.member == m.name) {
                m.failed = true;
                m.unreachable = true;
                m.message = Some(r.reason.clone());
            }
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use hcomm_crds::MemberPhase;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::links::{Link, LinkReport};

    fn at(second: i64) -> Option<Timestamp> {
        Some(Timestamp::from_second(1_800_000_000 + second).unwrap())
    }

    fn member(name: &str, node: &str, phase: MemberPhase, created: i64) -> ObservedMember {
        ObservedMember {
            name: name.into(),
            index: 0,
            node: Some(node.into()),
            phase,
            created_at: at(created),
            ..ObservedMember::ready_for_test(0)
        }
    }

    /// n2 is cut off: n1 found it down at second 10; n2's own last results (second 4)
    /// still say up.
    fn n2_cut_off() -> LinkReport {
        let link = |from: &str, to: &str, state: LinkState, second: i64| Link {
            from: from.into(),
            to: to.into(),
            address: None,
            state,
            probed_at: at(second),
            latency_micros: None,
            error: None,
        };
        LinkReport {
            nodes: vec!["n1".into(), "n2".into()],
            links: vec![
                link("n1", "n2", LinkState::Down, 10),
                link("n2", "n1", LinkState::Up, 4),
            ],
            ..LinkReport::default()
        }
    }

    #[test]
    fn a_serving_member_on_an_isolated_node_is_to_be_replaced_and_the_observation_is_untouched() {
        let observed = vec![
            member("a", "n1", MemberPhase::Ready, 0),
            member("b", "n2", MemberPhase::Ready, 0),
        ];
        let before = observed.clone();
        let replace = replacements(&observed, &n2_cut_off());
        assert_eq!(replace.len(), 1);
        assert_eq!(replace[0].member, "b");
        assert!(replace[0].reason.contains("node n2"), "{replace:?}");
        assert_eq!(observed, before);
        let judged = judged(&observed, &replace);
        assert_eq!(judged[0], observed[0]);
        assert!(judged[1].failed && judged[1].unreachable);
        assert_eq!(
            judged[1].message.as_deref(),
            Some(replace[0].reason.as_str())
        );
    }

    #[test]
    fn evidence_older_than_the_member_or_members_without_traffic_replace_nobody() {
        let created_after_the_cut = member("b", "n2", MemberPhase::Ready, 20);
        let verifying = member("c", "n2", MemberPhase::Verifying, 0);
        let mut already_failed = member("d", "n2", MemberPhase::Ready, 0);
        already_failed.failed = true;
        let observed = [created_after_the_cut, verifying, already_failed];
        assert!(replacements(&observed, &n2_cut_off()).is_empty());
    }
}
