//! `hcomm-worker`: the reference inference worker.
//!
//! ```text
//! hcomm-worker [--pod NAME] [--namespace NS] [--listen IP:PORT] [--agent-socket PATH]
//!              [--step-ms MS] [--role ROLE] [--max-tokens N] [--shutdown-grace DUR]
//!              [--agent-timeout DUR]
//! ```
//! Environment fallbacks (downward API): `POD_NAME`, `POD_NAMESPACE`; listen address
//! `HCOMM_WORKER_LISTEN`, else `$POD_IP:8080`, else `0.0.0.0:8080`; `HCOMM_AGENT_SOCKET`,
//! else `/run/hcomm/agent.sock`.
//!
//! Modules: [`state`] (admission, counters, pinned weights), [`weights`] (pin and
//! digest), [`link`] (agent session and in-flight reporter), [`communicator`] (the HCCL
//! communicator of `backend: hccl`, through the worker library), [`http`] (the API),
//! [`metrics`] (load signals for autoscalers on `/metrics`), [`shutdown`] (SIGTERM through
//! hcomm's drain).

pub mod communicator;
pub mod http;
pub mod link;
pub mod metrics;
pub mod shutdown;
pub mod state;
pub mod weights;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use link::LinkTiming;
pub use state::{WorkerState, WorkerStats};

use crate::error::{Error, Result};
use hcomm_worker::{AgentClient, Session};

/// Default agent socket (the chart's `--socket`).
pub const DEFAULT_AGENT_SOCKET: &str = "/run/hcomm/agent.sock";

/// The worker's configuration.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub pod: String,
    pub namespace: Option<String>,
    pub listen: SocketAddr,
    pub agent_socket: PathBuf,
    /// Time per generated token.
    pub step: Duration,
    pub role: String,
    pub max_tokens: u32,
    /// How long SIGTERM waits for requests in flight.
    pub shutdown_grace: Duration,
    /// Bound of one exchange with the agent.
    pub agent_timeout: Duration,
    pub timing: LinkTiming,
}

impl WorkerConfig {
    /// A configuration with the documented defaults.
    pub fn new(pod: impl Into<String>, listen: SocketAddr, agent_socket: PathBuf) -> Self {
        WorkerConfig {
            pod: pod.into(),
            namespace: None,
            listen,
            agent_socket,
            step: Duration::from_millis(20),
            role: "generic".into(),
            max_tokens: 4096,
            shutdown_grace: Duration::from_secs(25),
            agent_timeout: Duration::from_secs(2),
            timing: LinkTiming::default(),
        }
    }

    fn agent(&self) -> AgentClient {
        AgentClient {
            socket: self.agent_socket.clone(),
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
            timeout: self.agent_timeout,
        }
    }
}

/// `$POD_IP:8080` (brackets for IPv6), else all interfaces.
pub fn default_listen(pod_ip: Option<&str>) -> String {
    match pod_ip.filter(|ip| !ip.is_empty()) {
        Some(ip) if ip.contains(':') => format!("[{ip}]:8080"),
        Some(ip) => format!("{ip}:8080"),
        None => "0.0.0.0:8080".into(),
    }
}

/// A running worker: HTTP server plus agent link.
pub struct Worker {
    addr: SocketAddr,
    state: Arc<WorkerState>,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    link: Vec<JoinHandle<()>>,
    agent: AgentClient,
    session: Arc<Session>,
    grace: Duration,
}

/// Binds the HTTP listener and starts serving and the agent link. Returns at once: the
/// worker answers 503 `not ready` until the agent says the weights are in place.
pub async fn start(cfg: WorkerConfig) -> Result<Worker> {
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(Error::io(format!("listen on {}", cfg.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(Error::io("listener address"))?;
    let state = WorkerState::new(cfg.pod.clone(), cfg.role.clone());
    let agent = cfg.agent();
    let session = Arc::new(Session::new(agent.clone()));
    let link = vec![
        tokio::spawn(link::run_session(
            Arc::clone(&state),
            agent.clone(),
            cfg.timing.clone(),
        )),
        tokio::spawn(link::run_reporter(
            Arc::clone(&state),
            agent.clone(),
            cfg.timing.clone(),
        )),
        tokio::spawn(communicator::run(Arc::clone(&state), Arc::clone(&session))),
    ];
    let app = http::router(http::Api {
        state: Arc::clone(&state),
        step: cfg.step,
        max_tokens: cfg.max_tokens,
        metrics: metrics::WorkerMetrics::new(Arc::clone(&state)),
    });
    let (stop, mut stop_rx) = watch::channel(false);
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            })
            .await
    });
    tracing::info!(%addr, pod = %cfg.pod, socket = %cfg.agent_socket.display(), "worker listening");
    Ok(Worker {
        addr,
        state,
        stop,
        server,
        link,
        agent,
        session,
        grace: cfg.shutdown_grace,
    })
}

impl Worker {
    /// The bound HTTP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (counters, admission).
    pub fn state(&self) -> &Arc<WorkerState> {
        &self.state
    }

    /// SIGTERM behaviour: take no new work, stop accepting connections, let requests in
    /// flight finish (at most the shutdown grace), tell the agent the final count, stop.
    pub async fn shutdown(self) -> Result<()> {
        self.state.request_drain();
        let _ = self.stop.send(true);
        let mut server = self.server;
        let outcome = tokio::time::timeout(self.grace, &mut server).await;
        let result = match outcome {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(Error::io("HTTP server")(e)),
            Ok(Err(e)) => Err(Error::Config(format!("HTTP server task: {e}"))),
            Err(_) => {
                tracing::warn!(
                    inflight = self.state.admission().inflight,
                    grace = ?self.grace,
                    "requests still in flight after the shutdown grace; stopping anyway"
                );
                server.abort();
                Ok(())
            }
        };
        // The reporter normally sent it already; this one is bounded and best effort.
        let n = self.state.admission().inflight;
        let final_report = async {
            let mut conn = self.agent.connect().await?;
            conn.report_inflight(n).await
        };
        if let Err(e) = final_report.await {
            tracing::debug!(error = %e, n, "final in-flight report not delivered");
        }
        for task in self.link {
            task.abort();
        }
        // Destroy the communicators, so that no device memory is left to HCCL.
        self.session.leave().await;
        tracing::info!(served = self.state.stats().served, "worker stopped");
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listen_default_is_the_pod_ip() {
        assert_eq!(default_listen(Some("10.0.0.7")), "10.0.0.7:8080");
        assert_eq!(default_listen(Some("fd00::7")), "[fd00::7]:8080");
        assert_eq!(default_listen(None), "0.0.0.0:8080");
        assert_eq!(default_listen(Some("")), "0.0.0.0:8080");
    }
}
