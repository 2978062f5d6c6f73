//! The agent's `/metrics` exposition passes Prometheus' own `promtool check metrics`.

use hcomm_agent::member::state::Phase;
use hcomm_agent::metrics::Metrics;

#[test]
fn the_agent_metrics_pass_promtool() {
    let metrics = Metrics::new();
    // Every family gets a sample, so promtool sees each one with its labels.
    metrics.phase_change(None, &Phase::Pending);
    metrics.phase_change(Some(&Phase::Pending), &Phase::Verifying);
    metrics
        .verifications
        .with_label_values(&[hcomm_crds::contract::PodReason::NicUnreachable.as_str()])
        .inc();
    metrics.sync_bytes.inc_by(4 << 20);
    metrics.sync_throughput.set(1.1e8);
    metrics
        .probe_latency
        .with_label_values(&["host-1"])
        .observe(0.0004);
    metrics.link_up.with_label_values(&["host-1"]).set(1);
    metrics
        .allreduce_seconds
        .with_label_values(&["decode"])
        .observe(0.002);
    metrics.comm_open.set(1);
    metrics.comm_created.inc();
    metrics.comm_destroyed.inc();
    metrics
        .busbw
        .with_label_values(&["decode", "all_reduce"])
        .set(1.2e8);
    metrics.drains.with_label_values(&["drained"]).inc();
    metrics.refresh_process();
    let text = metrics.render();
    assert!(text.contains("hcomm_agent_"), "{text}");
    hcomm_e2e::promtool::check_metrics(&text).unwrap_or_else(|err| panic!("{err}\n\n{text}"));
}
