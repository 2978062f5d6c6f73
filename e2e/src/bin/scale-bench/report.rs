//! The bench's results: one [`Row`] per size, rendered as a Markdown table (for
//! `docs/benchmarks.md`) and as the last line for scripts. Pure.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::measure::{Delta, quantile};

/// Resources only the operator reads or writes in the bench (besides the bench's own
/// requests, taken out): its requests per reconcile are counted over these. Pods are
/// written by the scheduler (`binding`) and kwok (`status`) too, so only the main
/// resource counts; Events (the scheduler posts some), Leases (every component renews
/// one) and Nodes' status (kwok) are left out, and so is the groups' `scale` (the
/// disruption controller reads it for every budget sync). The groups' Secrets and
/// PodDisruptionBudgets are the operator's alone too (the disruption controller writes
/// only the budgets' `status`).
const OPERATOR_RESOURCES: [&str; 7] = [
    "pods",
    "configmaps",
    "hcommgroups",
    "hcommnodes",
    "nodes",
    "secrets",
    "poddisruptionbudgets",
];

/// Verbs shown per reconcile, in this order.
const VERBS: [&str; 7] = [
    "LIST", "GET", "CREATE", "APPLY", "PATCH", "UPDATE", "DELETE",
];

/// One measured size.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub members: u32,
    pub groups: u32,
    pub per_group: u32,
    /// All groups from the previous size to half of `per_group`.
    pub setup_s: f64,
    /// One group from half to `per_group`, alone.
    pub single_created_s: f64,
    pub single_ready_s: f64,
    /// Every group from half to `per_group` at once (None with one group).
    pub storm_created_s: Option<f64>,
    pub storm_ready_s: Option<f64>,
    /// The reconcile p99 over the single phase alone, and over the storm alone: one group
    /// scaling on a quiet API server against fifty on a saturated one.
    pub single_p99_ms: Option<f64>,
    pub storm_p99_ms: Option<f64>,
    /// Over the single and storm phases.
    pub busy: Delta,
    /// The bench's own requests over the same phases.
    pub own_busy: BTreeMap<(String, String, String), u64>,
    /// Over the quiet window.
    pub steady: Delta,
    pub steady_s: f64,
    /// The operator's RSS at the end of the size (after the quiet window), MiB.
    pub rss_mib: f64,
}

impl Row {
    pub fn p50_ms(&self) -> f64 {
        self.busy.reconcile_quantile_ms(0.5).unwrap_or(0.0)
    }

    pub fn p99_ms(&self) -> f64 {
        self.busy.reconcile_quantile_ms(0.99).unwrap_or(0.0)
    }

    /// Settle time: the storm's Ready time, or the single group's when there is one group.
    pub fn settle_s(&self) -> f64 {
        self.storm_ready_s.unwrap_or(self.single_ready_s)
    }

    /// The operator's requests per reconcile by verb, over [`OPERATOR_RESOURCES`], with
    /// the bench's own taken out.
    pub fn per_reconcile(&self) -> Vec<(&'static str, f64)> {
        let reconciles = self.busy.reconciles.max(1.0);
        VERBS
            .iter()
            .map(|&verb| {
                let total: f64 = self
                    .busy
                    .requests
                    .iter()
                    .filter(|((v, r, s), _)| {
                        v == verb
                            && OPERATOR_RESOURCES.contains(&r.as_str())
                            && (s.is_empty() || (r == "hcommgroups" && s == "status"))
                    })
                    .map(|(k, n)| n - self.own_busy.get(k).copied().unwrap_or(0) as f64)
                    .sum();
                (verb, total.max(0.0) / reconciles)
            })
            .filter(|(_, n)| *n > 0.0)
            .collect()
    }

    /// The steady window's list calls (every client; the bench itself lists nothing).
    pub fn list_calls_steady(&self) -> f64 {
        self.steady.verb_total("LIST")
    }

    /// The storm's Ready time over one group's.
    pub fn storm_ratio(&self) -> Option<f64> {
        Some(self.storm_ready_s? / self.single_ready_s.max(1e-9))
    }
}

/// The Markdown table of `rows`.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| members | groups × size | setup (s) | one group: Pods created / Ready (s) | storm: Pods created / Ready (s) | storm ÷ one | reconciles (deferred) | p50 / p99 (ms) | p99 one group / storm (ms) | requests per reconcile | list calls, quiet window | RSS (MiB) | CPU (s) |\n\
         |---:|---|---:|---|---|---:|---:|---|---|---|---|---:|---:|\n",
    );
    for r in rows {
        let storm = match (r.storm_created_s, r.storm_ready_s) {
            (Some(c), Some(s)) => format!("{c:.1} / {s:.1}"),
            _ => "— (one group)".into(),
        };
        let ratio = r.storm_ratio().map_or("—".into(), |x| format!("{x:.2}"));
        let per: Vec<String> = r
            .per_reconcile()
            .iter()
            .map(|(v, n)| format!("{v} {n:.2}"))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} × {} | {:.1} | {:.1} / {:.1} | {storm} | {ratio} | {:.0} ({:.0}) | {:.1} / {:.1} | {} / {} | {} | {:.0} in {:.0} s ({:.0} reconciles) | {:.0} | {:.1} |",
            r.members,
            r.groups,
            r.per_group,
            r.setup_s,
            r.single_created_s,
            r.single_ready_s,
            r.busy.reconciles,
            r.busy.deferred,
            r.p50_ms(),
            r.p99_ms(),
            number(r.single_p99_ms),
            number(r.storm_p99_ms),
            per.join(", "),
            r.list_calls_steady(),
            r.steady_s,
            r.steady.reconciles,
            r.rss_mib,
            r.busy.cpu_s,
        );
    }
    out
}

/// The apiserver's request deltas of a phase, one `verb resource[/sub] n` per line
/// (bench's own taken out), for the log.
pub fn requests_detail(delta: &Delta, own: &BTreeMap<(String, String, String), u64>) -> String {
    let mut out = String::new();
    for (key @ (verb, resource, sub), n) in &delta.requests {
        let n = n - own.get(key).copied().unwrap_or(0) as f64;
        if n > 0.0 && verb != "WATCH" {
            let what = if sub.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{sub}")
            };
            let _ = writeln!(out, "  {verb:<7} {what:<28} {n:>8.0}");
        }
    }
    out
}

/// The operator's API calls of a phase as it timed them, one `verb resource n p50 p99`
/// per line (watches left out: timed only until their stream opened), for the log: which
/// call a slow reconcile waits on.
pub fn call_latency_detail(delta: &Delta) -> String {
    let mut out = String::new();
    for ((verb, resource), buckets) in &delta.calls {
        if verb == "WATCH" {
            continue;
        }
        let n = buckets.last().map_or(0.0, |(_, n)| *n);
        let ms = |q| quantile(buckets, q).map_or(f64::NAN, |s| s * 1000.0);
        let _ = writeln!(
            out,
            "  operator {verb:<7} {resource:<28} {n:>8.0}  p50 {:>7.1} ms  p99 {:>7.1} ms",
            ms(0.5),
            ms(0.99)
        );
    }
    out
}

/// `12.3 ms`, or `—` without reconciles.
pub fn ms(value: Option<f64>) -> String {
    value.map_or("—".into(), |v| format!("{v:.1} ms"))
}

/// `12.3`, or `—`.
fn number(value: Option<f64>) -> String {
    value.map_or("—".into(), |v| format!("{v:.1}"))
}

/// The CPU seconds of each watched process over a phase of `wall_s` seconds, busiest
/// first, each with its share of the machine's CPUs, for the log: on a small machine the
/// control plane, not the operator, may be what a phase waits for.
pub fn cpu_detail(delta: &Delta, wall_s: f64) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    let mut by_cpu: Vec<(&String, &f64)> = delta.cpu_by_process.iter().collect();
    by_cpu.sort_by(|a, b| b.1.total_cmp(a.1));
    let total: f64 = by_cpu.iter().map(|(_, s)| **s).sum();
    let share = |seconds: f64| 100.0 * seconds / (wall_s * cpus).max(1e-9);
    let mut out = format!(
        "  CPU over {wall_s:.1} s on {cpus:.0} CPUs: {total:.1} s watched ({:.0} % of the machine)\n",
        share(total)
    );
    for (name, seconds) in by_cpu {
        let _ = writeln!(
            out,
            "  cpu {name:<24} {seconds:>8.1} s  {:>5.1} % of the machine",
            share(*seconds)
        );
    }
    out
}

/// The last line, for scripts: the largest size's numbers.
pub fn last_line(row: &Row) -> String {
    format!(
        "members={} groups={} settle_s={:.2} reconcile_p99_ms={:.1} rss_mib={:.0} list_calls_steady={:.0}",
        row.members,
        row.groups,
        row.settle_s(),
        row.p99_ms(),
        row.rss_mib,
        row.list_calls_steady()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(v: &str, r: &str, s: &str) -> (String, String, String) {
        (v.into(), r.into(), s.into())
    }

    #[test]
    fn requests_per_reconcile_leave_out_other_clients_and_the_bench() {
        let mut row = Row {
            members: 1000,
            groups: 50,
            single_ready_s: 2.0,
            storm_ready_s: Some(3.0),
            ..Row::default()
        };
        row.busy.reconciles = 10.0;
        row.busy.requests = BTreeMap::from([
            (key("LIST", "pods", ""), 30.0),
            (key("PATCH", "pods", ""), 25.0),
            (key("PATCH", "pods", "status"), 99.0),
            (key("CREATE", "pods", "binding"), 99.0),
            (key("PATCH", "hcommgroups", "status"), 10.0),
            (key("GET", "hcommgroups", "scale"), 99.0),
            (key("CREATE", "events", ""), 99.0),
        ]);
        row.own_busy = BTreeMap::from([(key("PATCH", "pods", ""), 20)]);
        assert_eq!(
            row.per_reconcile(),
            vec![("LIST", 3.0), ("PATCH", 1.5)],
            "pods/status, bindings, events and the groups' scale are other clients'"
        );
        assert_eq!(row.storm_ratio(), Some(1.5));
        assert_eq!(
            last_line(&row),
            "members=1000 groups=50 settle_s=3.00 reconcile_p99_ms=0.0 rss_mib=0 list_calls_steady=0"
        );
        let table = markdown(&[row]);
        assert!(table.contains("| 1000 | 50 × 0 | 0.0 |"));
        assert!(table.contains("| 0.0 / 0.0 | — / — |"), "{table}");
    }

    #[test]
    fn cpu_is_listed_busiest_first_with_its_share() {
        let delta = Delta {
            cpu_by_process: BTreeMap::from([
                ("etcd".to_owned(), 2.0),
                ("kube-apiserver".to_owned(), 8.0),
            ]),
            ..Delta::default()
        };
        let text = cpu_detail(&delta, 10.0);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("10.0 s watched"), "{text}");
        assert!(lines[1].contains("kube-apiserver"), "{text}");
        assert!(lines[2].contains("etcd"), "{text}");
    }
}
