//! Member Pods the API server would not create, per group.
//!
//! On a shared cluster the API server refuses Pods for reasons only their tenant can
//! change: a full `ResourceQuota`, Pod Security admission, a policy webhook (Kyverno,
//! Gatekeeper), a `LimitRange`. A ReplicaSet answers with a Warning `FailedCreate` Event, a
//! `ReplicaFailure` condition and retries at a growing interval; so does the operator. The
//! refusal, in the API server's words, is the group's `Degraded` condition (reason
//! `FailedCreate`) and a Warning Event, and new members wait 1 s, 2 s, 4 s, … up to
//! [`MAX_DELAY`] before the next try. A spec edit (a new `generation`) tries again at once.
//! A create that succeeds, or a group that needs no new member any more, ends it.
//!
//! Before, a refused create failed the whole reconcile: no status, no Event (only the
//! operator's log), a retry every 2 s for as long as the refusal stood, and the NPUs
//! promised to the refused joiners counted as used for `cache::ASSUME_TTL`.
//!
//! Kept in the operator's memory, like [`crate::backoff`]: a new leader tries at once.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The longest wait between tries. Shorter than the member failure backoff's: a tenant who
/// raises their quota should see members within a minute, and a refused create costs the
/// API server one cheap request.
pub const MAX_DELAY: SignedDuration = SignedDuration::from_secs(60);

/// The creates one round could not make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The joiners whose Pods were not created, in plan order.
    pub members: Vec<String>,
    /// The API server's HTTP status code, `None` when no answer came.
    pub code: Option<u16>,
    /// The API server's reason (`Forbidden`, `Invalid`, `TooManyRequests`, …), or
    /// `Transport` when no answer came.
    pub reason: String,
    /// The first failure, as the API server (or the client) put it.
    pub message: String,
}

impl Refusal {
    /// The refusal of `members` (not empty), whose first failure was `error`.
    pub fn new(members: Vec<String>, error: &kube::Error) -> Self {
        let (code, reason, message) = match error {
            kube::Error::Api(status) => (
                Some(status.code),
                if status.reason.is_empty() {
                    format!("HTTP{}", status.code)
                } else {
                    status.reason.clone()
                },
                status.message.clone(),
            ),
            other => (None, "Transport".to_owned(), other.to_string()),
        };
        Self {
            members,
            code,
            reason,
            message,
        }
    }

    /// The metric label: the status code, or `none` (a webhook may put any words in the
    /// reason; the code is a bounded label).
    pub fn code_label(&self) -> String {
        self.code
            .map_or_else(|| "none".to_owned(), |c| c.to_string())
    }

    /// For people: which members, and why.
    pub fn describe(&self) -> String {
        let who = match self.members.as_slice() {
            [one] => format!("member Pod {one}"),
            [first, rest @ ..] => format!("member Pods {first} and {} more", rest.len()),
            [] => "no member Pod".to_owned(),
        };
        format!("{who} not created ({}): {}", self.reason, self.message)
    }
}

/// A group's standing create failure: the last refusal and when to try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateFailure {
    /// The last round's refusal.
    pub refusal: Refusal,
    /// Rounds in a row whose creates failed.
    pub tries: u32,
    /// When the last of them failed.
    pub at: Timestamp,
    /// The group's `generation` then: an edited spec is tried at once.
    generation: Option<i64>,
}

impl CreateFailure {
    /// The failure after `previous` (of the same spec) with a new `refusal` at `now`.
    pub fn next(
        previous: Option<&CreateFailure>,
        refusal: Refusal,
        generation: Option<i64>,
        now: Timestamp,
    ) -> Self {
        let tries = previous
            .filter(|p| p.generation == generation)
            .map_or(0, |p| p.tries)
            + 1;
        Self {
            refusal,
            tries,
            at: now,
            generation,
        }
    }

    /// No new member before this: 2^(tries−1) s after the last failure, at most
    /// [`MAX_DELAY`].
    pub fn retry_at(&self) -> Timestamp {
        let secs = 1i64 << self.tries.saturating_sub(1).min(16);
        let delay = SignedDuration::from_secs(secs).min(MAX_DELAY);
        self.at.checked_add(delay).unwrap_or(self.at)
    }

    /// For people: the refusal, the count and the next try.
    pub fn describe(&self) -> String {
        format!(
            "{}; tried {} time(s), next try at {}",
            self.refusal.describe(),
            self.tries,
            // Whole seconds: people read it, and the wait is in seconds.
            Timestamp::from_second(self.retry_at().as_second()).unwrap_or(self.at)
        )
    }
}

/// Per group UID, its standing create failure.
#[derive(Debug, Default)]
pub struct CreateFailures(Mutex<HashMap<String, CreateFailure>>);

impl CreateFailures {
    /// The group's standing failure, unless its spec changed since (then it is forgotten).
    pub fn current(&self, uid: &str, generation: Option<i64>) -> Option<CreateFailure> {
        let mut all = self.lock();
        if all.get(uid).is_some_and(|f| f.generation != generation) {
            all.remove(uid);
        }
        all.get(uid).cloned()
    }

    /// Records this round's `refusal`; returns the failure as it stands now.
    pub fn failed(
        &self,
        uid: &str,
        refusal: Refusal,
        generation: Option<i64>,
        now: Timestamp,
    ) -> CreateFailure {
        let mut all = self.lock();
        let next = CreateFailure::next(all.get(uid), refusal, generation, now);
        all.insert(uid.to_owned(), next.clone());
        next
    }

    /// The group's creates succeed again, it needs none, or it is gone.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CreateFailure>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn forbidden() -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "pods \"g-3\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2",
                "Forbidden",
            )
            .with_code(403),
        ))
    }

    #[test]
    fn a_refusal_says_which_members_and_the_api_servers_words() {
        let one = Refusal::new(vec!["g-3".into()], &forbidden());
        assert_eq!(
            (one.reason.as_str(), one.code_label()),
            ("Forbidden", "403".into())
        );
        assert_eq!(
            one.describe(),
            "member Pod g-3 not created (Forbidden): pods \"g-3\" is forbidden: exceeded quota: q, \
             requested: pods=1, used: pods=2, limited: pods=2"
        );
        let three = Refusal::new(vec!["g-3".into(), "g-4".into(), "g-5".into()], &forbidden());
        assert!(
            three
                .describe()
                .starts_with("member Pods g-3 and 2 more not created (Forbidden): ")
        );
    }

    #[test]
    fn each_try_waits_twice_as_long_up_to_a_minute_and_an_edited_spec_starts_over() {
        let refusal = Refusal::new(vec!["g-3".into()], &forbidden());
        let mut failure = CreateFailure::next(None, refusal.clone(), Some(1), t(0));
        assert_eq!((failure.tries, failure.retry_at()), (1, t(1)));
        for (tries, wait) in [(2, 2), (3, 4), (4, 8), (7, 60), (30, 60)] {
            while failure.tries < tries {
                failure = CreateFailure::next(Some(&failure), refusal.clone(), Some(1), t(100));
            }
            assert_eq!(failure.retry_at(), t(100 + wait), "try {tries}");
        }
        let edited = CreateFailure::next(Some(&failure), refusal, Some(2), t(200));
        assert_eq!((edited.tries, edited.retry_at()), (1, t(201)));
        assert!(edited.describe().contains("tried 1 time(s), next try at"));
    }

    #[test]
    fn the_store_forgets_a_failure_of_an_older_spec_and_on_request() {
        let store = CreateFailures::default();
        let refusal = Refusal::new(vec!["g-3".into()], &forbidden());
        store.failed("u", refusal.clone(), Some(1), t(0));
        assert_eq!(store.failed("u", refusal, Some(1), t(1)).tries, 2);
        assert_eq!(store.current("u", Some(1)).map(|f| f.tries), Some(2));
        assert_eq!(store.current("u", Some(2)), None);
        assert_eq!(store.current("u", Some(1)), None, "forgotten, not hidden");
        store.failed(
            "u",
            Refusal::new(vec!["g-3".into()], &forbidden()),
            Some(2),
            t(2),
        );
        store.forget("u");
        assert_eq!(store.current("u", Some(2)), None);
    }
}
