//! The agent's Prometheus metrics: one registry, prefix `hcomm_agent_`, served on
//! `/metrics` (text format) beside `/healthz`.
//!
//! The metrics also hold the admission guards of the node's listeners ([`Listeners`]):
//! their counters become `hcomm_agent_listener_refused_total{listener,reason}` and
//! `hcomm_agent_listener_open{listener}` at every scrape, and the metrics listener itself
//! is guarded (`hcomm_comm::http_listener`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hcomm_comm::http_listener::{GuardedListener, SCRAPE_CONNECTION_LIFETIME, SCRAPE_LIMITS};
use hcomm_comm::listen::{Guard, Refusal};

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::member::state::Phase;

/// Every metric of the agent.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub members: IntGaugeVec,
    pub verifications: IntCounterVec,
    pub sync_bytes: IntCounter,
    pub sync_throughput: Gauge,
    pub weights_versions_removed: IntCounter,
    pub weights_partials_removed: IntCounter,
    pub weights_links_removed: IntCounter,
    /// Chunk bytes and chunks this node's chunk server sent to joiners (folded from
    /// `weights_server` at every scrape): with the joiners' `sync_bytes`, whether a
    /// scale-out's copies came from the existing members or from fellow joiners.
    pub weights_served_bytes: IntCounter,
    pub weights_served_chunks: IntCounter,
    /// The chunk server's own counters.
    pub weights_server: Arc<crate::weights::ServerStats>,
    pub probe_latency: HistogramVec,
    pub link_up: IntGaugeVec,
    pub allreduce_seconds: HistogramVec,
    pub comm_open: IntGauge,
    pub comm_created: IntCounter,
    pub comm_destroyed: IntCounter,
    /// Events dropped because the publisher's queue was full (`hcomm_events`).
    pub events_dropped: IntCounter,
    /// Event writes the API server refused or that failed.
    pub event_write_failures: IntCounter,
    /// Pod condition writes that failed (each is tried again until it lands).
    pub condition_write_failures: IntCounter,
    pub busbw: GaugeVec,
    pub drains: IntCounterVec,
    pub open_fds: IntGauge,
    pub max_fds: IntGauge,
    pub listener_refused: IntCounterVec,
    pub listener_open: IntGaugeVec,
    /// The admission guards of the node's listeners.
    pub listeners: Listeners,
    /// Serialises folding the guards' counters into `listener_refused`.
    fold: Arc<Mutex<()>>,
}

/// The admission guard of every listener of the agent, one per kind (each shared by all
/// sockets of that kind on the node, so the per-address caps hold node-wide).
#[derive(Clone, Debug)]
pub struct Listeners {
    /// The link probe (`crate::nic::probe`).
    pub probe: Arc<Guard>,
    /// The weights chunk server (`crate::weights::server`).
    pub weights: Arc<Guard>,
    /// The comm engine's acceptors, handshakes only (`hcomm_comm::tcp::COMM_LIMITS`).
    pub comm: Arc<Guard>,
    /// This metrics listener.
    pub metrics: Arc<Guard>,
}

impl Listeners {
    fn new() -> Listeners {
        Listeners {
            probe: Guard::new("probe", crate::nic::probe::LIMITS),
            weights: Guard::new("weights", crate::weights::server::LIMITS),
            comm: Guard::new("comm", hcomm_comm::tcp::COMM_LIMITS),
            metrics: Guard::new("metrics", SCRAPE_LIMITS),
        }
    }

    fn all(&self) -> [&Arc<Guard>; 4] {
        [&self.probe, &self.weights, &self.comm, &self.metrics]
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("hcomm_agent")
}

impl Metrics {
    /// A fresh registry with every metric registered (phases start at zero).
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let m = Metrics {
            members: IntGaugeVec::new(
                opts("members", "Members on this node by lifecycle phase"),
                &["phase"],
            )
            .expect("metric"),
            verifications: IntCounterVec::new(
                opts("verifications_total", "Member verifications by reason"),
                &["reason"],
            )
            .expect("metric"),
            sync_bytes: IntCounter::with_opts(opts(
                "weights_sync_bytes_total",
                "Weight bytes received and verified",
            ))
            .expect("metric"),
            sync_throughput: Gauge::with_opts(opts(
                "weights_sync_throughput_bytes_per_second",
                "Throughput of the last weight sync",
            ))
            .expect("metric"),
            weights_versions_removed: IntCounter::with_opts(opts(
                "weights_versions_removed_total",
                "Weights versions removed after no link used them for the grace period",
            ))
            .expect("metric"),
            weights_partials_removed: IntCounter::with_opts(opts(
                "weights_partials_removed_total",
                "Weights fetches stopped part-way removed after no fetch resumed them for the grace period",
            ))
            .expect("metric"),
            weights_served_bytes: IntCounter::with_opts(opts(
                "weights_served_bytes_total",
                "Weight chunk bytes this node's chunk server sent",
            ))
            .expect("metric"),
            weights_served_chunks: IntCounter::with_opts(opts(
                "weights_served_chunks_total",
                "Weight chunks this node's chunk server sent",
            ))
            .expect("metric"),
            weights_server: Arc::default(),
            weights_links_removed: IntCounter::with_opts(opts(
                "weights_links_removed_total",
                "Groups' weights links removed after the group had no member on the node for the grace period",
            ))
            .expect("metric"),
            probe_latency: HistogramVec::new(
                HistogramOpts::new(
                    "health_probe_latency_seconds",
                    "Link probe round trip per peer",
                )
                .namespace("hcomm_agent")
                .buckets(vec![
                    0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0,
                ]),
                &["peer"],
            )
            .expect("metric"),
            link_up: IntGaugeVec::new(
                opts("link_up", "1 when the last probe to the peer answered"),
                &["peer"],
            )
            .expect("metric"),
            allreduce_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "health_allreduce_seconds",
                    "Duration of the health all-reduce per group",
                )
                .namespace("hcomm_agent")
                .buckets(vec![
                    0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0,
                ]),
                &["group"],
            )
            .expect("metric"),
            comm_open: IntGauge::with_opts(opts(
                "communicators_open",
                "Communicators currently open",
            ))
            .expect("metric"),
            comm_created: IntCounter::with_opts(opts(
                "communicators_created_total",
                "Communicators created",
            ))
            .expect("metric"),
            comm_destroyed: IntCounter::with_opts(opts(
                "communicators_destroyed_total",
                "Communicators destroyed",
            ))
            .expect("metric"),
            events_dropped: IntCounter::with_opts(opts(
                "events_dropped_total",
                "Kubernetes Events dropped unwritten: the publisher's queue was full",
            ))
            .expect("metric"),
            event_write_failures: IntCounter::with_opts(opts(
                "event_write_failures_total",
                "Kubernetes Event writes the API server refused or that failed",
            ))
            .expect("metric"),
            condition_write_failures: IntCounter::with_opts(opts(
                "condition_write_failures_total",
                "Member Pod condition writes that failed; each is tried again until it lands",
            ))
            .expect("metric"),
            busbw: GaugeVec::new(
                opts(
                    "collective_busbw_bytes_per_second",
                    "Bus bandwidth of the last health collective",
                ),
                &["group", "op"],
            )
            .expect("metric"),
            drains: IntCounterVec::new(
                opts("drains_total", "Finished drains by outcome"),
                &["outcome"],
            )
            .expect("metric"),
            open_fds: IntGauge::with_opts(opts("open_fds", "File descriptors the agent has open"))
                .expect("metric"),
            max_fds: IntGauge::with_opts(opts("max_fds", "The agent's file descriptor limit"))
                .expect("metric"),
            listener_refused: IntCounterVec::new(
                opts(
                    "listener_refused_total",
                    "Connections a listener closed unserved, by reason (per_peer_cap, total_cap, deadline, idle)",
                ),
                &["listener", "reason"],
            )
            .expect("metric"),
            listener_open: IntGaugeVec::new(
                opts("listener_open", "Connections holding a listener's slot"),
                &["listener"],
            )
            .expect("metric"),
            listeners: Listeners::new(),
            fold: Arc::default(),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.members.clone())).expect("register");
        r.register(Box::new(m.verifications.clone()))
            .expect("register");
        r.register(Box::new(m.sync_bytes.clone()))
            .expect("register");
        r.register(Box::new(m.sync_throughput.clone()))
            .expect("register");
        r.register(Box::new(m.weights_versions_removed.clone()))
            .expect("register");
        r.register(Box::new(m.weights_links_removed.clone()))
            .expect("register");
        r.register(Box::new(m.weights_partials_removed.clone()))
            .expect("register");
        r.register(Box::new(m.weights_served_bytes.clone()))
            .expect("register");
        r.register(Box::new(m.weights_served_chunks.clone()))
            .expect("register");
        r.register(Box::new(m.probe_latency.clone()))
            .expect("register");
        r.register(Box::new(m.link_up.clone())).expect("register");
        r.register(Box::new(m.allreduce_seconds.clone()))
            .expect("register");
        r.register(Box::new(m.comm_open.clone())).expect("register");
        r.register(Box::new(m.comm_created.clone()))
            .expect("register");
        r.register(Box::new(m.comm_destroyed.clone()))
            .expect("register");
        r.register(Box::new(m.events_dropped.clone()))
            .expect("register");
        r.register(Box::new(m.event_write_failures.clone()))
            .expect("register");
        r.register(Box::new(m.condition_write_failures.clone()))
            .expect("register");
        r.register(Box::new(m.busbw.clone())).expect("register");
        r.register(Box::new(m.drains.clone())).expect("register");
        r.register(Box::new(m.open_fds.clone())).expect("register");
        r.register(Box::new(m.max_fds.clone())).expect("register");
        r.register(Box::new(m.listener_refused.clone()))
            .expect("register");
        r.register(Box::new(m.listener_open.clone()))
            .expect("register");
        m.fold_counters();
        for p in Phase::NAMES {
            m.members.with_label_values(&[p]).set(0);
        }
        m
    }

    /// Moves one member from phase `from` to `to`.
    pub fn phase_change(&self, from: Option<&Phase>, to: &Phase) {
        if let Some(f) = from {
            self.members.with_label_values(&[f.name()]).dec();
        }
        self.members.with_label_values(&[to.name()]).inc();
    }

    /// Refreshes the process gauges (open descriptors, limit).
    pub fn refresh_process(&self) {
        if let Ok(d) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(d.count() as i64);
        }
        if let Ok(l) = std::fs::read_to_string("/proc/self/limits")
            && let Some(line) = l.lines().find(|l| l.starts_with("Max open files"))
            && let Some(v) = line.split_whitespace().nth(3).and_then(|v| v.parse().ok())
        {
            self.max_fds.set(v);
        }
    }

    /// Folds the listeners' admission counters and the chunk server's counters into the
    /// exported metrics.
    pub fn fold_counters(&self) {
        let _one_at_a_time = self.fold.lock().unwrap_or_else(|e| e.into_inner());
        for guard in self.listeners.all() {
            let c = guard.counts();
            for reason in Refusal::ALL {
                let counter = self
                    .listener_refused
                    .with_label_values(&[guard.name(), reason.label()]);
                let seen = c.refused(reason);
                if seen > counter.get() {
                    counter.inc_by(seen - counter.get());
                }
            }
            self.listener_open
                .with_label_values(&[guard.name()])
                .set(c.open as i64);
        }
        let served = &self.weights_server;
        for (counter, now) in [
            (&self.weights_served_bytes, &served.bytes_served),
            (&self.weights_served_chunks, &served.chunks_served),
        ] {
            let now = now.load(std::sync::atomic::Ordering::Relaxed);
            if now > counter.get() {
                counter.inc_by(now - counter.get());
            }
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        self.refresh_process();
        self.fold_counters();
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Serves `/metrics`, `/healthz`, and `/livez` and `/readyz` (from `probes`, 503 when
/// failing; see [`crate::probes`]) on `listener` until `shutdown` resolves, admitting
/// connections through `metrics.listeners.metrics` with its deadlines.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    probes: std::sync::Arc<crate::probes::Probes>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let guarded = GuardedListener::new(
        listener,
        metrics.listeners.metrics.clone(),
        SCRAPE_CONNECTION_LIFETIME,
    );
    let answer = |(ok, body): (bool, String)| {
        let status = if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, body)
    };
    let live = probes.clone();
    let app = axum::Router::new()
        .route(
            "/livez",
            get(move || {
                let probes = live.clone();
                async move { answer(probes.live()) }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let probes = probes.clone();
                async move { answer(probes.ready()) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move { m.render() }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    axum::serve(guarded, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
