//! What every scenario checks of the load it ran under.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use hcomm_crds::contract::PodReason;
use hcomm_e2e::testbed::examples::NAMESPACE as NS;
use hcomm_e2e::testbed::{LoadStats, Testbed};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

/// No request failed, none was answered with wrong, missing or mixed weights, and no
/// router reached a member before its readiness gate was True
/// ([`LoadStats::ensure_clean`]).
pub fn clean(s: &LoadStats, when: &str) -> Result<()> {
    s.ensure_clean(when).map_err(anyhow::Error::msg)
}

/// A Warning Event on `pod` saying verification failed, its message starting with
/// `reason`. The agent posts it after the condition patch, so it may trail the condition a
/// moment: it is waited for, within a bound.
pub async fn verification_warning(bed: &Testbed, pod: &str, reason: PodReason) -> Result<()> {
    let events: Api<Event> = Api::namespaced(bed.client().await?, NS);
    // The agent gives each API call 10 s; the Event comes after the condition.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = events
            .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(PodReason::VerificationFailed.as_str())
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.starts_with(reason.as_str()))
            });
        if found {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "no Warning {} Event on {pod} starting with {reason}",
            PodReason::VerificationFailed
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
