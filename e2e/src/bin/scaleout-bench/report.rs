//! The report: nccl-tests-like rows on stdout, PASS/MISS lines for the issue's targets
//! (incremental within the line-rate floor + 0.5 s, 4 joiners within 1.15 × one; the
//! time over the goodput floor is reported beside it), and the Markdown
//! section `--output` writes (docs/benchmarks.md quotes it). Pure: everything it shows
//! comes in through [`Report`].

use std::fmt::Write as _;
use std::time::Duration;

use crate::args::{Args, Strategy};
use crate::link::{LinkResult, MEASURE_S, OMIT_S};
use crate::machine::Provenance;
use crate::run::RunResult;
use crate::section::{BEGIN, END};

/// Target: incremental scale-out within this much of the floor.
const FLOOR_SLACK_S: f64 = 0.5;
/// Target: 4 joiners within this factor of one joiner.
const FANOUT_FACTOR: f64 = 1.15;
/// Target (issue 20): all agents' CPU seconds per GiB the joiners received.
const CPU_PER_GIB_TARGET_S: f64 = 2.0;
/// Target: a scale-out by one member served from a warm standby, to Ready (seconds).
const STANDBY_TARGET_S: f64 = 1.0;
/// The runs the standby target is judged on (their median).
const STANDBY_MIN_RUNS: usize = 5;

/// What the report is made of: the arguments, the measurements and their setting.
pub struct Report<'a> {
    pub args: &'a Args,
    /// The command line as given, for the report's command.
    pub argv: &'a [String],
    /// The raw link measurement at each rate.
    pub links: Vec<(u32, Option<LinkResult>)>,
    pub results: &'a [RunResult],
    pub load_before: String,
    pub load_after: String,
    pub wall: Duration,
    pub provenance: Provenance,
}

impl Report<'_> {
    fn find(&self, rate: u32, s: Strategy, k: usize) -> Option<&RunResult> {
        self.results
            .iter()
            .find(|r| r.rate_mbit == rate && r.strategy == s && r.joiners == k)
    }

    /// The median scale-out time of the runs of (rate, strategy, k), with their count.
    fn median(&self, rate: u32, s: Strategy, k: usize) -> Option<(f64, usize)> {
        let mut times: Vec<f64> = self
            .results
            .iter()
            .filter(|r| r.rate_mbit == rate && r.strategy == s && r.joiners == k)
            .map(|r| r.time_s)
            .collect();
        times.sort_by(f64::total_cmp);
        let n = times.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => times[n / 2],
            _ => (times[n / 2 - 1] + times[n / 2]) / 2.0,
        };
        Some((median, n))
    }

    /// Time relative to the median of the same strategy and rate with one joiner.
    fn to_one(&self, r: &RunResult) -> Option<f64> {
        self.median(r.rate_mbit, r.strategy, 1)
            .map(|(one, _)| r.time_s / one)
    }

    /// Rebuild time ÷ incremental time (medians) for the same k and rate.
    fn rebuild_ratio(&self, rate: u32, k: usize) -> Option<f64> {
        let (inc, _) = self.median(rate, Strategy::Incremental, k)?;
        let (reb, _) = self.median(rate, Strategy::Rebuild, k)?;
        Some(reb / inc)
    }

    fn rebuild_cell(&self, r: &RunResult) -> String {
        match r.strategy {
            Strategy::Rebuild => opt(self.rebuild_ratio(r.rate_mbit, r.joiners)),
            Strategy::Incremental | Strategy::Standby => "-".into(),
        }
    }

    /// nccl-tests-like rows.
    pub fn rows(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# scale-out: {} MiB weights; time = scale request → all members Ready; slowest joiner = last weights to arrive",
            self.args.size_mib
        );
        let _ = writeln!(
            out,
            "#{:>10} {:>11} {:>7} {:>12} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5}",
            "rate(Mb)",
            "strategy",
            "joiners",
            "size(B)",
            "floor(s)",
            "time(s)",
            "over(s)",
            "xfloor",
            "x1join",
            "reb/inc",
            "pod(s)",
            "vrfy(s)",
            "sync(s)",
            "join(s)",
            "gap(s)",
            "cpu%"
        );
        for r in self.results {
            let _ = writeln!(
                out,
                " {:>10} {:>11} {:>7} {:>12} {:>8.3} {:>8.3} {:>8.3} {:>7.3} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7.2} {:>5.0}",
                r.rate_mbit,
                r.strategy.name(),
                r.joiners,
                r.bytes,
                r.floor_s,
                r.time_s,
                r.over_floor(),
                r.time_s / r.floor_s,
                opt(self.to_one(r)),
                self.rebuild_cell(r),
                opt(r.first_pod_s),
                opt(r.verify_s),
                opt(r.sync_s),
                opt(r.join_s),
                r.outage_s,
                100.0 * r.machine_busy,
            );
        }
        out
    }

    /// PASS/MISS lines for the issue's targets.
    pub fn targets(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for &(rate, ref link) in &self.links {
            for r in self
                .results
                .iter()
                .filter(|r| r.rate_mbit == rate && r.strategy == Strategy::Incremental)
            {
                let ok = r.time_s <= r.floor_s + FLOOR_SLACK_S;
                lines.push(format!(
                    "**{}** {rate} Mbit/s, incremental, {} joiner{}: {:.2} s against ≤ line-rate floor + {FLOOR_SLACK_S} s = {:.2} s ({:.2} s {})",
                    if ok { "PASS" } else { "MISS" },
                    r.joiners,
                    if r.joiners == 1 { "" } else { "s" },
                    r.time_s,
                    r.floor_s + FLOOR_SLACK_S,
                    (r.time_s - (r.floor_s + FLOOR_SLACK_S)).abs(),
                    if ok { "to spare" } else { "over" },
                ));
                // What TCP itself allows: tc shapes Ethernet frames, so even iperf3's payload
                // stays ~4 % under the rate. Reported beside the issue's floor, not instead.
                if let Some(l) = link.as_ref().filter(|l| l.mbit > 0.0) {
                    let goodput_floor = r.floor_s * f64::from(rate) / l.mbit;
                    lines.push(format!(
                        "{rate} Mbit/s, incremental, {} joiner{} (reported, no threshold): {:.2} s is {:+.2} s over the goodput floor {goodput_floor:.2} s (the weights at the {:.0} Mbit/s {} measured on the same link)",
                        r.joiners,
                        if r.joiners == 1 { "" } else { "s" },
                        r.time_s,
                        r.time_s - goodput_floor,
                        l.mbit,
                        l.tool,
                    ));
                }
            }
            match (
                self.median(rate, Strategy::Incremental, 1),
                self.median(rate, Strategy::Incremental, 4),
            ) {
                (Some((one, _)), Some((four, _))) => {
                    let ratio = four / one;
                    lines.push(format!(
                        "**{}** {rate} Mbit/s, incremental, 4 joiners against ≤ {FANOUT_FACTOR} × 1 joiner: {four:.2} s / {one:.2} s = {ratio:.2}×",
                        if ratio <= FANOUT_FACTOR { "PASS" } else { "MISS" },
                    ));
                }
                _ => lines.push(format!(
                    "not measured at {rate} Mbit/s: 4 joiners ≤ {FANOUT_FACTOR} × 1 joiner (needs incremental runs with 1 and 4 joiners)"
                )),
            }
            lines.extend(self.standby_target(rate));
            let ratios: Vec<String> = self
                .args
                .joiners
                .iter()
                .filter_map(|&k| {
                    let ratio = self.rebuild_ratio(rate, k)?;
                    let gap = self.find(rate, Strategy::Rebuild, k)?.outage_s;
                    Some(format!(
                        "{k} joiner{} {ratio:.2}× (no member Ready for {gap:.2} s)",
                        if k == 1 { "" } else { "s" }
                    ))
                })
                .collect();
            if !ratios.is_empty() {
                lines.push(format!(
                    "{rate} Mbit/s, Rebuild ÷ Incremental (reported, no threshold): {}",
                    ratios.join(", ")
                ));
            }
            for r in self.results.iter().filter(|r| r.rate_mbit == rate) {
                let Some(per_gib) = r.cpu_per_gib() else {
                    continue;
                };
                lines.push(format!(
                    "**{}** {rate} Mbit/s, incremental, {} joiner{}: {per_gib:.2} agent CPU-s per GiB received against ≤ {CPU_PER_GIB_TARGET_S:.1}",
                    if per_gib <= CPU_PER_GIB_TARGET_S { "PASS" } else { "MISS" },
                    r.joiners,
                    if r.joiners == 1 { "" } else { "s" },
                ));
            }
        }
        lines
    }

    /// The warm-standby target: a scale-out served from one standby member within
    /// [`STANDBY_TARGET_S`] (median of at least [`STANDBY_MIN_RUNS`]), beside the
    /// incremental time of the same run.
    fn standby_target(&self, rate: u32) -> Option<String> {
        let (time, n) = self.median(rate, Strategy::Standby, 1)?;
        let baseline = self
            .median(rate, Strategy::Incremental, 1)
            .map(|(t, m)| format!("; incremental without standby: {t:.2} s, median of {m}"))
            .unwrap_or_default();
        let verdict = match (n >= STANDBY_MIN_RUNS, time <= STANDBY_TARGET_S) {
            (false, _) => format!("NOT JUDGED (needs ≥ {STANDBY_MIN_RUNS} runs, --repeat)"),
            (true, true) => "**PASS**".into(),
            (true, false) => "**MISS**".into(),
        };
        Some(format!(
            "{verdict} {rate} Mbit/s, 1 joiner served from a warm standby against ≤ {STANDBY_TARGET_S} s: {time:.2} s, median of {n}{baseline}"
        ))
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "{BEGIN}");
        let _ = writeln!(
            md,
            "<!-- generated by `cargo scaleout-bench --output docs/benchmarks.md`; rerun it rather than editing -->"
        );
        let _ = writeln!(md);
        let _ = writeln!(md, "```text");
        let _ = writeln!(md, "date: {}", self.provenance.date);
        let _ = writeln!(md, "host: {}", self.provenance.host);
        let _ = writeln!(
            md,
            "load average before: {}; after: {}; wall time {:.0} s",
            self.load_before,
            self.load_after,
            self.wall.as_secs_f64()
        );
        let _ = writeln!(
            md,
            "hcomm: {}, {}",
            self.provenance.revision, self.provenance.build
        );
        let _ = writeln!(
            md,
            "hosts: {} network-namespace hosts, 1 device each; data links tc htb per host and direction",
            self.args.hosts(),
        );
        for (rate, link) in &self.links {
            match link {
                Some(l) => {
                    let _ = writeln!(
                        md,
                        "raw link at {rate} Mbit/s, host-0 → host-1 ({}, {MEASURE_S} s after {OMIT_S} s omitted): {:.0} Mbit/s goodput = {:.1} % of the tc rate",
                        l.tool,
                        l.mbit,
                        100.0 * l.mbit / f64::from(*rate)
                    );
                }
                None => {
                    let _ = writeln!(md, "raw link at {rate} Mbit/s: not measured");
                }
            }
        }
        let _ = writeln!(
            md,
            "weights: {} MiB per run, generated with a distinct seed per run (4 files, cut at the agent's default chunk size)",
            self.args.size_mib
        );
        let _ = writeln!(md, "```");
        let _ = writeln!(md);
        let _ = writeln!(md, "Command (as root):");
        let _ = writeln!(md);
        let _ = writeln!(md, "```sh");
        let _ = writeln!(md, "cargo scaleout-bench {}", self.argv.join(" "));
        let _ = writeln!(md, "```");
        let _ = writeln!(md);
        let _ = writeln!(
            md,
            "| link (Mbit/s) | strategy | joiners | size (MiB) | floor (s) | time (s) | time − floor (s) | ratio to floor | ratio to 1 joiner | Rebuild / Incremental | no member Ready (s) | first Pod (s) | slowest joiner: verify / sync / join (s) | machine CPU busy | agents CPU (s) | agents CPU per GiB received (s) | set copies sent: members / joiners |"
        );
        let _ = writeln!(
            md,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for r in self.results {
            let _ = writeln!(
                md,
                "| {} | {}{} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {:.2} | {} | {} / {} / {} | {:.0} % | {:.1} | {} | {} |",
                r.rate_mbit,
                r.strategy.label(),
                r.teardown_s
                    .map(|t| format!(" (old member gone at {t:.2} s)"))
                    .unwrap_or_default(),
                r.joiners,
                r.bytes / (1024 * 1024),
                r.floor_s,
                r.time_s,
                r.over_floor(),
                r.time_s / r.floor_s,
                opt(self.to_one(r)),
                match r.strategy {
                    Strategy::Rebuild => opt(self.rebuild_ratio(r.rate_mbit, r.joiners)),
                    Strategy::Incremental | Strategy::Standby => "–".into(),
                },
                r.outage_s,
                opt(r.first_pod_s),
                opt(r.verify_s),
                opt(r.sync_s),
                opt(r.join_s),
                100.0 * r.machine_busy,
                r.agent_cpu_s,
                opt(r.cpu_per_gib()),
                r.copies_sent
                    .map(|(m, j)| format!("{m:.2} / {j:.2}"))
                    .unwrap_or_else(|| "-".into()),
            );
        }
        let _ = writeln!(md);
        let _ = writeln!(md, "Targets:");
        let _ = writeln!(md);
        for t in self.targets() {
            let _ = writeln!(md, "- {t}");
        }
        let _ = writeln!(md, "{END}");
        md
    }
}

pub fn opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests;
