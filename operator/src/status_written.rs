//! The last status this process wrote per group, which the next round's Events and
//! metrics compare against.
//!
//! Why not the group object the reconcile was given: its status comes from the watch
//! cache, which may not show the previous round's write yet. Compared against that, a
//! member that turned Ready a moment ago turned Ready again — a second `MemberReady`
//! Event (counted up as a series) and a second `scale_to_ready_seconds` sample. At 1,000
//! members in a scale storm that was about 900 repeated Event writes (issue 20). Only
//! the operator writes a group's status, so what it last wrote is the latest status; a
//! process that has written none yet (just started or took over) compares against the
//! cached one, as before. Whether to write at all is still judged against the cached
//! object, so a status changed by anyone else is put right.

use std::collections::HashMap;
use std::sync::Mutex;

use hcomm_crds::HcommGroupStatus;

/// Per group UID, the status last written.
#[derive(Debug, Default)]
pub struct StatusWritten(Mutex<HashMap<String, HcommGroupStatus>>);

impl StatusWritten {
    /// What the group's status was after this process's last write, or `cached` if it
    /// has written none.
    pub fn previous(&self, uid: &str, cached: Option<&HcommGroupStatus>) -> HcommGroupStatus {
        self.lock()
            .get(uid)
            .cloned()
            .or_else(|| cached.cloned())
            .unwrap_or_default()
    }

    /// `status` was written (or found already there) for the group `uid`.
    pub fn wrote(&self, uid: &str, status: &HcommGroupStatus) {
        self.lock().insert(uid.to_owned(), status.clone());
    }

    /// The group `uid` is gone.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HcommGroupStatus>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_write_wins_over_a_stale_cache_until_the_group_is_gone() {
        let written = StatusWritten::default();
        let cached = HcommGroupStatus {
            epoch: 1,
            ..Default::default()
        };
        assert_eq!(
            written.previous("u", Some(&cached)).epoch,
            1,
            "none written"
        );
        written.wrote(
            "u",
            &HcommGroupStatus {
                epoch: 2,
                ..Default::default()
            },
        );
        assert_eq!(written.previous("u", Some(&cached)).epoch, 2);
        assert_eq!(written.previous("other", None), HcommGroupStatus::default());
        written.forget("u");
        assert_eq!(written.previous("u", Some(&cached)).epoch, 1);
    }
}
