//! `cargo demo`'s own code, run the way a user without root gets it: hosts on loopback
//! addresses in the root namespace (no network namespaces). The whole path — control
//! plane, chart, agents, operator, process kubelet, workers, routers, scale 2 → 4 → 2 —
//! must serve every request with the right weights. Smaller weights (16 MiB) and shorter
//! holds than the real demo keep it to about a minute.
//!
//! Loopback hosts need no privileges, so this runs as any user.

use std::time::Duration;

use hcomm_e2e::demo::{self, Clock, DemoOptions};
use hcomm_e2e::testbed::HostsMode;

#[test]
fn the_demo_on_loopback_hosts_serves_every_request_through_scale_out_and_in() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let chart =
        std::env::temp_dir().join(format!("hcomm-demo-timeline-{}.svg", std::process::id()));
    let options = DemoOptions {
        hosts: 4,
        weights_mib: 16,
        hold: Duration::from_secs(2),
        hosts_mode: HostsMode::Loopback,
        timeline_svg: Some(chart.clone()),
    };
    let summary = rt
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(300),
                demo::run(&options, &Clock::start()),
            )
            .await
        })
        .expect("demo deadline (300 s)")
        .expect("demo");
    println!("{summary}");
    assert!(summary.served > 0, "{summary}");
    assert_eq!(
        (summary.failed, summary.wrong_digest),
        (0, 0),
        "every request answered with the right weights: {summary}"
    );
    // The chart has a row for each member that lived: prefill's 2 and decode's 4.
    let svg = std::fs::read_to_string(&chart).expect("timeline chart written");
    let _ = std::fs::remove_file(&chart);
    assert!(svg.starts_with("<svg"), "{svg}");
    for member in ["prefill-0-", "prefill-1-", "decode-0-", "decode-3-"] {
        assert!(svg.contains(member), "no row for {member}*: {svg}");
    }
}
