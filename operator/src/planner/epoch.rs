//! The membership epoch (pure).
//!
//! The epoch increases by exactly one each time the planned member set changes, and
//! never otherwise. It must survive operator restarts, so it is derived from what is
//! stored in the cluster: the rank-table ConfigMap (the recorded epoch and member set)
//! and the `hcomm.io/epoch` label on member Pods (joiners carry the epoch they were
//! planned at). Writes happen in the order Pods → ConfigMap → status, so a crash between
//! them leaves Pods labelled with an epoch the ConfigMap does not know yet; that epoch is
//! then finished rather than skipped.

use std::collections::BTreeSet;

/// What the cluster records about the current epoch (the rank-table ConfigMap, or the
/// group status when the ConfigMap is missing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The recorded epoch.
    pub epoch: i64,
    /// The member (Pod) names of the recorded epoch.
    pub members: BTreeSet<String>,
}

/// The epoch of the member set `kept` (plus any joiners planned now).
///
/// - nothing changes now and `kept` is the recorded set → the recorded epoch;
/// - some member Pod carries a newer epoch than the recorded one (a change was applied
///   but not recorded before a crash or error) → that epoch, so it is finished, not skipped;
/// - otherwise → the recorded epoch + 1.
pub fn next_epoch(
    recorded: &Recorded,
    kept: &BTreeSet<String>,
    newest_label: i64,
    changing_now: bool,
) -> i64 {
    if !changing_now && *kept == recorded.members {
        recorded.epoch
    } else if newest_label > recorded.epoch {
        newest_label
    } else {
        recorded.epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn recorded(epoch: i64, names: &[&str]) -> Recorded {
        Recorded {
            epoch,
            members: set(names),
        }
    }

    #[test]
    fn an_unchanged_member_set_keeps_its_epoch() {
        assert_eq!(
            next_epoch(&recorded(3, &["a", "b"]), &set(&["a", "b"]), 3, false),
            3
        );
    }

    #[test]
    fn a_change_bumps_the_epoch_by_exactly_one() {
        assert_eq!(
            next_epoch(&recorded(3, &["a", "b"]), &set(&["a", "b"]), 3, true),
            4
        );
        assert_eq!(
            next_epoch(&recorded(3, &["a", "b"]), &set(&["a"]), 2, false),
            4
        );
    }

    #[test]
    fn joiners_created_before_a_crash_finish_their_epoch_instead_of_skipping_it() {
        // Pods labelled 4 exist, the ConfigMap still records epoch 3.
        let stored = recorded(3, &["a", "b"]);
        assert_eq!(next_epoch(&stored, &set(&["a", "b", "c"]), 4, false), 4);
        // And more joiners planned in that state still belong to epoch 4.
        assert_eq!(next_epoch(&stored, &set(&["a", "b", "c"]), 4, true), 4);
    }

    #[test]
    fn the_first_epoch_of_a_new_group_is_one() {
        assert_eq!(next_epoch(&Recorded::default(), &set(&[]), 0, true), 1);
    }
}
