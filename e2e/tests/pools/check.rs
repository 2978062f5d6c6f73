//! What every scenario checks of the load it ran under.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use hcomm_crds::contract::PodReason;
use hcomm_e2e::testbed::examples::NAMESPACE as NS;
use hcomm_e2e::testbed::{ExamplePools, LoadStats, Testbed};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

/// No request failed, none was answered with wrong, missing or mixed weights, and no
/// router reached a member before its readiness gate was True
/// ([`LoadStats::ensure_clean`]).
pub fn clean(s: &LoadStats, when: &str) -> Result<()> {
    s.ensure_clean(when).map_err(anyhow::Error::msg)
}

/// Both example pools' loads are [`clean`] so far; `when` completes "decode …" and
/// "prefill …" in the message.
pub fn pools_clean(pools: &ExamplePools, when: &str) -> Result<()> {
    clean(&pools.decode_load.latest(), &format!("decode {when}"))?;
    clean(&pools.prefill_load.latest(), &format!("prefill {when}"))
}

/// A Warning Event on `pod` saying verification failed, its message starting with
/// `reason` (see [`warning_event`]).
pub async fn verification_warning(bed: &Testbed, pod: &str, reason: PodReason) -> Result<()> {
    warning_event(bed, pod, PodReason::VerificationFailed, |m| {
        m.starts_with(reason.as_str())
    })
    .await
    .map(drop)
}

/// A Warning Event on `pod` with `reason` whose message `matches`; returns the message.
/// The agent posts it after the condition patch, so it may trail the condition a moment:
/// it is waited for, within a bound.
pub async fn warning_event(
    bed: &Testbed,
    pod: &str,
    reason: PodReason,
    matches: impl Fn(&str) -> bool,
) -> Result<String> {
    let events: Api<Event> = Api::namespaced(bed.client().await?, NS);
    // The agent gives each API call 10 s; the Event comes after the condition.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = events
            .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
            .await?
            .items
            .into_iter()
            .find_map(|e| {
                let message = e.message?;
                (e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason.as_str())
                    && matches(&message))
                .then_some(message)
            });
        if let Some(message) = found {
            return Ok(message);
        }
        ensure!(
            Instant::now() < deadline,
            "no matching Warning {reason} Event on {pod}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
