//! Prometheus metrics (prefix `hcomm_operator_`) and the `/metrics`, `/healthz`, `/readyz`
//! server. One registry per process; the server takes its listener and a shutdown future.
//!
//! The server's port is reachable from every Pod of the cluster (Prometheus scrapes it, the
//! kubelet probes it), tenants' Pods included. Its connections are admitted as the agent's
//! are (`hcomm_comm::http_listener`): a few per address, a bounded total, closed when idle
//! or old, so idle or trickling connections cannot hold the operator's descriptors and
//! tasks (issue 17). Refusals are counted in `hcomm_operator_listener_refused_total`.

use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use tokio::net::TcpListener;

use hcomm_comm::http_listener::{GuardedListener, SCRAPE_CONNECTION_LIFETIME, SCRAPE_LIMITS};
use hcomm_comm::listen::{Guard, Limits, Refusal};
use hcomm_crds::MemberPhase;

use crate::links::LinkCounts;
use crate::readiness::Readiness;

/// Every metric the operator exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Reconciles started.
    pub reconciles: IntCounter,
    /// Reconciles deferred, without an API call, until the Pod cache shows the group's
    /// own writes (`crate::cache`); not counted in `reconciles` nor timed in `duration`.
    pub deferred: IntCounter,
    /// Reconcile errors by category.
    pub errors: IntCounterVec,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// The operator's Kubernetes API calls, by verb and resource (`crate::api_timing`).
    pub api_requests: HistogramVec,
    /// Events dropped because the publisher's queue was full (`hcomm_events`).
    pub events_dropped: IntCounter,
    /// Event writes the apiserver refused or that failed.
    pub event_write_failures: IntCounter,
    /// Group status writes that failed, each try (`crate::status_writer`).
    pub status_write_failures: IntCounter,
    /// Rounds whose member Pod creates failed, by the API server's status code
    /// (`crate::create_failures`).
    pub create_failures: IntCounterVec,
    /// Members by group and phase.
    pub members: IntGaugeVec,
    /// Seconds from a member's creation (the scale request that planned it) to Ready.
    pub scale_to_ready: Histogram,
    /// 1 while this replica holds the leader Lease.
    pub leader: IntGauge,
    /// Directed links between a group's member nodes, by state.
    pub links: IntGaugeVec,
    /// Admission of the metrics and probe listener.
    pub listener: Arc<Guard>,
    /// Connections the listener closed unserved, by reason (folded from `listener`).
    listener_refused: IntCounterVec,
    /// Connections the listener holds now.
    listener_open: IntGauge,
    /// Serialises folding `listener`'s counters (concurrent scrapes).
    fold: Arc<Mutex<()>>,
}

/// The `state` label values of [`Metrics::links`].
const LINK_STATES: [&str; 4] = ["up", "degraded", "down", "unknown"];

const PHASES: [MemberPhase; 9] = [
    MemberPhase::Pending,
    MemberPhase::Verifying,
    MemberPhase::Syncing,
    MemberPhase::Joining,
    MemberPhase::Standby,
    MemberPhase::Ready,
    MemberPhase::Draining,
    MemberPhase::Leaving,
    MemberPhase::Failed,
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric; the listener admits by [`SCRAPE_LIMITS`].
    pub fn new() -> Self {
        Self::with_listener_limits(SCRAPE_LIMITS)
    }

    /// [`Metrics::new`] with the listener's caps and deadlines given (tests shorten them).
    pub fn with_listener_limits(limits: Limits) -> Self {
        let registry =
            Registry::new_custom(Some("hcomm_operator".into()), None).expect("valid prefix");
        let reconciles = IntCounter::new("reconciles_total", "Reconciles started.").expect("valid");
        let deferred = IntCounter::new(
            "reconciles_deferred_total",
            "Reconciles deferred until the watch cache shows the group's own Pod writes \
             (no API call made; not in reconciles_total).",
        )
        .expect("valid");
        let errors = IntCounterVec::new(
            Opts::new("reconcile_errors_total", "Reconcile errors by category."),
            &["category"],
        )
        .expect("valid");
        let duration = Histogram::with_opts(
            HistogramOpts::new("reconcile_duration_seconds", "Reconcile duration.").buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )
        .expect("valid");
        let api_requests = crate::api_timing::histogram();
        let events_dropped = IntCounter::new(
            "events_dropped_total",
            "Kubernetes Events dropped unwritten: the publisher's queue was full.",
        )
        .expect("valid");
        let event_write_failures = IntCounter::new(
            "event_write_failures_total",
            "Kubernetes Event writes that failed (logged; not retried).",
        )
        .expect("valid");
        let status_write_failures = IntCounter::new(
            "status_write_failures_total",
            "HcommGroup status writes that failed, each try (logged; tried again unless a \
             newer status replaces it or the group is gone).",
        )
        .expect("valid");
        let create_failures = IntCounterVec::new(
            Opts::new(
                "member_create_failures_total",
                "Reconciles whose member Pod creates failed (a quota, admission or a webhook \
                 refused them, or no answer came), by the API server's status code (none: no \
                 answer); the group's Degraded condition says why.",
            ),
            &["code"],
        )
        .expect("valid");
        let members = IntGaugeVec::new(
            Opts::new("members", "Members by group and phase."),
            &["namespace", "group", "phase"],
        )
        .expect("valid");
        let scale_to_ready = Histogram::with_opts(
            HistogramOpts::new(
                "scale_to_ready_seconds",
                "Seconds from the scale request that planned a member to the member being Ready.",
            )
            .buckets(vec![
                0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
            ]),
        )
        .expect("valid");
        let leader =
            IntGauge::new("leader", "1 while this replica holds the leader Lease.").expect("valid");
        let links = IntGaugeVec::new(
            Opts::new(
                "group_links",
                "Directed links between the nodes of a group's members, by the state of their \
                 latest probe (up, degraded: slow, down, unknown: no recent probe).",
            ),
            &["namespace", "group", "state"],
        )
        .expect("valid");
        let listener_refused = IntCounterVec::new(
            Opts::new(
                "listener_refused_total",
                "Connections the metrics and probe listener closed unserved, by reason \
                 (per_peer_cap, total_cap, deadline, idle).",
            ),
            &["reason"],
        )
        .expect("valid");
        let listener_open = IntGauge::new(
            "listener_open_connections",
            "Connections the metrics and probe listener holds now.",
        )
        .expect("valid");
        for collector in [
            Box::new(listener_refused.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(listener_open.clone()),
            Box::new(reconciles.clone()),
            Box::new(deferred.clone()),
            Box::new(errors.clone()),
            Box::new(duration.clone()),
            Box::new(api_requests.clone()),
            Box::new(events_dropped.clone()),
            Box::new(event_write_failures.clone()),
            Box::new(status_write_failures.clone()),
            Box::new(create_failures.clone()),
            Box::new(members.clone()),
            Box::new(scale_to_ready.clone()),
            Box::new(leader.clone()),
            Box::new(links.clone()),
        ] {
            registry.register(collector).expect("unique metric");
        }
        Self {
            registry,
            reconciles,
            deferred,
            errors,
            duration,
            api_requests,
            events_dropped,
            event_write_failures,
            status_write_failures,
            create_failures,
            members,
            scale_to_ready,
            leader,
            links,
            listener: Guard::new("metrics", limits),
            listener_refused,
            listener_open,
            fold: Arc::default(),
        }
    }

    /// Folds the listener's admission counters into the exported metrics.
    fn fold_listener(&self) {
        let _one_at_a_time = self.fold.lock().unwrap_or_else(|e| e.into_inner());
        let counts = self.listener.counts();
        for reason in Refusal::ALL {
            let counter = self.listener_refused.with_label_values(&[reason.label()]);
            let seen = counts.refused(reason);
            if seen > counter.get() {
                counter.inc_by(seen - counter.get());
            }
        }
        self.listener_open.set(counts.open as i64);
    }

    /// Sets the link gauges of one group (every state, zeros included, so an alert on
    /// `state="down"` sees the recovery).
    pub fn set_links(&self, namespace: &str, group: &str, counts: LinkCounts) {
        let values = [counts.up, counts.degraded, counts.down, counts.unknown];
        for (state, value) in LINK_STATES.into_iter().zip(values) {
            self.links
                .with_label_values(&[namespace, group, state])
                .set(value);
        }
    }

    /// Sets the members-by-phase gauges of one group (every phase, zeros included).
    pub fn set_members(&self, namespace: &str, group: &str, phases: &[MemberPhase]) {
        for phase in PHASES {
            let count = phases.iter().filter(|p| **p == phase).count() as i64;
            let phase = phase.to_string();
            self.members
                .with_label_values(&[namespace, group, phase.as_str()])
                .set(count);
        }
    }

    /// Drops the gauges of a deleted group.
    pub fn forget_group(&self, namespace: &str, group: &str) {
        for phase in PHASES {
            let phase = phase.to_string();
            let _ = self
                .members
                .remove_label_values(&[namespace, group, phase.as_str()]);
        }
        for state in LINK_STATES {
            let _ = self.links.remove_label_values(&[namespace, group, state]);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.fold_listener();
        let mut buffer = Vec::new();
        let encoder = TextEncoder::new();
        if encoder
            .encode(&self.registry.gather(), &mut buffer)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until `shutdown` completes,
/// admitting connections through `metrics.listener` with its deadlines. `/readyz` answers
/// from `readiness` (503 until ready; see [`crate::readiness`]).
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let readyz = get(move || async move {
        let (ready, body) = readiness.verdict();
        let status = if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, body)
    });
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", readyz)
        .with_state(metrics.clone());
    let guarded = GuardedListener::new(
        listener,
        metrics.listener.clone(),
        SCRAPE_CONNECTION_LIFETIME,
    );
    axum::serve(guarded, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn render(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Reads until the peer closes or fails the connection, within `within`; false if
    /// it is still open then.
    async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 256];
        let read = async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(within, read).await.is_ok()
    }

    /// GET `path` on a fresh connection: the status line.
    async fn get_status(addr: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
            .await
            .expect("answered within 5 s")
            .unwrap();
        out.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn idle_connections_beyond_an_address_share_are_refused_and_the_rest_time_out() {
        let limits = Limits {
            per_peer: 2,
            total: 8,
            handshake: Duration::from_millis(300),
            idle: Duration::from_millis(300),
        };
        let metrics = Arc::new(Metrics::with_listener_limits(limits));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            metrics.clone(),
            Arc::new(Readiness::default()),
            async move {
                let _ = stopped.await;
            },
        ));
        // Two idle connections take this address's share; a third is closed at once.
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            closed_within(&mut third, Duration::from_secs(2)).await,
            "a third connection from one address was kept"
        );
        // The idle two are closed after the idle deadline; then the address is served.
        for s in &mut idle {
            assert!(
                closed_within(s, Duration::from_secs(5)).await,
                "an idle connection was kept past its deadline"
            );
        }
        assert!(get_status(addr, "/healthz").await.contains("200"));
        let text = metrics.render();
        for line in [
            r#"hcomm_operator_listener_refused_total{reason="per_peer_cap"} 1"#,
            r#"hcomm_operator_listener_refused_total{reason="idle"} 2"#,
        ] {
            assert!(text.contains(line), "no {line} in:\n{text}");
        }
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }

    #[test]
    fn metrics_render_in_text_format_with_the_prefix() {
        let metrics = Metrics::new();
        metrics.reconciles.inc();
        metrics.errors.with_label_values(&["Conflict"]).inc();
        metrics.set_members("ns", "g", &[MemberPhase::Ready, MemberPhase::Ready]);
        metrics.set_links(
            "ns",
            "g",
            LinkCounts {
                up: 1,
                down: 1,
                ..LinkCounts::default()
            },
        );
        let text = metrics.render();
        assert!(
            text.contains(
                "hcomm_operator_group_links{group=\"g\",namespace=\"ns\",state=\"down\"} 1"
            )
        );
        assert!(text.contains(
            "hcomm_operator_group_links{group=\"g\",namespace=\"ns\",state=\"unknown\"} 0"
        ));
        assert!(text.contains("hcomm_operator_reconciles_total 1"));
        assert!(text.contains("hcomm_operator_reconcile_errors_total{category=\"Conflict\"} 1"));
        assert!(
            text.contains("hcomm_operator_members{group=\"g\",namespace=\"ns\",phase=\"Ready\"} 2")
        );
    }
}
