//! SIGTERM, through hcomm's drain: a member Pod deleted directly (`kubectl delete pod`,
//! an eviction the group's budget let through, a node shutting down) ends the way an
//! operator-requested drain does — gate off, requests in flight to 0, leave the epoch —
//! within the Pod's `terminationGracePeriodSeconds`.
//!
//! The agent learns of the drain from the Pod itself (its deletion timestamp turns the
//! readiness gate off and starts the member's drain, as the drain annotation does); what
//! it needs from the worker is the in-flight count, so the worker reports it over the
//! local API at once, then takes no new request (a 503 `draining`, which the router
//! retries on another member while the Pod's endpoint is still listed) and keeps its
//! listener open until the requests in flight are done — a closed port would turn the
//! router's next attempt into a connection error instead of a quick refusal. The count
//! reaching 0 is what lets the agent leave the epoch; then the worker stops.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Worker;
use super::state::WorkerState;
use crate::error::Result;

/// Drains `worker` and stops it, all within its shutdown grace (`--shutdown-grace`,
/// below the Pod's `terminationGracePeriodSeconds`).
pub async fn drain_and_stop(mut worker: Worker) -> Result<()> {
    let deadline = Instant::now() + worker.grace;
    worker.state.request_drain();
    let inflight = worker.state.admission().inflight;
    // The reporter sends the count too (a drain wakes it); this one does not wait for a
    // reporter that may be reconnecting. Bounded by the client's timeout; best effort.
    let told = async {
        worker
            .agent
            .connect()
            .await?
            .report_inflight(inflight)
            .await
    };
    match told.await {
        Ok(()) => tracing::info!(inflight, "SIGTERM: draining; told the agent"),
        Err(e) => {
            tracing::warn!(error = %e, inflight, "SIGTERM: draining; the agent did not hear it")
        }
    }
    let idle = wait_idle(
        &worker.state,
        deadline.saturating_duration_since(Instant::now()),
    )
    .await;
    if !idle {
        tracing::warn!(
            inflight = worker.state.admission().inflight,
            "requests still in flight at the shutdown grace"
        );
    }
    // What is left of the grace bounds the server's own stop.
    worker.grace = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    worker.shutdown().await
}

/// Waits until no request is in flight, at most `within`; whether that happened.
pub async fn wait_idle(state: &Arc<WorkerState>, within: Duration) -> bool {
    let mut admission = state.subscribe();
    tokio::time::timeout(within, admission.wait_for(|a| a.inflight == 0))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::state::{Admit, LoadedWeights};
    use hcomm_worker::Assignment;

    #[tokio::test]
    async fn idle_is_reached_when_the_last_request_in_flight_ends_and_not_before() {
        let state = WorkerState::new("w-0", "decode");
        state.set_assignment(Assignment::default());
        state.finish_load(Ok(LoadedWeights {
            dir: None,
            digest: "none".into(),
        }));
        let Admit::Accepted(guard) = state.admit() else {
            panic!("a ready worker admits");
        };
        state.request_drain();
        assert!(matches!(state.admit(), Admit::Draining));
        assert!(!wait_idle(&state, Duration::from_millis(50)).await);
        let ends = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            drop(guard);
        });
        assert!(wait_idle(&state, Duration::from_secs(5)).await);
        ends.await.unwrap();
    }
}
