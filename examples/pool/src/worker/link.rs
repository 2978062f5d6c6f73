//! The worker's link to its node agent: the session (assignment, then the `watch` stream
//! and what its events mean) and the in-flight reporter. Both reconnect on their own when
//! the socket drops, with a bounded backoff; every exchange is bounded by
//! [`AgentClient::timeout`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::state::WorkerState;
use super::weights;
use crate::error::{Error, Result};
use hcomm_worker::{AgentClient, AgentEvent};

/// Timing of the agent link.
#[derive(Debug, Clone)]
pub struct LinkTiming {
    /// First wait after a failed attempt; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A watch stream silent this long is probed with a `weights_ready` request on a fresh
    /// connection: a dead agent (or a stuck one) is noticed, and the stream reopened.
    pub watch_idle: Duration,
}

impl Default for LinkTiming {
    fn default() -> Self {
        LinkTiming {
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            watch_idle: Duration::from_secs(15),
        }
    }
}

/// Exponential backoff between `min` and `max`, reset on success.
struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    fn new(t: &LinkTiming) -> Backoff {
        Backoff {
            next: t.backoff_min,
            min: t.backoff_min,
            max: t.backoff_max,
        }
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }

    fn reset(&mut self) {
        self.next = self.min;
    }
}

/// Runs the session forever: get the assignment (retried until the member is verified),
/// open `watch`, act on events; on any failure start over after a backoff.
pub async fn run_session(state: Arc<WorkerState>, agent: AgentClient, timing: LinkTiming) {
    let mut backoff = Backoff::new(&timing);
    loop {
        match session(&state, &agent, &timing, &mut backoff).await {
            Ok(()) => tracing::info!("agent closed the watch stream; reconnecting"),
            Err(e) => tracing::info!(error = %e, "agent session ended; reconnecting"),
        }
        backoff.wait().await;
    }
}

async fn session(
    state: &Arc<WorkerState>,
    agent: &AgentClient,
    timing: &LinkTiming,
    backoff: &mut Backoff,
) -> Result<()> {
    // The assignment is there only once the agent has verified the member; until then
    // the agent answers an error, and each attempt is bounded.
    // A refusal ("not verified yet") is the normal wait before a join: poll it at the
    // shortest interval (a local socket round trip), so the worker is assigned, loaded and
    // serving soon after the agent is ready; only a failing agent gets the growing backoff.
    let assignment = loop {
        match agent.assignment().await {
            Ok(a) => break a,
            Err(e @ hcomm_worker::Error::AgentRefused { .. }) => {
                tracing::debug!(error = %e, "assignment not available yet");
                tokio::time::sleep(timing.backoff_min).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "agent not answering");
                backoff.wait().await;
            }
        }
    };
    tracing::info!(group = %assignment.group, rank = assignment.rank, epoch = assignment.epoch, "assignment");
    state.set_assignment(assignment);
    let mut stream = agent.watch().await?;
    backoff.reset();
    // A reconnect (e.g. a restarted agent): say again that the worker serves.
    if state.is_ready() {
        agent.serving().await?;
    }
    loop {
        let event = match tokio::time::timeout(timing.watch_idle, stream.next_event()).await {
            Ok(r) => r?,
            Err(_) => {
                // Quiet for a while: prove the agent is alive (bounded), and pick up
                // weights readiness in case an event was missed.
                let w = agent.weights_ready().await?;
                if w.ready {
                    maybe_load(state, agent, w.path);
                }
                continue;
            }
        };
        match event {
            None => return Ok(()),
            Some(AgentEvent::WeightsReady { path }) => maybe_load(state, agent, path),
            Some(AgentEvent::DrainRequested { deadline }) => {
                tracing::info!(?deadline, "drain requested: taking no new work");
                state.request_drain();
            }
            Some(AgentEvent::EpochChanged { epoch }) => {
                tracing::info!(epoch, "epoch changed");
                state.set_epoch(epoch);
            }
            Some(AgentEvent::Unknown) => tracing::debug!("unknown agent event ignored"),
        }
    }
}

/// Starts the weights load in the background unless weights are loaded (they are pinned
/// for the worker's life) or a load is running. Kept off the event loop so a drain is
/// heard while a large set is being hashed.
fn maybe_load(state: &Arc<WorkerState>, agent: &AgentClient, path: Option<String>) {
    if !state.begin_load() {
        if let (Some(w), Some(p)) = (state.weights(), &path) {
            tracing::debug!(path = %p, pinned = ?w.dir, "weights_ready again; keeping the pinned set");
        }
        return;
    }
    let state = Arc::clone(state);
    let agent = agent.clone();
    tokio::spawn(async move {
        let p = path.clone().map(PathBuf::from);
        let result = tokio::task::spawn_blocking(move || weights::load(p.as_deref()))
            .await
            .map_err(|e| format!("load task: {e}"))
            .and_then(|r| r.map_err(|e| e.to_string()));
        match &result {
            Ok(w) => {
                tracing::info!(path = ?path, dir = ?w.dir, digest = %w.digest, "weights loaded")
            }
            Err(e) => tracing::warn!(path = ?path, error = %e, "weights load failed"),
        }
        let loaded = result.is_ok();
        state.finish_load(result);
        if !loaded {
            return;
        }
        // On `backend: hccl` the device communicator must serve too (`communicator`).
        state.ready().await;
        // Only now may traffic come: tell the agent (which then opens the readiness gate
        // of a Pod annotated `hcomm.io/worker-readiness: local-api`). A failure here is
        // retried by the next session, which repeats it once ready.
        if let Err(e) = agent.serving().await {
            tracing::warn!(error = %e, "could not report serving to the agent");
        }
    });
}

/// Reports requests in flight to the agent on every change, over one kept connection.
///
/// Bursts coalesce naturally: the watch channel holds only the latest value, and one
/// report is in flight at a time, so the last value (0 when idle) is always sent. A drain
/// also triggers a report. After a failure the connection is reopened and the CURRENT
/// value re-sent (an agent that restarted has forgotten it).
pub async fn run_reporter(state: Arc<WorkerState>, agent: AgentClient, timing: LinkTiming) {
    let mut rx = state.subscribe();
    let mut conn = None;
    let mut sent: Option<(u64, bool)> = None;
    let mut backoff = Backoff::new(&timing);
    loop {
        let a = *rx.borrow_and_update();
        let now = (a.inflight, a.draining);
        if sent != Some(now) {
            match report(&agent, &mut conn, a.inflight).await {
                Ok(()) => {
                    sent = Some(now);
                    backoff.reset();
                }
                Err(e) => {
                    tracing::debug!(error = %e, n = a.inflight, "report_inflight failed; retrying");
                    if !matches!(e, Error::Agent(hcomm_worker::Error::AgentRefused { .. })) {
                        conn = None;
                    }
                    sent = None;
                    backoff.wait().await;
                    continue;
                }
            }
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

async fn report(
    agent: &AgentClient,
    conn: &mut Option<hcomm_worker::AgentConn>,
    n: u64,
) -> Result<()> {
    if conn.is_none() {
        *conn = Some(agent.connect().await?);
    }
    Ok(conn
        .as_mut()
        .expect("connection opened above")
        .report_inflight(n)
        .await?)
}
