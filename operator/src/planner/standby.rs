//! Warm standby (pure): which members of the planned set take traffic and which wait,
//! joined but with their readiness gate held, for a scale-out (`spec.scaling.standby`).
//!
//! The planned set holds `replicas + standby` members (more while a rollout surges). The
//! last `standby` of them, in the order below, are labelled standby; the others serve.
//! The order keeps capacity where it already is, so a scale-out costs only a gate:
//! 1. members that serve (their gate is open) — never moved while others could be;
//! 2. warm standby members (joined, gate held by their agent): promoting one is instant;
//! 3. members on their way in that are meant to serve, then those meant to wait, so a
//!    member's label does not flip while it joins;
//! 4. this round's joiners: they refill the standby behind the promoted ones.
//!
//! Within a tier the lower index comes first. A scale-in removes the highest indices
//! (`ranks::victims`) and this order then moves the surplus serving members back to
//! standby, so the group keeps its warm members instead of deleting them. With
//! `standby: 0` nothing is ever labelled, and surge members of a rollout serve.

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::MemberPhase;

use super::PlannedMember;
use crate::phase::ObservedMember;

/// The names of the planned members to hold as standby: the last `standby` of `members` in
/// the tiers above, never more than the members beyond `replicas`.
pub fn assign(
    members: &[PlannedMember],
    observed: &[ObservedMember],
    replicas: usize,
    standby: usize,
) -> BTreeSet<String> {
    let by_name: BTreeMap<&str, &ObservedMember> =
        observed.iter().map(|m| (m.name.as_str(), m)).collect();
    let tier = |p: &PlannedMember| match by_name.get(p.name.as_str()) {
        _ if p.joiner => 4,
        None => 4,
        Some(m) if m.serving => 0,
        Some(m) if m.phase == MemberPhase::Standby => 1,
        Some(m) if !m.standby => 2,
        Some(_) => 3,
    };
    let mut ordered: Vec<&PlannedMember> = members.iter().collect();
    ordered.sort_by_key(|p| (tier(p), p.index));
    let count = standby.min(members.len().saturating_sub(replicas));
    ordered
        .iter()
        .rev()
        .take(count)
        .map(|p| p.name.clone())
        .collect()
}

/// The label changes `assign` asks of existing members: `(name, standby)` for each member
/// whose `hcomm.io/standby` label differs from its assignment.
pub fn relabels(
    members: &[PlannedMember],
    observed: &[ObservedMember],
    assigned: &BTreeSet<String>,
) -> Vec<(String, bool)> {
    members
        .iter()
        .filter(|p| !p.joiner)
        .filter_map(|p| {
            let m = observed.iter().find(|m| m.name == p.name)?;
            let want = assigned.contains(&p.name);
            (m.standby != want).then(|| (p.name.clone(), want))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(name: &str, index: i32, joiner: bool) -> PlannedMember {
        PlannedMember {
            name: name.into(),
            index,
            node: "n".into(),
            devices: Vec::new(),
            allocation: None,
            joiner,
            standby: false,
        }
    }

    fn observed(name: &str, index: i32, phase: MemberPhase, labelled: bool) -> ObservedMember {
        let mut m = ObservedMember::ready_for_test(index);
        m.name = name.into();
        m.phase = phase;
        m.serving = phase == MemberPhase::Ready;
        m.standby = labelled;
        m
    }

    fn names(set: &BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    #[test]
    fn without_standby_nothing_is_labelled_not_even_a_rollouts_surge() {
        let members = [
            planned("a", 0, false),
            planned("b", 1, false),
            planned("c", 2, true),
        ];
        let obs = [
            observed("a", 0, MemberPhase::Ready, false),
            observed("b", 1, MemberPhase::Ready, false),
        ];
        assert!(assign(&members, &obs, 2, 0).is_empty());
    }

    #[test]
    fn a_scale_out_promotes_the_warm_standby_and_the_joiners_refill_it() {
        // 2 serving + 1 warm standby; replicas 2 → 4 with standby 1: two joiners.
        let members = [
            planned("a", 0, false),
            planned("b", 1, false),
            planned("s", 2, false),
            planned("j3", 3, true),
            planned("j4", 4, true),
        ];
        let obs = [
            observed("a", 0, MemberPhase::Ready, false),
            observed("b", 1, MemberPhase::Ready, false),
            observed("s", 2, MemberPhase::Standby, true),
        ];
        let standby = assign(&members, &obs, 4, 1);
        assert_eq!(names(&standby), ["j4"]);
        assert_eq!(
            relabels(&members, &obs, &standby),
            [("s".to_owned(), false)]
        );
    }

    #[test]
    fn a_warm_standby_goes_before_a_member_still_joining_and_labels_do_not_flap() {
        // replicas 2, standby 1: `b` is meant to serve but still syncing; `s` is warm.
        let members = [
            planned("a", 0, false),
            planned("b", 1, false),
            planned("s", 2, false),
        ];
        let mut obs = vec![
            observed("a", 0, MemberPhase::Ready, false),
            observed("b", 1, MemberPhase::Syncing, false),
            observed("s", 2, MemberPhase::Standby, true),
        ];
        let first = assign(&members, &obs, 2, 1);
        assert_eq!(names(&first), ["b"]);
        // Next round: `s` was promoted (label gone, gate not yet open: joined, so its
        // agent still reports it as standby) and `b` was relabelled; nothing flips back.
        obs[1].standby = true;
        obs[2].standby = false;
        assert_eq!(assign(&members, &obs, 2, 1), first);
        // `s` serves now; `b` joins as the standby.
        obs[2].phase = MemberPhase::Ready;
        obs[2].serving = true;
        assert_eq!(assign(&members, &obs, 2, 1), first);
    }

    #[test]
    fn a_scale_in_moves_a_serving_member_back_to_standby() {
        // 4 → 2 with standby 1: the planner already drained the two highest indices.
        let members = [
            planned("a", 0, false),
            planned("b", 1, false),
            planned("c", 2, false),
        ];
        let obs = [
            observed("a", 0, MemberPhase::Ready, false),
            observed("b", 1, MemberPhase::Ready, false),
            observed("c", 2, MemberPhase::Ready, false),
        ];
        let standby = assign(&members, &obs, 2, 1);
        assert_eq!(names(&standby), ["c"]);
        assert_eq!(relabels(&members, &obs, &standby), [("c".to_owned(), true)]);
    }

    #[test]
    fn fewer_members_than_replicas_all_serve_even_the_labelled_ones() {
        let members = [planned("a", 0, false), planned("s", 1, false)];
        let obs = [
            observed("a", 0, MemberPhase::Ready, false),
            observed("s", 1, MemberPhase::Standby, true),
        ];
        // A serving member failed and was removed: the standby takes its place.
        let standby = assign(&members, &obs, 2, 1);
        assert!(standby.is_empty());
        assert_eq!(
            relabels(&members, &obs, &standby),
            [("s".to_owned(), false)]
        );
    }
}
