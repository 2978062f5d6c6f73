//! Idempotent writes a reconcile need not repeat each time: the group's Secret and its
//! PodDisruptionBudget depend on nothing but the group's identity, yet were read or
//! applied on every reconcile — two API calls of every reconcile's four or five, at 1,000
//! members and 50 groups a fifth of the operator's requests to an API server the storm
//! already saturates (issue 20). A group's entry says when this process last made sure
//! of them; they are made sure of again after [`RECHECK`], so one deleted by hand comes
//! back within that time (the operator reads neither through a watch: it may not list
//! Secrets, and the budget's status changes with every member).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a made-sure-of object is trusted to still be there.
pub const RECHECK: Duration = Duration::from_secs(300);

/// Per group UID, when an idempotent write was last made (or found made).
#[derive(Debug, Default)]
pub struct Recently(Mutex<HashMap<String, Instant>>);

impl Recently {
    /// Whether the write for the group `uid` is due at `now`.
    pub fn due(&self, uid: &str, now: Instant) -> bool {
        self.lock()
            .get(uid)
            .is_none_or(|at| now.saturating_duration_since(*at) >= RECHECK)
    }

    /// The write for `uid` was made at `now`.
    pub fn done(&self, uid: &str, now: Instant) {
        self.lock().insert(uid.to_owned(), now);
    }

    /// The group `uid` is gone.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_due_first_then_after_the_recheck_and_again_once_forgotten() {
        let r = Recently::default();
        let t0 = Instant::now();
        assert!(r.due("u1", t0), "never made");
        r.done("u1", t0);
        assert!(!r.due("u1", t0 + RECHECK - Duration::from_millis(1)));
        assert!(r.due("u1", t0 + RECHECK), "checked again in time");
        assert!(r.due("u2", t0), "per group");
        r.forget("u1");
        assert!(r.due("u1", t0), "a group made again under the same UID");
    }
}
