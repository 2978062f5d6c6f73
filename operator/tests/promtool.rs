//! The operator's `/metrics` exposition passes Prometheus' own `promtool check metrics`.

use hcomm_crds::MemberPhase;
use hcomm_operator::links::LinkCounts;
use hcomm_operator::metrics::Metrics;

#[test]
fn the_operator_metrics_pass_promtool() {
    let metrics = Metrics::new();
    // Every family gets a sample, so promtool sees each one with its labels.
    metrics.reconciles.inc();
    metrics.errors.with_label_values(&["kube_api"]).inc();
    metrics.duration.observe(0.012);
    metrics.scale_to_ready.observe(4.2);
    metrics.leader.set(1);
    metrics.set_members(
        "default",
        "decode",
        &[MemberPhase::Ready, MemberPhase::Syncing],
    );
    metrics.set_links(
        "default",
        "decode",
        LinkCounts {
            up: 1,
            down: 1,
            ..LinkCounts::default()
        },
    );
    let text = metrics.render();
    assert!(text.contains("hcomm_operator_"), "{text}");
    hcomm_e2e::promtool::check_metrics(&text).unwrap_or_else(|err| panic!("{err}\n\n{text}"));
}
