//! The agent's Prometheus metrics: one registry, prefix `hcomm_agent_`, served on
//! `/metrics` (text format) beside `/healthz`.

use std::net::SocketAddr;

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
    pub weights_links_removed: IntCounter,
    pub probe_latency: HistogramVec,
    pub link_up: IntGaugeVec,
    pub allreduce_seconds: HistogramVec,
    pub comm_open: IntGauge,
    pub comm_created: IntCounter,
    pub comm_destroyed: IntCounter,
    pub busbw: GaugeVec,
    pub drains: IntCounterVec,
    pub open_fds: IntGauge,
    pub max_fds: IntGauge,
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
        r.register(Box::new(m.busbw.clone())).expect("register");
        r.register(Box::new(m.drains.clone())).expect("register");
        r.register(Box::new(m.open_fds.clone())).expect("register");
        r.register(Box::new(m.max_fds.clone())).expect("register");
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

    /// The text exposition.
    pub fn render(&self) -> String {
        self.refresh_process();
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
/// failing; see [`crate::probes`]) on `addr` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    probes: std::sync::Arc<crate::probes::Probes>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
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
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_the_prefix_and_every_phase() {
        let m = Metrics::new();
        m.phase_change(None, &Phase::Pending);
        m.phase_change(Some(&Phase::Pending), &Phase::Verifying);
        m.comm_created.inc();
        let text = m.render();
        assert!(
            text.contains("hcomm_agent_members{phase=\"Verifying\"} 1"),
            "{text}"
        );
        assert!(text.contains("hcomm_agent_members{phase=\"Pending\"} 0"));
        assert!(text.contains("hcomm_agent_communicators_created_total 1"));
        assert!(text.contains("hcomm_agent_open_fds"));
    }

    #[tokio::test]
    async fn metrics_and_healthz_are_served_over_http() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let probes = std::sync::Arc::new(crate::probes::Probes::new(|| true));
        tokio::spawn(serve(
            l,
            Metrics::new(),
            probes.clone(),
            std::future::pending(),
        ));
        let status_line = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).await.unwrap();
            text
        };
        assert!(status_line("/livez").await.starts_with("HTTP/1.0 200"));
        let not_ready = status_line("/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.0 503"), "{not_ready}");
        assert!(
            not_ready.contains("HcommNode not registered"),
            "{not_ready}"
        );
        probes.set_registered();
        probes.set_api_bound();
        let ready = status_line("/readyz").await;
        assert!(ready.starts_with("HTTP/1.0 200"), "{ready}");
        let body = crate::diagnose::collect::tests_support::get(&format!("http://{addr}/metrics"))
            .await
            .unwrap();
        assert!(body.contains("hcomm_agent_communicators_open 0"), "{body}");
        let ok = crate::diagnose::collect::tests_support::get(&format!("http://{addr}/healthz"))
            .await
            .unwrap();
        assert_eq!(ok, "ok");
    }
}
