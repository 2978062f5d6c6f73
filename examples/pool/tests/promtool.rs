//! The worker's `/metrics` exposition (its load signals for autoscalers) passes
//! Prometheus' own `promtool check metrics`: names with base units, `_total` counters,
//! HELP and TYPE lines.

use hcomm_crds::local_api::Assignment;
use hcomm_examples::worker::WorkerState;
use hcomm_examples::worker::metrics::{Outcome, WorkerMetrics};

#[test]
fn the_worker_load_signals_pass_promtool() {
    let state = WorkerState::new("decode-0", "decode");
    state.set_assignment(Assignment {
        group: "decode".into(),
        ..Default::default()
    });
    let metrics = WorkerMetrics::new(state);
    // Every family gets a sample, so promtool sees each one with its labels.
    let mut generation = metrics.generation();
    generation.token();
    generation.token();
    drop(generation);
    metrics.count(Outcome::Served);
    metrics.count(Outcome::RejectedDraining);
    let text = metrics.render();
    for family in [
        "hcomm_worker_requests_in_flight",
        "hcomm_worker_queue_depth",
        "hcomm_worker_time_to_first_token_seconds",
        "hcomm_worker_inter_token_latency_seconds",
        "hcomm_worker_generated_tokens_total",
        "hcomm_worker_requests_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{family}:\n{text}"
        );
    }
    hcomm_e2e::promtool::check_metrics(&text).unwrap_or_else(|err| panic!("{err}\n\n{text}"));
}
