//! The report's arithmetic (floor, ratios, targets) and its formats, on made-up results.

use super::*;
use crate::run::floor_secs;

const MIB_1024: u64 = 1024 * 1024 * 1024;

fn args(line: &str) -> Args {
    let argv: Vec<String> = line.split_whitespace().map(String::from).collect();
    Args::parse_from_argv(&argv).unwrap()
}

fn result(strategy: Strategy, joiners: usize, time_s: f64) -> RunResult {
    RunResult {
        rate_mbit: 2000,
        strategy,
        joiners,
        bytes: MIB_1024,
        floor_s: floor_secs(MIB_1024, 2000),
        time_s,
        first_pod_s: Some(0.12),
        teardown_s: (strategy == Strategy::Rebuild).then_some(1.5),
        outage_s: if strategy == Strategy::Rebuild {
            6.25
        } else {
            0.0
        },
        verify_s: Some(0.3),
        sync_s: Some(4.4),
        join_s: None,
        machine_busy: 0.5,
        agent_cpu_s: 3.25,
        copies_sent: (strategy == Strategy::Incremental).then_some((1.02, 2.9)),
    }
}

fn report<'a>(args: &'a Args, argv: &'a [String], results: &'a [RunResult]) -> Report<'a> {
    Report {
        args,
        argv,
        links: vec![(
            2000,
            Some(LinkResult {
                tool: "iperf3",
                mbit: 1920.0,
            }),
        )],
        results,
        load_before: "0.10 0.20 0.30".into(),
        load_after: "1.00 0.50 0.40".into(),
        wall: Duration::from_secs(95),
        provenance: Provenance {
            date: "2026-12-01T21:00:00Z".into(),
            host: "Linux 6.1 x86_64, 2 cores, 24 GiB".into(),
            revision: "abc1234".into(),
            build: "release build of agent".into(),
        },
    }
}

#[test]
fn the_floor_is_the_weights_over_one_link() {
    // 1 GiB at 2000 Mbit/s: 2^30 × 8 / 2e9 s.
    assert!((floor_secs(MIB_1024, 2000) - 4.294_967_296).abs() < 1e-9);
    assert!((floor_secs(MIB_1024, 500) - 4.0 * 4.294_967_296).abs() < 1e-9);
    let r = result(Strategy::Incremental, 1, 4.5);
    assert!((r.over_floor() - (4.5 - 4.294_967_296)).abs() < 1e-9);
}

#[test]
fn ratios_compare_with_one_joiner_and_with_incremental() {
    let a = args("--joiners 1,4");
    let results = [
        result(Strategy::Incremental, 1, 4.0),
        result(Strategy::Rebuild, 1, 10.0),
        result(Strategy::Incremental, 4, 5.0),
    ];
    let r = report(&a, &[], &results);
    assert_eq!(r.to_one(&results[2]), Some(1.25));
    assert_eq!(r.rebuild_ratio(2000, 1), Some(2.5));
    assert_eq!(r.rebuild_ratio(2000, 4), None);
    assert_eq!(r.rebuild_cell(&results[1]), "2.50");
    assert_eq!(r.rebuild_cell(&results[0]), "-");
    assert_eq!(opt(None), "-");
    assert_eq!(opt(Some(1.005)), "1.00");
}

#[test]
fn targets_pass_within_the_slack_and_miss_beyond_it() {
    let a = args("--joiners 1,4");
    let results = [
        result(Strategy::Incremental, 1, 4.5),
        result(Strategy::Rebuild, 1, 9.0),
        result(Strategy::Incremental, 4, 5.5),
    ];
    let lines = report(&a, &[], &results).targets();
    assert!(
        lines[0].starts_with("**PASS** 2000 Mbit/s, incremental, 1 joiner: 4.50 s against ≤ line-rate floor + 0.5 s = 4.79 s (0.29 s to spare)"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("over the goodput floor 4.47 s (the weights at the 1920 Mbit/s iperf3"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("**MISS** 2000 Mbit/s, incremental, 4 joiners:"),
        "{}",
        lines[2]
    );
    assert!(lines[2].ends_with("(0.71 s over)"), "{}", lines[2]);
    assert_eq!(
        lines[4],
        "**MISS** 2000 Mbit/s, incremental, 4 joiners against ≤ 1.15 × 1 joiner: 5.50 s / 4.50 s = 1.22×"
    );
    assert_eq!(
        lines[5],
        "2000 Mbit/s, Rebuild ÷ Incremental (reported, no threshold): 1 joiner 2.00× (no member Ready for 6.25 s)"
    );
    // 3.25 agent CPU-s for the one joiner's GiB; the same for four joiners' 4 GiB.
    assert_eq!(
        lines[6],
        "**MISS** 2000 Mbit/s, incremental, 1 joiner: 3.25 agent CPU-s per GiB received against ≤ 2.0"
    );
    assert_eq!(
        lines[7],
        "**PASS** 2000 Mbit/s, incremental, 4 joiners: 0.81 agent CPU-s per GiB received against ≤ 2.0"
    );
    assert_eq!(lines.len(), 8, "no CPU line for a rebuild: {lines:#?}");
}

#[test]
fn the_fan_out_target_without_four_joiners_is_reported_unmeasured() {
    let a = args("--joiners 1 --strategies incremental");
    let results = [result(Strategy::Incremental, 1, 4.0)];
    let lines = report(&a, &[], &results).targets();
    assert!(lines.iter().any(|l| l
        == "not measured at 2000 Mbit/s: 4 joiners ≤ 1.15 × 1 joiner (needs incremental runs with 1 and 4 joiners)"));
}

#[test]
fn rows_are_one_header_pair_and_one_aligned_line_per_run() {
    let a = args("--joiners 1");
    let results = [
        result(Strategy::Incremental, 1, 4.5),
        result(Strategy::Rebuild, 1, 9.0),
    ];
    let rows = report(&a, &[], &results).rows();
    let lines: Vec<&str> = rows.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("# scale-out: 1024 MiB weights; time = scale request"));
    assert!(lines[1].starts_with("#  rate(Mb)    strategy joiners      size(B) floor(s)"));
    assert_eq!(
        lines[2],
        "       2000 incremental       1   1073741824    4.295    4.500    0.205   1.048    1.00       -    0.12    0.30    4.40       -    0.00    50"
    );
    assert_eq!(lines[3].split_whitespace().nth(9), Some("2.00"));
}

#[test]
fn the_markdown_section_carries_provenance_command_table_and_targets() {
    let a = args("--joiners 1");
    let argv: Vec<String> = ["--joiners", "1"].map(String::from).to_vec();
    let results = [
        result(Strategy::Incremental, 1, 4.5),
        result(Strategy::Rebuild, 1, 9.0),
    ];
    let md = report(&a, &argv, &results).markdown();
    assert!(md.starts_with(&format!("{BEGIN}\n<!-- generated by `cargo scaleout-bench")));
    assert!(md.ends_with(&format!("{END}\n")));
    for line in [
        "date: 2026-12-01T21:00:00Z",
        "host: Linux 6.1 x86_64, 2 cores, 24 GiB",
        "load average before: 0.10 0.20 0.30; after: 1.00 0.50 0.40; wall time 95 s",
        "hcomm: abc1234, release build of agent",
        "hosts: 2 network-namespace hosts, 1 device each; data links tc htb per host and direction",
        "raw link at 2000 Mbit/s, host-0 → host-1 (iperf3, 3 s after 1 s omitted): 1920 Mbit/s goodput = 96.0 % of the tc rate",
        "cargo scaleout-bench --joiners 1",
        "| 2000 | Incremental | 1 | 1024 | 4.29 | 4.50 | 0.21 | 1.05 | 1.00 | – | 0.00 | 0.12 | 0.30 / 4.40 / - | 50 % | 3.2 | 3.25 | 1.02 / 2.90 |",
        "| 2000 | Rebuild (old member gone at 1.50 s) | 1 | 1024 | 4.29 | 9.00 | 4.71 | 2.10 | 1.00 | 2.00 | 6.25 | 0.12 | 0.30 / 4.40 / - | 50 % | 3.2 | - | - |",
    ] {
        assert!(md.lines().any(|l| l == line), "{line:?} missing:\n{md}");
    }
    assert!(md.contains("Targets:\n\n- **PASS** 2000 Mbit/s"), "{md}");
}
