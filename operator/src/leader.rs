//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! The Lease records `holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime`
//! and `leaseTransitions`. A candidate never compares the remote `renewTime` with its own
//! clock (the clocks of two machines need not agree): it remembers when, by its own
//! monotonic clock, it last saw the Lease change ([`Observed`], client-go's
//! `observedTime`), and takes over only when the Lease has not changed for
//! `leaseDurationSeconds` since then, or has no holder. The decision is the pure
//! [`decide`]; [`Elector`] does the I/O around it.
//!
//! Every write is a `replace` carrying the `resourceVersion` read just before (optimistic
//! concurrency), so two candidates cannot both win: the loser gets a conflict. The holder
//! renews every [`RENEW_EVERY`]; when it cannot renew within [`RENEW_DEADLINE`] (shorter
//! than [`LEASE_DURATION`], so it has stopped before anyone may take over) it steps down:
//! [`Elector::keep`] returns [`Error::LeaseLost`] and the process exits. On graceful
//! shutdown it releases the Lease (no holder, duration 1 s) so another replica takes over
//! at once.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{Error, Result};

/// How long a Lease is valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the leader renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long the leader keeps acting without a successful renewal.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often a candidate retries.
pub const RETRY_EVERY: Duration = Duration::from_secs(2);
/// Deadline of one candidate round (read, then maybe write) against the API server.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// The parts of a Lease the decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// `metadata.resourceVersion`: changes on every write, renewals included.
    pub resource_version: String,
    /// `spec.holderIdentity`; empty when released.
    pub holder: String,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
}

impl LeaseView {
    /// The view of a Lease read from the API server.
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
            holder: spec.holder_identity.unwrap_or_default(),
            duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
        }
    }
}

/// What this candidate last saw of the Lease, and when by its own clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The Lease as last seen.
    pub lease: LeaseView,
    /// When (local monotonic clock) it was first seen in that version.
    pub at: Instant,
}

/// What a candidate does in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No Lease yet: create it, holding it.
    Create,
    /// This candidate holds it: renew.
    Renew,
    /// Released, or not renewed for its duration as observed here: take it over.
    TakeOver,
    /// Another holder's Lease is still valid.
    Wait {
        /// The current holder.
        holder: String,
    },
}

/// The pure decision of one round. Updates `observed` when the Lease changed since it
/// was last seen (client-go's `observedRecord`/`observedTime`), then decides with
/// `now - observed.at` alone: the Lease's own timestamps are never compared with `now`.
pub fn decide(
    identity: &str,
    lease: Option<&LeaseView>,
    observed: &mut Option<Observed>,
    now: Instant,
) -> Step {
    let Some(lease) = lease else {
        *observed = None;
        return Step::Create;
    };
    if observed.as_ref().is_none_or(|o| o.lease != *lease) {
        *observed = Some(Observed {
            lease: lease.clone(),
            at: now,
        });
    }
    let since = observed.as_ref().map_or(now, |o| o.at);
    if lease.holder == identity {
        Step::Renew
    } else if lease.holder.is_empty() || now.saturating_duration_since(since) >= lease.duration {
        Step::TakeOver
    } else {
        Step::Wait {
            holder: lease.holder.clone(),
        }
    }
}

/// The spec a candidate writes for `step`, from the current one (`None` on create).
/// A renewal keeps `acquireTime` and `leaseTransitions`; a takeover counts one more
/// transition; a create starts at zero.
pub fn next_spec(
    identity: &str,
    step: &Step,
    current: Option<&LeaseSpec>,
    now: Timestamp,
) -> Option<LeaseSpec> {
    let transitions = current.and_then(|s| s.lease_transitions).unwrap_or(0);
    let (acquired, transitions) = match step {
        Step::Create => (now, 0),
        Step::Renew => (
            current
                .and_then(|s| s.acquire_time.as_ref())
                .map_or(now, |t| t.0),
            transitions,
        ),
        Step::TakeOver => (now, transitions + 1),
        Step::Wait { .. } => return None,
    };
    Some(LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
        acquire_time: Some(MicroTime(acquired)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..current.cloned().unwrap_or_default()
    })
}

/// The spec of a released Lease: no holder and a 1 s duration, so the next candidate
/// round takes over; transitions are kept (the next holder counts its own).
pub fn released_spec(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    }
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    /// What this candidate last saw (the observed-time rule).
    observed: Mutex<Option<Observed>>,
    /// The Lease as this replica last wrote it, holding it: what a release replaces
    /// (its `resourceVersion` makes the release fail if someone else wrote since).
    held: Mutex<Option<Lease>>,
}

impl Elector {
    /// An elector for Lease `namespace/name` under `identity`.
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            observed: Mutex::new(None),
            held: Mutex::new(None),
        }
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Waits until this replica holds the Lease. `on_round` is told the holder seen in
    /// each round (`None` when the round failed), for readiness reporting.
    pub async fn acquire(&self, on_round: impl Fn(Option<&str>)) {
        loop {
            match tokio::time::timeout(ATTEMPT_TIMEOUT, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    info!(lease = %self.lease_ref(), identity = %self.identity, "acquired leader lease");
                    return;
                }
                Ok(Ok(false)) => {
                    let holder = self.holder();
                    debug!(lease = %self.lease_ref(), %holder, "lease held by another replica");
                    on_round(Some(&holder));
                }
                Ok(Err(error)) => {
                    warn!(%error, "leader election attempt failed");
                    on_round(None);
                }
                Err(_) => {
                    warn!(timeout = ?ATTEMPT_TIMEOUT, "leader election attempt timed out");
                    on_round(None);
                }
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    }

    /// The holder last seen (empty when none).
    pub fn holder(&self) -> String {
        self.observed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|o| o.lease.holder.clone())
            .unwrap_or_default()
    }

    /// Renews the Lease until it is lost; returns the reason. Steps down without writing
    /// when [`RENEW_DEADLINE`] has passed since the last successful renewal — also when
    /// the process was paused that long, before it touches anything again.
    pub async fn keep(&self) -> Error {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            let Some(left) = RENEW_DEADLINE.checked_sub(last_renewed.elapsed()) else {
                break;
            };
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => last_renewed = Instant::now(),
                Ok(Ok(false)) => break,
                Ok(Err(error)) => warn!(%error, "renewing the leader lease failed"),
                Err(_) => warn!("renewing the leader lease timed out"),
            }
        }
        warn!(lease = %self.lease_ref(), "lost the leader lease, stepping down");
        Error::LeaseLost {
            lease: self.lease_ref(),
        }
    }

    /// Gives the Lease up (when this replica still holds it in the version it last
    /// wrote) so another replica takes over without waiting.
    pub async fn release(&self) {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut lease) = held else {
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        lease.spec = Some(released_spec(&spec, Timestamp::now()));
        let params = PostParams::default();
        let write = self.api.replace(&self.name, &params, &lease);
        match tokio::time::timeout(ATTEMPT_TIMEOUT, write).await {
            Ok(Ok(_)) => info!(lease = %self.lease_ref(), "released leader lease"),
            Ok(Err(error)) => warn!(%error, "could not release the leader lease"),
            Err(_) => warn!("releasing the leader lease timed out"),
        }
    }

    /// One round: create, renew or take over the Lease. `Ok(false)`: someone else holds
    /// it (or won the race).
    pub async fn try_acquire_or_renew(&self) -> Result<bool> {
        let existing = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(Error::kube("read leader lease"))?;
        let view = existing.as_ref().map(LeaseView::of);
        let step = {
            let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
            decide(&self.identity, view.as_ref(), &mut observed, Instant::now())
        };
        let current = existing.as_ref().and_then(|l| l.spec.as_ref());
        let Some(spec) = next_spec(&self.identity, &step, current, Timestamp::now()) else {
            return Ok(false);
        };
        if step == Step::TakeOver {
            let previous = view.map(|v| v.holder).unwrap_or_default();
            info!(%previous, "taking over the leader lease");
        }
        let result = match existing {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // `metadata.resourceVersion` is what was read: a concurrent write conflicts.
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        self.written(result)
    }

    fn written(&self, result: kube::Result<Lease>) -> Result<bool> {
        match result {
            Ok(lease) => {
                *self.observed.lock().unwrap_or_else(|e| e.into_inner()) = Some(Observed {
                    lease: LeaseView::of(&lease),
                    at: Instant::now(),
                });
                *self.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(Error::Kube {
                action: "write leader lease".into(),
                source: error,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(rv: &str, holder: &str) -> LeaseView {
        LeaseView {
            resource_version: rv.into(),
            holder: holder.into(),
            duration: LEASE_DURATION,
        }
    }

    #[test]
    fn a_missing_lease_is_created() {
        let mut observed = None;
        assert_eq!(
            decide("a", None, &mut observed, Instant::now()),
            Step::Create
        );
    }

    #[test]
    fn a_candidate_takes_over_only_after_the_lease_is_unchanged_for_its_duration_here() {
        let t0 = Instant::now();
        let mut observed = None;
        let lease = view("1", "b");
        let wait = Step::Wait { holder: "b".into() };
        // First sight starts the clock, whatever renewTime the Lease carries.
        assert_eq!(decide("a", Some(&lease), &mut observed, t0), wait);
        let almost = t0 + LEASE_DURATION - Duration::from_millis(1);
        assert_eq!(decide("a", Some(&lease), &mut observed, almost), wait);
        // A renewal (new resourceVersion) restarts the clock.
        let renewed = view("2", "b");
        assert_eq!(decide("a", Some(&renewed), &mut observed, almost), wait);
        let later = t0 + LEASE_DURATION + Duration::from_secs(1);
        assert_eq!(decide("a", Some(&renewed), &mut observed, later), wait);
        assert_eq!(
            decide("a", Some(&renewed), &mut observed, almost + LEASE_DURATION),
            Step::TakeOver
        );
    }

    #[test]
    fn a_released_lease_is_taken_over_at_once_and_the_holder_renews() {
        let t0 = Instant::now();
        let mut observed = None;
        assert_eq!(
            decide("a", Some(&view("3", "")), &mut observed, t0),
            Step::TakeOver
        );
        assert_eq!(
            decide("a", Some(&view("4", "a")), &mut observed, t0),
            Step::Renew
        );
    }

    #[test]
    fn the_written_spec_counts_transitions_and_keeps_the_acquire_time_on_renewal() {
        let t1 = Timestamp::from_second(1_000).unwrap();
        let t2 = Timestamp::from_second(1_007).unwrap();
        let created = next_spec("a", &Step::Create, None, t1).unwrap();
        assert_eq!(created.holder_identity.as_deref(), Some("a"));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.lease_duration_seconds, Some(15));
        let renewed = next_spec("a", &Step::Renew, Some(&created), t2).unwrap();
        assert_eq!(renewed.acquire_time, Some(MicroTime(t1)));
        assert_eq!(renewed.renew_time, Some(MicroTime(t2)));
        assert_eq!(renewed.lease_transitions, Some(0));
        let taken = next_spec("b", &Step::TakeOver, Some(&renewed), t2).unwrap();
        assert_eq!(taken.holder_identity.as_deref(), Some("b"));
        assert_eq!(taken.acquire_time, Some(MicroTime(t2)));
        assert_eq!(taken.lease_transitions, Some(1));
        let wait = Step::Wait { holder: "b".into() };
        assert_eq!(next_spec("c", &wait, Some(&taken), t2), None);
    }

    #[test]
    fn a_release_clears_the_holder_and_keeps_the_transitions() {
        let t = Timestamp::from_second(2_000).unwrap();
        let held = next_spec("a", &Step::TakeOver, None, t).unwrap();
        let released = released_spec(&held, t);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, held.lease_transitions);
    }
}
