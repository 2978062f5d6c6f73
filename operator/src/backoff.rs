//! Backoff between replacements of failed members.
//!
//! A member that fails is replaced at once. If its replacement fails too — because what
//! made the first fail is still true (a peer whose agent is down refuses every joiner's
//! link probe; a node that is the only free one keeps a broken NIC) — replacing it again
//! at once turns into a loop creating and deleting a Pod every few hundred milliseconds,
//! as a ReplicaSet would without its own backoff. So each further failure of the group
//! delays new members: 1 s, 2 s, 4 s, … up to [`MAX_DELAY`]. The count starts over when
//! a member planned after the last failure serves (its replacement worked, so whatever
//! failed it is gone: a restored host, a mended NIC) or after ten minutes without a failure.
//! Without the first rule a group that lost a host keeps its delay long after the host is
//! back, and the next scale-out waits minutes for nothing. Kept in the operator's memory (a restart starts over, like
//! controller-runtime's rate limiters); [`FailureBackoff`] is pure, given the time.

use std::collections::BTreeSet;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The longest delay between replacements.
pub const MAX_DELAY: SignedDuration = SignedDuration::from_secs(300);
/// A group without a failure for this long starts over.
pub const RESET_AFTER: SignedDuration = SignedDuration::from_secs(600);
/// Failed member names remembered (so one failure counts once across reconciles).
const REMEMBERED: usize = 64;

/// One group's failure history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FailureBackoff {
    failures: u32,
    last_failure: Option<Timestamp>,
    /// The newest epoch among the failed members counted.
    last_failed_epoch: Option<i64>,
    counted: BTreeSet<String>,
}

impl FailureBackoff {
    /// Counts the members in `failed` not counted before (each reconcile sees a failed
    /// member again until it is gone); returns whether anything new was counted.
    /// `failed` holds each failed member's name and the epoch it was planned at.
    pub fn observe(&mut self, failed: &[(String, i64)], now: Timestamp) -> bool {
        let new: Vec<&(String, i64)> = failed
            .iter()
            .filter(|(n, _)| !self.counted.contains(n))
            .collect();
        if new.is_empty() {
            return false;
        }
        if self
            .last_failure
            .is_some_and(|t| now.duration_since(t) > RESET_AFTER)
        {
            self.failures = 0;
        }
        self.failures += 1;
        self.last_failure = Some(now);
        let newest = new.iter().map(|(_, e)| *e).max();
        self.last_failed_epoch = self.last_failed_epoch.max(newest);
        for (n, _) in new {
            if self.counted.len() >= REMEMBERED
                && let Some(first) = self.counted.iter().next().cloned()
            {
                self.counted.remove(&first);
            }
            self.counted.insert(n.clone());
        }
        true
    }

    /// A member planned at `epoch` serves: if it was planned after the last counted
    /// failure, the count starts over (the names counted stay remembered, so a failed
    /// member still present is not counted again).
    pub fn observe_serving(&mut self, epoch: i64) {
        if self.last_failed_epoch.is_some_and(|f| epoch > f) {
            self.failures = 0;
            self.last_failure = None;
            self.last_failed_epoch = None;
        }
    }

    /// No new member before this time (None: now). The first failure is replaced at once;
    /// the n-th waits 2^(n−2) s after it, at most [`MAX_DELAY`].
    pub fn new_members_after(&self, now: Timestamp) -> Option<Timestamp> {
        let last = self.last_failure?;
        if self.failures < 2 || now.duration_since(last) > RESET_AFTER {
            return None;
        }
        let secs = 1i64 << (self.failures - 2).min(16);
        let delay = SignedDuration::from_secs(secs).min(MAX_DELAY);
        let until = last.checked_add(delay).ok()?;
        (until > now).then_some(until)
    }

    /// Consecutive failures counted.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    /// Failed members, all planned at epoch 1.
    fn names(ns: &[&str]) -> Vec<(String, i64)> {
        ns.iter().map(|n| ((*n).to_owned(), 1)).collect()
    }

    #[test]
    fn the_first_failure_is_replaced_at_once_and_each_further_one_waits_twice_as_long() {
        let mut b = FailureBackoff::default();
        assert_eq!(b.new_members_after(t(0)), None);
        assert!(b.observe(&names(&["g-0-e1"]), t(0)));
        assert_eq!(b.new_members_after(t(0)), None);
        // Seen again by the next reconcile: not a new failure.
        assert!(!b.observe(&names(&["g-0-e1"]), t(1)));
        assert!(b.observe(&names(&["g-0-e2"]), t(2)));
        assert_eq!(b.new_members_after(t(2)), Some(t(3)));
        assert_eq!(b.new_members_after(t(3)), None);
        assert!(b.observe(&names(&["g-0-e3"]), t(10)));
        assert_eq!(b.new_members_after(t(10)), Some(t(12)));
        for (i, n) in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
            .iter()
            .enumerate()
        {
            b.observe(&names(&[n]), t(20 + i as i64));
        }
        assert_eq!(b.failures(), 13);
        assert_eq!(b.new_members_after(t(29)), Some(t(29) + MAX_DELAY));
    }

    #[test]
    fn ten_quiet_minutes_forget_the_count() {
        let mut b = FailureBackoff::default();
        for (i, n) in ["a", "b", "c"].iter().enumerate() {
            b.observe(&names(&[n]), t(i as i64));
        }
        assert_eq!(b.new_members_after(t(2)), Some(t(4)));
        let later = t(2) + RESET_AFTER + SignedDuration::from_secs(1);
        assert_eq!(b.new_members_after(later), None);
        b.observe(&names(&["d"]), later);
        assert_eq!(b.failures(), 1);
        assert_eq!(b.new_members_after(later), None);
    }

    #[test]
    fn several_members_failing_together_count_once() {
        let mut b = FailureBackoff::default();
        assert!(b.observe(&names(&["a", "b", "c"]), t(0)));
        assert_eq!(b.failures(), 1);
    }

    #[test]
    fn a_replacement_that_serves_starts_the_count_over_but_an_older_member_does_not() {
        let mut b = FailureBackoff::default();
        for (i, n) in ["a", "b", "c", "d"].iter().enumerate() {
            b.observe(&[((*n).to_owned(), 10 + i as i64)], t(i as i64));
        }
        assert_eq!(b.new_members_after(t(3)), Some(t(7)));
        // A member planned before the last failure serving says nothing about its cause.
        b.observe_serving(13);
        assert_eq!(b.failures(), 4);
        assert_eq!(b.new_members_after(t(3)), Some(t(7)));
        // The replacement planned after it serves: the cause is gone.
        b.observe_serving(14);
        assert_eq!(b.failures(), 0);
        assert_eq!(b.new_members_after(t(3)), None);
        // The failed members still listed are not counted again.
        assert!(!b.observe(&names(&["a", "d"]), t(4)));
        assert_eq!(b.failures(), 0);
    }
}
