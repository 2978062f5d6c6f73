//! Revisions (pure): which version of the member template a member runs, as Kubernetes'
//! StatefulSets and Deployments track it.
//!
//! A revision is a hash of what makes members differ — `spec.template` and
//! `spec.weights` — and nothing else (replicas, scaling or comm settings roll nothing).
//! Every member Pod carries its revision in the `hcomm.io/revision` label; the planner
//! replaces members of other revisions (`planner::rollout`), and
//! `crate::revision_history` keeps each revision as a ControllerRevision so applying an
//! old template again (a rollback) finds its revision again. The hash is FNV-1a (64 bit)
//! over the JSON of the two fields, like the `pod-template-hash` Kubernetes computes with
//! FNV; serde's field order and `BTreeMap`s keep that JSON stable across runs.

use std::collections::BTreeMap;

use hcomm_crds::HcommGroupSpec;
use serde_json::json;

use crate::phase::ObservedMember;

/// What a revision is made of: the part of the spec that shapes a member Pod.
pub fn material(spec: &HcommGroupSpec) -> serde_json::Value {
    json!({ "template": spec.template, "weights": spec.weights })
}

/// The revision of `spec`: 16 lowercase hex digits (a label value and a name suffix).
pub fn of(spec: &HcommGroupSpec) -> String {
    let bytes = serde_json::to_vec(&material(spec)).unwrap_or_default();
    format!("{:016x}", fnv1a64(&bytes))
}

/// FNV-1a, 64 bit: small, fast and stable (the hash must never change between operator
/// versions, or every group would roll on an upgrade).
fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// Whether `member` must be replaced to run `update`. A member made before revisions
/// existed (no label) is judged by its weights digest alone, as before, so upgrading the
/// operator rolls nothing.
pub fn outdated(member: &ObservedMember, update: &str, weights_digest: Option<&str>) -> bool {
    match &member.revision {
        Some(revision) => revision != update,
        None => weights_digest.is_some() && member.weights_digest.as_deref() != weights_digest,
    }
}

/// What the status reports about revisions: the revision being replaced (the one most
/// members off `update` run; `update` itself once all run it) and both counts, over the
/// members in the set (not leaving).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// `status.currentRevision`.
    pub current: String,
    /// `status.updateRevision`.
    pub update: String,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `status.currentReplicas`.
    pub current_count: i32,
}

/// Summarises `members` against `update`.
pub fn summary(members: &[ObservedMember], update: &str) -> Summary {
    let in_set: Vec<&ObservedMember> = members.iter().filter(|m| m.in_set()).collect();
    let updated = in_set
        .iter()
        .filter(|m| m.revision.as_deref() == Some(update))
        .count() as i32;
    let mut others: BTreeMap<&str, (usize, i32)> = BTreeMap::new();
    for m in in_set
        .iter()
        .filter(|m| m.revision.as_deref() != Some(update))
    {
        let key = m.revision.as_deref().unwrap_or("");
        let entry = others.entry(key).or_insert((0, i32::MAX));
        entry.0 += 1;
        entry.1 = entry.1.min(m.index);
    }
    // The most members; on a tie, the revision of the lowest index (the oldest, usually).
    let current = others
        .iter()
        .max_by(|a, b| (a.1.0, -a.1.1).cmp(&(b.1.0, -b.1.1)))
        .map(|(revision, (count, _))| ((*revision).to_owned(), *count as i32));
    match current {
        Some((current, count)) => Summary {
            current,
            update: update.to_owned(),
            updated,
            current_count: count,
        },
        None => Summary {
            current: update.to_owned(),
            update: update.to_owned(),
            updated,
            current_count: updated,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(env: &str) -> HcommGroupSpec {
        serde_json::from_value(json!({
            "replicas": 2,
            "template": {"spec": {"containers": [
                {"name": "w", "image": "w:1", "env": [{"name": "MODE", "value": env}]}]}}
        }))
        .unwrap()
    }

    fn member(index: i32, revision: Option<&str>, leaving: bool) -> ObservedMember {
        let mut m = ObservedMember::ready_for_test(index);
        m.revision = revision.map(str::to_owned);
        if leaving {
            m.drain_requested_at = Some(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        }
        m
    }

    #[test]
    fn a_template_change_makes_a_new_revision_and_the_old_template_its_old_one() {
        let a = of(&spec("a"));
        assert_eq!(a.len(), 16);
        assert_ne!(a, of(&spec("b")));
        assert_eq!(a, of(&spec("a")), "a rollback finds the same revision");
    }

    #[test]
    fn replicas_and_scaling_settings_are_not_part_of_a_revision() {
        let mut other = spec("a");
        other.replicas = 7;
        other.scaling.max_joining = 1;
        other.update_strategy.rolling_update.partition = 3;
        assert_eq!(of(&spec("a")), of(&other));
    }

    #[test]
    fn the_hash_is_fnv1a_and_never_changes() {
        // Published FNV-1a 64 test vectors: the revision of a stored member must stay.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn a_member_without_a_revision_label_is_judged_by_its_weights_digest() {
        let mut m = member(0, None, false);
        m.weights_digest = Some("sha256:old".into());
        assert!(!outdated(&m, "r2", Some("sha256:old")));
        assert!(outdated(&m, "r2", Some("sha256:new")));
        assert!(!outdated(&m, "r2", None));
        m.revision = Some("r1".into());
        assert!(outdated(&m, "r2", Some("sha256:old")));
        assert!(!outdated(&m, "r1", Some("sha256:new")));
    }

    #[test]
    fn the_summary_counts_members_in_the_set_by_revision() {
        let members = vec![
            member(0, Some("old"), false),
            member(1, Some("old"), false),
            member(2, Some("new"), false),
            member(3, Some("old"), true),
        ];
        let s = summary(&members, "new");
        assert_eq!(
            s,
            Summary {
                current: "old".into(),
                update: "new".into(),
                updated: 1,
                current_count: 2,
            }
        );
    }

    #[test]
    fn once_every_member_runs_the_update_revision_it_is_also_the_current_one() {
        let members = vec![member(0, Some("new"), false), member(1, Some("old"), true)];
        let s = summary(&members, "new");
        assert_eq!(
            (s.current.as_str(), s.updated, s.current_count),
            ("new", 1, 1)
        );
    }
}
