//! `cargo demo`'s own code, end to end:
//! - on loopback hosts (the path a user without root gets): the whole path — control plane,
//!   chart, agents, operator, process kubelet, workers, routers, scale 2 → 4 → 2 — serves
//!   every request with the right weights; runs as any user;
//! - `--backend hccl` (needs root: the HCCL conformance simulator's ranks talk over the
//!   hosts' NPU fabric): both pools on HCCL communicators the reference worker builds
//!   through the worker library, every answer from a member serving on one, and the
//!   simulator saw no violation of HCCL's rules.
//!
//! - `--autoscale` (needs root: the aggregator reaches KEDA at a namespace-side address):
//!   Prometheus, KEDA and the HPA controller move decode 2 → 4 → 2 on a load step, with no
//!   `kubectl scale`, and the chain's chart is written.
//!
//! Smaller weights (16 MiB) and shorter holds than the real demo keep each to about a
//! minute. Under the harness so that, without root, the HCCL run is reported ignored.

use std::time::Duration;

use hcomm_e2e::demo::{self, Clock, DemoOptions, Summary};
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::testbed::HostsMode;

fn main() {
    // One at a time: two testbeds at once would share the machine's 2 cores and ports.
    harness::run_in_order(vec![
        Test::new(
            "the_demo_on_loopback_hosts_serves_every_request_through_scale_out_and_in",
            Needs::Nothing,
            on_loopback_hosts,
        ),
        Test::new(
            "the_demo_on_the_hccl_backend_serves_every_request_from_hccl_communicators",
            Needs::NetworkNamespaces,
            on_hccl,
        ),
        Test::new(
            "the_autoscaled_demo_is_scaled_to_4_and_back_to_2_by_the_hpa_through_keda",
            Needs::NetworkNamespaces,
            autoscaled,
        ),
    ])
    .exit();
}

fn run(options: DemoOptions) -> anyhow::Result<Summary> {
    let mut summary = None;
    harness::block_on(Duration::from_secs(300), async {
        summary = Some(demo::run(&options, &Clock::start()).await?);
        Ok(())
    })?;
    let summary = summary.expect("set when the demo succeeded");
    println!("{summary}");
    anyhow::ensure!(summary.served > 0, "nothing served: {summary}");
    anyhow::ensure!(
        (summary.failed, summary.wrong_digest) == (0, 0),
        "every request answered with the right weights: {summary}"
    );
    Ok(summary)
}

fn small(hosts_mode: HostsMode) -> DemoOptions {
    DemoOptions {
        hosts: 4,
        weights_mib: 16,
        hold: Duration::from_secs(2),
        hosts_mode,
        ..DemoOptions::default()
    }
}

fn on_loopback_hosts() -> anyhow::Result<()> {
    let chart =
        std::env::temp_dir().join(format!("hcomm-demo-timeline-{}.svg", std::process::id()));
    let summary = run(DemoOptions {
        timeline_svg: Some(chart.clone()),
        ..small(HostsMode::Loopback)
    })?;
    anyhow::ensure!(summary.backend == "tcp", "{summary}");
    // The chart has a row for each member that lived: prefill's 2 and decode's 4.
    let svg = std::fs::read_to_string(&chart)?;
    let _ = std::fs::remove_file(&chart);
    anyhow::ensure!(svg.starts_with("<svg"), "{svg}");
    for member in ["prefill-0-", "prefill-1-", "decode-0-", "decode-3-"] {
        anyhow::ensure!(svg.contains(member), "no row for {member}*: {svg}");
    }
    Ok(())
}

/// The acceptance of `cargo demo --backend hccl`: its last line says `backend=hccl` (every
/// answer came from a member whose worker had built and checked its HCCL communicator
/// before it reported serving), and `failed=0 wrong_digest=0`. The demo itself fails on
/// any violation the simulator recorded.
fn on_hccl() -> anyhow::Result<()> {
    let summary = run(DemoOptions {
        backend: hcomm_crds::Backend::Hccl,
        ..small(HostsMode::Namespaces)
    })?;
    anyhow::ensure!(summary.backend == "hccl", "{summary}");
    anyhow::ensure!(
        summary.to_string().starts_with("backend=hccl "),
        "{summary}"
    );
    Ok(())
}

/// The acceptance of `cargo demo --autoscale`: its last line says `hpa_scaled_to=4
/// hpa_scaled_back_to=2` beside `failed=0 wrong_digest=0`, and the chart of the chain is
/// written (the demo itself fails unless the HPA read its metric through KEDA).
fn autoscaled() -> anyhow::Result<()> {
    let chart =
        std::env::temp_dir().join(format!("hcomm-demo-autoscale-{}.svg", std::process::id()));
    let summary = run(DemoOptions {
        autoscale: true,
        autoscale_plot: Some(chart.clone()),
        ..small(HostsMode::Namespaces)
    })?;
    anyhow::ensure!(summary.hpa == Some((4, 2)), "{summary}");
    let line = summary.to_string();
    anyhow::ensure!(
        line.ends_with(" hpa_scaled_to=4 hpa_scaled_back_to=2")
            && line.contains(" failed=0 wrong_digest=0 "),
        "{line}"
    );
    let svg = std::fs::read_to_string(&chart)?;
    let _ = std::fs::remove_file(&chart);
    anyhow::ensure!(
        svg.starts_with("<svg") && svg.contains("HPA desired"),
        "{svg}"
    );
    Ok(())
}
