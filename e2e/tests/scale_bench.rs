//! The `cargo scale-bench` code path at a size CI can afford (2 groups × 5 members on 10
//! kwok Nodes, well under a minute): the real control plane, the real operator, the
//! played agents, every measured phase, and the last line scripts read — so the bench
//! does not rot between the runs recorded in `docs/benchmarks.md`.

use std::process::Command;

#[test]
fn the_scale_bench_runs_end_to_end_at_a_small_size_and_prints_its_last_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_scale-bench"))
        .args(["--sizes", "10", "--groups", "2", "--nodes", "10"])
        .args([
            "--steady-s",
            "2",
            "--node-publish-s",
            "2",
            "--phase-timeout-s",
            "60",
        ])
        .output()
        .expect("run scale-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("members=10 groups=2 settle_s="),
        "last line: {last}\n{stderr}"
    );
    for key in ["reconcile_p99_ms=", "rss_mib=", "list_calls_steady="] {
        assert!(last.contains(key), "{key} missing: {last}");
    }
    let settle: f64 = last
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("settle_s="))
        .and_then(|v| v.parse().ok())
        .expect("settle_s is a number");
    assert!(settle > 0.0 && settle < 60.0, "{last}");
    assert!(stdout.contains("| 10 | 2 × 5 |"), "the table row: {stdout}");
}
