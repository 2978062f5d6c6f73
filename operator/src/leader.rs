//! Leader election on a `coordination.k8s.io/v1` Lease, with the Lease API directly.
//!
//! A candidate creates the Lease, or takes it over when its holder let it expire
//! (`renewTime + leaseDurationSeconds` in the past, or no holder); the holder renews it
//! every [`RENEW_EVERY`]. Every write is a `replace` carrying the `resourceVersion` read
//! just before, so two candidates cannot both win: the loser gets a conflict. A leader that
//! cannot renew within [`RENEW_DEADLINE`] stops acting (it returns [`Error::LeaseLost`]);
//! on graceful shutdown it clears `holderIdentity` so another replica takes over at once.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;
use tracing::{debug, info, warn};

use crate::error::{Error, Result};

/// How long a Lease is valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the leader renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How long the leader keeps acting without a successful renewal.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often a candidate retries.
pub const RETRY_EVERY: Duration = Duration::from_secs(2);

/// One replica's side of the election.
#[derive(Clone)]
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
}

impl Elector {
    /// An elector for Lease `namespace/name` under `identity`.
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
        }
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    info!(lease = %self.lease_ref(), identity = %self.identity, "acquired leader lease");
                    return;
                }
                Ok(false) => debug!(lease = %self.lease_ref(), "lease held by another replica"),
                Err(error) => warn!(%error, "leader election attempt failed"),
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    }

    /// Renews the Lease until it is lost; returns the reason.
    pub async fn keep(&self) -> Error {
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewed = tokio::time::Instant::now(),
                Ok(false) => break,
                Err(error) => {
                    warn!(%error, "renewing the leader lease failed");
                    if last_renewed.elapsed() >= RENEW_DEADLINE {
                        break;
                    }
                }
            }
        }
        warn!(lease = %self.lease_ref(), "lost the leader lease");
        Error::LeaseLost {
            lease: self.lease_ref(),
        }
    }

    /// Gives the Lease up (when held) so another replica takes over without waiting.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.lease_ref(), "released leader lease"),
            Err(error) => warn!(%error, "could not release the leader lease"),
        }
    }

    /// One round: create, renew or take over the Lease. `Ok(false)`: someone else holds it
    /// (or won the race).
    pub async fn try_acquire_or_renew(&self) -> Result<bool> {
        let now = Timestamp::now();
        let existing = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(Error::kube("read leader lease"))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, None, 0)),
            };
            return self.write(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let next = if holder == self.identity {
            LeaseSpec {
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
                ..spec
            }
        } else if holder.is_empty() || expired(&spec, now) {
            info!(previous = %holder, "taking over the leader lease");
            self.spec(now, None, spec.lease_transitions.unwrap_or(0) + 1)
        } else {
            return Ok(false);
        };
        lease.spec = Some(next);
        // `lease.metadata.resourceVersion` is what was read: a concurrent write conflicts.
        self.write(
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await,
        )
    }

    fn spec(&self, now: Timestamp, acquired: Option<Timestamp>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: Some(MicroTime(acquired.unwrap_or(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn write(&self, result: kube::Result<Lease>) -> Result<bool> {
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(Error::Kube {
                action: "write leader lease".into(),
                source: error,
            }),
        }
    }
}

/// Whether the Lease's holder failed to renew in time.
pub fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time else {
        return true;
    };
    let duration = SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(0).into());
    now.duration_since(renewed) > duration
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_only_after_its_duration_without_renewal() {
        let renewed = Timestamp::from_second(1_000).unwrap();
        let spec = LeaseSpec {
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        assert!(!expired(&spec, Timestamp::from_second(1_014).unwrap()));
        assert!(expired(&spec, Timestamp::from_second(1_016).unwrap()));
        assert!(expired(&LeaseSpec::default(), renewed));
    }
}
