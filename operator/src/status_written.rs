//! The last status this process wrote (or handed to its writer, `crate::status_writer`)
//! per group, which the next round's Events and metrics compare against.
//!
//! Why not the group object the reconcile was given: its status comes from the watch
//! cache, which may not show the previous round's write yet. Compared against that, a
//! member that turned Ready a moment ago turned Ready again — a second `MemberReady`
//! Event (counted up as a series) and a second `scale_to_ready_seconds` sample. At 1,000
//! members in a scale storm that was about 900 repeated Event writes (issue 20). Only
//! the operator writes a group's status, so what it last wrote is the latest status; a
//! process that has written none yet (just started or took over) compares against the
//! cached one.
//!
//! The next status is also built from it (phase and condition transition times carry
//! on), and written only when it differs from it. Built from and judged against a lagging
//! cache, every round wrote: a member that changed phase in the last write had changed
//! "again", at a new time (issue 20: in a 50-group storm reconciles run on every member's
//! condition change, faster than the group watch brings back the operator's own writes).
//! The last write counts while the cached object is older than it (by the resource
//! version the API server answered the write with); once the cache shows it or something
//! newer, the cached object does, so a status changed by anyone else is put right.

use std::collections::HashMap;
use std::sync::Mutex;

use hcomm_crds::HcommGroupStatus;

use crate::cache::at_least;

/// A status written, and the resource version the API server answered the write with.
#[derive(Debug, Clone)]
struct Written {
    status: HcommGroupStatus,
    resource_version: Option<String>,
}

/// Per group UID, the status last written.
#[derive(Debug, Default)]
pub struct StatusWritten(Mutex<HashMap<String, Written>>);

impl StatusWritten {
    /// The group's latest status: this process's last write while the cached object
    /// (status `cached` at resource version `cached_version`) is older than that write,
    /// else the cached one.
    pub fn latest(
        &self,
        uid: &str,
        cached: Option<&HcommGroupStatus>,
        cached_version: Option<&str>,
    ) -> HcommGroupStatus {
        let all = self.lock();
        let unseen = all.get(uid).filter(|w| {
            match (cached_version, w.resource_version.as_deref()) {
                (Some(have), Some(wrote)) => !at_least(have, wrote),
                // A write without an answered version, or a cached object without one:
                // only the write is known to be this process's.
                _ => true,
            }
        });
        unseen
            .map(|w| w.status.clone())
            .or_else(|| cached.cloned())
            .unwrap_or_default()
    }

    /// `status`, which this round computed, is what the group already has: in this
    /// process's last write, which stands as it is (answered, or still on its way:
    /// [`StatusWritten::handed_over`]), or else in the cached object at `cached_version`.
    pub fn unchanged(&self, uid: &str, status: &HcommGroupStatus, cached_version: Option<&str>) {
        let mut all = self.lock();
        if all.get(uid).is_some_and(|w| w.status == *status) {
            return;
        }
        all.insert(
            uid.to_owned(),
            Written {
                status: status.clone(),
                resource_version: cached_version.map(str::to_owned),
            },
        );
    }

    /// `status` is on its way to the API server (`crate::status_writer`): the group's
    /// latest, over any cached object, until its write is answered.
    pub fn handed_over(&self, uid: &str, status: &HcommGroupStatus) {
        self.lock().insert(
            uid.to_owned(),
            Written {
                status: status.clone(),
                resource_version: None,
            },
        );
    }

    /// The write of `status` was answered at `version`; recorded only while `status` is
    /// still the latest (a newer one handed over meanwhile is on its way).
    pub fn answered(&self, uid: &str, status: &HcommGroupStatus, version: Option<String>) {
        let mut all = self.lock();
        if let Some(latest) = all.get_mut(uid).filter(|w| w.status == *status) {
            latest.resource_version = version;
        }
    }

    /// The group `uid` is gone.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(epoch: i64) -> HcommGroupStatus {
        HcommGroupStatus {
            epoch,
            ..Default::default()
        }
    }

    #[test]
    fn the_last_write_is_the_latest_until_the_cache_shows_it_or_something_newer() {
        let written = StatusWritten::default();
        let latest = |cached: i64, version: &str| {
            written
                .latest("u", Some(&epoch(cached)), Some(version))
                .epoch
        };
        assert_eq!(latest(1, "5"), 1, "nothing written: the cache");
        written.handed_over("u", &epoch(2));
        written.answered("u", &epoch(2), Some("10".into()));
        assert_eq!(latest(1, "9"), 2, "the cache is behind the write");
        // Found already there: the version of the write that put it there still counts.
        written.unchanged("u", &epoch(2), Some("9"));
        assert_eq!(latest(1, "9"), 2);
        assert_eq!(latest(2, "10"), 2, "the cache shows the write");
        assert_eq!(
            latest(7, "11"),
            7,
            "someone else's later change is the latest (and is put right)"
        );
        assert_eq!(
            written.latest("other", None, None),
            HcommGroupStatus::default()
        );
        written.forget("u");
        assert_eq!(latest(1, "9"), 1, "forgotten: the cache again");
    }

    #[test]
    fn a_status_on_its_way_stays_the_latest_until_its_write_is_answered() {
        let written = StatusWritten::default();
        written.handed_over("u", &epoch(4));
        // The next round computes the same status: nothing new to write, and the cache,
        // at a version later than anything before, must not count as having it.
        written.unchanged("u", &epoch(4), Some("50"));
        assert_eq!(written.latest("u", Some(&epoch(3)), Some("50")).epoch, 4);
        // An answer for a status no longer the latest changes nothing.
        written.answered("u", &epoch(3), Some("51".into()));
        assert_eq!(written.latest("u", Some(&epoch(3)), Some("51")).epoch, 4);
        written.answered("u", &epoch(4), Some("52".into()));
        assert_eq!(written.latest("u", Some(&epoch(3)), Some("51")).epoch, 4);
        assert_eq!(written.latest("u", Some(&epoch(4)), Some("52")).epoch, 4);
        assert_eq!(written.latest("u", Some(&epoch(8)), Some("53")).epoch, 8);
    }

    #[test]
    fn a_status_found_in_the_cache_yields_to_a_later_change_by_someone_else() {
        let written = StatusWritten::default();
        // Just started: the cache at version 20 already holds what this round computed.
        written.unchanged("u", &epoch(3), Some("20"));
        assert_eq!(written.latest("u", Some(&epoch(3)), Some("20")).epoch, 3);
        // Someone edits the status: the cache shows it, and it is the one to put right.
        assert_eq!(written.latest("u", Some(&epoch(9)), Some("21")).epoch, 9);
    }
}
