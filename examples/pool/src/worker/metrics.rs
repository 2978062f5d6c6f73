//! The worker's load signals for autoscalers: Prometheus text format on `GET /metrics`.
//!
//! Every series carries `group`, `role` and `member` (the Pod name), so one query can
//! sum a group's role and a dashboard can still find the hot member. What is exported
//! (documented in docs/autoscaling.md):
//! - `hcomm_worker_requests_in_flight` (gauge): admitted requests not yet answered, the
//!   same count the worker reports to its agent for drains. The autoscaling examples and
//!   `cargo demo --autoscale` scale decode on its sum.
//! - `hcomm_worker_queue_depth` (gauge): admitted requests that have not produced their
//!   first token yet (waiting for, or in, prefill).
//! - `hcomm_worker_time_to_first_token_seconds` (histogram): admission to first token.
//! - `hcomm_worker_inter_token_latency_seconds` (histogram): gap between two tokens of one
//!   answer.
//! - `hcomm_worker_generated_tokens_total` (counter): tokens per second is its `rate()`.
//! - `hcomm_worker_requests_total{outcome}` (counter): served, rejected_not_ready,
//!   rejected_draining, invalid.
//!
//! The gauges are read from the worker's state at scrape time (one source of truth); the
//! histograms and counters are fed by [`Generation`], which the `/generate` handler drives
//! token by token.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

use super::state::WorkerState;

/// Label names of every per-member series, in this order.
const MEMBER_LABELS: [&str; 3] = ["group", "role", "member"];

/// Buckets of time to first token: from one fast decode step (tens of ms) to a
/// long-prompt prefill under a queue (seconds).
const TTFT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of inter-token latency: decode steps are milliseconds to a few hundred.
const ITL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5,
];

/// Why a `/generate` request ended: the `outcome` label of `hcomm_worker_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Served,
    RejectedNotReady,
    RejectedDraining,
    Invalid,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Served => "served",
            Outcome::RejectedNotReady => "rejected_not_ready",
            Outcome::RejectedDraining => "rejected_draining",
            Outcome::Invalid => "invalid",
        }
    }
}

/// The worker's registry and series.
pub struct WorkerMetrics {
    state: Arc<WorkerState>,
    registry: Registry,
    inflight: IntGaugeVec,
    queue_depth: IntGaugeVec,
    ttft: HistogramVec,
    itl: HistogramVec,
    tokens: IntCounterVec,
    requests: IntCounterVec,
    /// Admitted requests before their first token (exported as `queue_depth`).
    waiting_first_token: AtomicU64,
}

impl WorkerMetrics {
    /// Registers every series of the worker whose state is `state`.
    pub fn new(state: Arc<WorkerState>) -> Arc<WorkerMetrics> {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &MEMBER_LABELS)
                .expect("static metric options are valid");
            registry
                .register(Box::new(g.clone()))
                .expect("metric names are unique");
            g
        };
        let inflight = gauge(
            "hcomm_worker_requests_in_flight",
            "Generation requests admitted and not yet answered.",
        );
        let queue_depth = gauge(
            "hcomm_worker_queue_depth",
            "Generation requests admitted that have not produced their first token yet.",
        );
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                &MEMBER_LABELS,
            )
            .expect("static metric options are valid");
            registry
                .register(Box::new(h.clone()))
                .expect("metric names are unique");
            h
        };
        let ttft = histogram(
            "hcomm_worker_time_to_first_token_seconds",
            "Time from admitting a generation request to its first token.",
            TTFT_BUCKETS,
        );
        let itl = histogram(
            "hcomm_worker_inter_token_latency_seconds",
            "Time between two consecutive tokens of one answer.",
            ITL_BUCKETS,
        );
        let tokens = IntCounterVec::new(
            Opts::new(
                "hcomm_worker_generated_tokens_total",
                "Tokens generated; tokens per second is its rate().",
            ),
            &MEMBER_LABELS,
        )
        .expect("static metric options are valid");
        registry
            .register(Box::new(tokens.clone()))
            .expect("metric names are unique");
        let requests = IntCounterVec::new(
            Opts::new(
                "hcomm_worker_requests_total",
                "Generation requests by how they ended.",
            ),
            &["group", "role", "member", "outcome"],
        )
        .expect("static metric options are valid");
        registry
            .register(Box::new(requests.clone()))
            .expect("metric names are unique");
        Arc::new(WorkerMetrics {
            state,
            registry,
            inflight,
            queue_depth,
            ttft,
            itl,
            tokens,
            requests,
            waiting_first_token: AtomicU64::new(0),
        })
    }

    /// The member's label values: the group is empty until the agent has assigned one.
    fn labels(&self) -> [String; 3] {
        let group = self.state.assignment().map(|a| a.group).unwrap_or_default();
        [group, self.state.role.clone(), self.state.pod.clone()]
    }

    /// Counts one request that ended with `outcome`.
    pub fn count(&self, outcome: Outcome) {
        let [group, role, member] = self.labels();
        self.requests
            .with_label_values(&[&group, &role, &member, outcome.label()])
            .inc();
    }

    /// Starts timing an admitted request's tokens.
    pub fn generation(self: &Arc<Self>) -> Generation {
        self.waiting_first_token.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        Generation {
            metrics: Arc::clone(self),
            labels: self.labels(),
            started: now,
            last_token: None,
        }
    }

    /// The exposition, gauges read from the worker's state now.
    pub fn render(&self) -> String {
        let labels = self.labels();
        let labels = [&labels[0], &labels[1], &labels[2]];
        let inflight = i64::try_from(self.state.admission().inflight).unwrap_or(i64::MAX);
        self.inflight.with_label_values(&labels).set(inflight);
        let waiting = self.waiting_first_token.load(Ordering::Relaxed);
        self.queue_depth
            .with_label_values(&labels)
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
        let mut out = Vec::new();
        // Encoding our own registry into a Vec cannot fail: names and labels are valid.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// One admitted request's token clock: the first [`Generation::token`] observes time to
/// first token, every later one an inter-token gap. Dropping it before the first token
/// (an error, a cancelled client) still takes it out of the queue depth.
pub struct Generation {
    metrics: Arc<WorkerMetrics>,
    labels: [String; 3],
    started: Instant,
    last_token: Option<Instant>,
}

impl Generation {
    /// Records one generated token, now.
    pub fn token(&mut self) {
        self.token_at(Instant::now());
    }

    fn token_at(&mut self, now: Instant) {
        let labels = [&self.labels[0], &self.labels[1], &self.labels[2]];
        match self.last_token {
            None => {
                self.metrics
                    .ttft
                    .with_label_values(&labels)
                    .observe(now.saturating_duration_since(self.started).as_secs_f64());
                self.metrics
                    .waiting_first_token
                    .fetch_sub(1, Ordering::Relaxed);
            }
            Some(last) => self
                .metrics
                .itl
                .with_label_values(&labels)
                .observe(now.saturating_duration_since(last).as_secs_f64()),
        }
        self.metrics.tokens.with_label_values(&labels).inc();
        self.last_token = Some(now);
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if self.last_token.is_none() {
            self.metrics
                .waiting_first_token
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use hcomm_crds::local_api::Assignment;

    fn metrics() -> Arc<WorkerMetrics> {
        let state = WorkerState::new("decode-0", "decode");
        state.set_assignment(Assignment {
            group: "decode".into(),
            rank: 0,
            epoch: 1,
            ..Default::default()
        });
        WorkerMetrics::new(state)
    }

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"))
    }

    #[test]
    fn series_carry_group_role_and_member() {
        let m = metrics();
        m.count(Outcome::Served);
        let text = m.render();
        assert_eq!(
            line(&text, "hcomm_worker_requests_in_flight{"),
            r#"hcomm_worker_requests_in_flight{group="decode",member="decode-0",role="decode"} 0"#
        );
        assert_eq!(
            line(&text, "hcomm_worker_requests_total{"),
            r#"hcomm_worker_requests_total{group="decode",member="decode-0",outcome="served",role="decode"} 1"#
        );
    }

    #[test]
    fn the_first_token_leaves_the_queue_and_later_ones_time_the_gaps() {
        let m = metrics();
        let mut g = m.generation();
        let _waiting = m.generation();
        assert!(m.render().contains(
            r#"hcomm_worker_queue_depth{group="decode",member="decode-0",role="decode"} 2"#
        ));
        let t0 = g.started;
        g.token_at(t0 + Duration::from_millis(30));
        g.token_at(t0 + Duration::from_millis(50));
        g.token_at(t0 + Duration::from_millis(70));
        let text = m.render();
        assert!(text.contains(
            r#"hcomm_worker_queue_depth{group="decode",member="decode-0",role="decode"} 1"#
        ));
        // 30 ms to the first token: not in the 25 ms bucket, in the 50 ms one.
        assert!(text.contains(r#"hcomm_worker_time_to_first_token_seconds_bucket{group="decode",member="decode-0",role="decode",le="0.025"} 0"#));
        assert!(text.contains(r#"hcomm_worker_time_to_first_token_seconds_bucket{group="decode",member="decode-0",role="decode",le="0.05"} 1"#));
        // Two gaps of 20 ms each.
        assert!(text.contains(r#"hcomm_worker_inter_token_latency_seconds_count{group="decode",member="decode-0",role="decode"} 2"#));
        assert!(text.contains(r#"hcomm_worker_inter_token_latency_seconds_bucket{group="decode",member="decode-0",role="decode",le="0.015"} 0"#));
        assert!(text.contains(r#"hcomm_worker_generated_tokens_total{group="decode",member="decode-0",role="decode"} 3"#));
    }

    #[test]
    fn a_request_dropped_before_its_first_token_leaves_the_queue() {
        let m = metrics();
        drop(m.generation());
        assert!(m.render().contains(
            r#"hcomm_worker_queue_depth{group="decode",member="decode-0",role="decode"} 0"#
        ));
    }
}
