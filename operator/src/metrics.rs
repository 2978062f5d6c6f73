//! Prometheus metrics (prefix `hcomm_operator_`) and the `/metrics`, `/healthz`, `/readyz`
//! server. One registry per process; the server takes its listener and a shutdown future.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use tokio::net::TcpListener;

use hcomm_crds::MemberPhase;

use crate::links::LinkCounts;
use crate::readiness::Readiness;

/// Every metric the operator exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Reconciles started.
    pub reconciles: IntCounter,
    /// Reconcile errors by category.
    pub errors: IntCounterVec,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// Members by group and phase.
    pub members: IntGaugeVec,
    /// Seconds from a member's creation (the scale request that planned it) to Ready.
    pub scale_to_ready: Histogram,
    /// 1 while this replica holds the leader Lease.
    pub leader: IntGauge,
    /// Directed links between a group's member nodes, by state.
    pub links: IntGaugeVec,
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
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry =
            Registry::new_custom(Some("hcomm_operator".into()), None).expect("valid prefix");
        let reconciles = IntCounter::new("reconciles_total", "Reconciles started.").expect("valid");
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
        for collector in [
            Box::new(reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(errors.clone()),
            Box::new(duration.clone()),
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
            errors,
            duration,
            members,
            scale_to_ready,
            leader,
            links,
        }
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

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until `shutdown` completes.
/// `/readyz` answers from `readiness` (503 until ready; see [`crate::readiness`]).
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
        .with_state(metrics);
    axum::serve(listener, app)
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
