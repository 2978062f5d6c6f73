//! The worker's own communicator on `backend: hccl`, through the worker library's
//! [`Session`] exactly as an engine uses it: wait for the agent's placement in an epoch,
//! build that epoch's HCCL communicator beside the serving one, switch to it (the
//! reference worker's requests hold no collective, so any moment is a safe point), check it
//! with a one-element all-reduce whose sum must be the epoch's size, and only then count
//! it as serving. The first checked communicator is what lets the worker report
//! `serving` (see [`WorkerState::is_ready`]): on an HCCL group no member takes traffic
//! before its device communicator has proven it works with every other member's.
//!
//! A worker that has never served and whose build, switch or check fails tells its agent
//! it cannot serve (`cannot_serve`): the member's join fails at once with that reason and
//! the operator replaces it, instead of the agent waiting out its worker-ready timeout.
//! The rendezvous cannot say which rank broke it, so a joiner is blamed for a failed first
//! epoch, as for any failed join; its replacement starts clean.
//!
//! Between epochs the serving communicator is health-checked (`HcclGetCommAsyncError`,
//! and whether a failed collective aborted it). Failures of a member that serves are
//! counted and logged, never reported as `cannot_serve` (a serving member ends only
//! through a drain); the serving communicator stays until a newer epoch replaces it.
//!
//! On `backend: tcp` nothing is built: the agents' domain already proves the links, and
//! the requests here run no collective.

use std::sync::Arc;
use std::time::Duration;

use hcomm_crds::local_api::WorkerBackend;
use hcomm_worker::{Error as WorkerError, Session};

use super::state::WorkerState;

/// How long one `prepare` waits for a newer placement before a health check runs.
const PLACEMENT_WAIT: Duration = Duration::from_secs(5);
/// Pause after a failure before the next attempt (a fresh placement usually follows).
const RETRY: Duration = Duration::from_millis(500);
/// How often the task looks again while the assignment does not say `hccl`.
const IDLE: Duration = Duration::from_millis(200);

/// Runs for the worker's life (ended by aborting the task; the worker's shutdown then
/// destroys the communicators with `Session::leave`).
pub async fn run(state: Arc<WorkerState>, session: Arc<Session>) {
    loop {
        if state.backend() != Some(WorkerBackend::Hccl) || state.admission().draining {
            // A draining member keeps its serving communicator for the requests still in
            // flight, and is placed in no newer epoch.
            tokio::time::sleep(IDLE).await;
            continue;
        }
        match session.prepare(PLACEMENT_WAIT).await {
            Ok(epoch) => match switch_and_check(&session).await {
                Ok(world) => {
                    tracing::info!(epoch, world, "HCCL communicator checked; it serves");
                    state.comm_serving(epoch);
                }
                Err(e) => fail(&state, &session, format!("epoch {epoch}: {e}")).await,
            },
            Err(WorkerError::Timeout { .. }) => {
                if let Err(e) = session.health_check().await {
                    fail(&state, &session, format!("health check: {e}")).await;
                }
            }
            Err(e @ WorkerError::Epoch(_)) => tracing::info!(error = %e, "preparing again"),
            Err(e) => fail(&state, &session, format!("prepare: {e}")).await,
        }
    }
}

/// Switches to the prepared communicator and checks it: every member of the epoch does
/// exactly one all-reduce of 1.0 right after its switch, so the calls match across ranks
/// and the sum is the number of members. Returns that number.
async fn switch_and_check(session: &Session) -> Result<usize, WorkerError> {
    session.switch().await?;
    let mut one = [1.0f32];
    session.all_reduce_sum_f32(&mut one).await?;
    session.health_check().await?;
    let world = session.serving_world()?;
    if one[0] != world as f32 {
        return Err(WorkerError::Invalid(format!(
            "check all-reduce summed to {}, not the epoch's {world} members",
            one[0]
        )));
    }
    Ok(world)
}

async fn fail(state: &WorkerState, session: &Session, error: String) {
    tracing::warn!(%error, "worker communicator");
    let never_served = state.comm().serving_epoch.is_none();
    if never_served {
        let reason = format!("HCCL communicator: {error}");
        if let Err(e) = session.cannot_serve(&reason).await {
            tracing::warn!(error = %e, "could not tell the agent this worker cannot serve");
        }
    }
    state.comm_failed(error);
    tokio::time::sleep(RETRY).await;
}
