//! Per-request records and the aggregate counters of a load run, updated as each request
//! ends so they can be read while the run goes on.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::router::Attempt;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// 200 with an accepted digest.
    Served,
    /// 200, but the digest was missing or not accepted.
    WrongDigest,
    /// Never got a 200.
    Failed,
}

/// One request, for timelines.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    pub id: u64,
    /// Start, in ms since the run started.
    pub start_ms: f64,
    /// Start, in ms since the Unix epoch (to line up with Kubernetes events).
    pub start_unix_ms: u64,
    pub latency_ms: f64,
    pub outcome: Outcome,
    /// Final HTTP status, if any endpoint answered.
    pub status: Option<u16>,
    /// The member that answered last (from the answer's `pod`, else the endpoint).
    pub pod: Option<String>,
    pub digest: Option<String>,
    pub epoch: Option<u64>,
    /// The communicator backend the answering member served on (the answer's `comm`).
    pub comm: Option<String>,
    pub attempts: u32,
    pub tried: Vec<Attempt>,
    pub error: Option<String>,
}

/// Per-member counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PodStats {
    /// 200 answers.
    pub served: u64,
    /// 503 answers with `not ready` (traffic sent before the member was ready).
    pub refused_not_ready: u64,
    /// 503 answers with `draining`.
    pub refused_draining: u64,
    /// Other non-200 answers and transport failures.
    pub errors: u64,
    /// Digests this member answered with.
    pub digests: BTreeSet<String>,
    /// When the first request it served was sent (ms since the Unix epoch): a harness
    /// compares it with the time the member's readiness gate turned True.
    pub first_ok_unix_ms: Option<u64>,
    /// When the last request it served was sent.
    pub last_ok_unix_ms: Option<u64>,
}

/// Latency summary of served requests, in ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Aggregate counters of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadStats {
    pub elapsed_s: f64,
    /// Requests started and not yet ended.
    pub inflight: u64,
    /// Requests ended.
    pub completed: u64,
    /// Requests that got a 200 (including `wrong_digest` ones).
    pub served: u64,
    /// Requests that never got a 200.
    pub failed: u64,
    /// 200 answers with a missing or not accepted digest.
    pub wrong_digest: u64,
    /// Requests that needed more than one attempt.
    pub retried: u64,
    /// Attempts in all.
    pub attempts: u64,
    /// Attempts refused with 503 `not ready`.
    pub refused_not_ready: u64,
    /// Attempts refused with 503 `draining`.
    pub refused_draining: u64,
    pub by_pod: BTreeMap<String, PodStats>,
    /// Members that answered with more than one digest.
    pub mixed_digest_members: Vec<String>,
    pub latency_ms: Latency,
    /// Records not kept because the cap was reached (counters still include them).
    pub records_dropped: u64,
    /// The first [`FAILURES_KEPT`] failed requests, each in one line (when it started,
    /// every attempt's member and error), so a harness that only sees the stats can say
    /// why requests failed without the records file.
    pub first_failures: Vec<String>,
    /// Served answers by the communicator backend the member reported (`tcp`, `hccl`;
    /// `none` from a worker that says nothing): which data path actually served.
    pub by_comm: BTreeMap<String, u64>,
}

/// How many failed requests [`LoadStats::first_failures`] describes.
pub const FAILURES_KEPT: usize = 8;

impl RequestRecord {
    /// One line: start, error, then each attempt as `pod: status/error after ms`.
    fn failure_line(&self) -> String {
        let tried: Vec<String> = self
            .tried
            .iter()
            .map(|a| {
                let who = a.pod.as_deref().unwrap_or(&a.address);
                let what = match (a.status, a.error.as_deref()) {
                    (Some(st), Some(e)) => format!("{st} {e}"),
                    (Some(st), None) => st.to_string(),
                    (None, Some(e)) => e.to_owned(),
                    (None, None) => "no answer".to_owned(),
                };
                format!("{who}: {what} after {:.0} ms", a.latency_ms)
            })
            .collect();
        format!(
            "at {:.1} s (unix {} ms), {:.0} ms: {}; tried [{}]",
            self.start_ms / 1000.0,
            self.start_unix_ms,
            self.latency_ms,
            self.error.as_deref().unwrap_or("no 200"),
            tried.join("; ")
        )
    }
}

/// The running aggregate and the kept records.
#[derive(Debug, Default)]
pub(crate) struct Aggregate {
    pub stats: LoadStats,
    pub records: Vec<RequestRecord>,
    served_latencies: Vec<f64>,
}

impl Aggregate {
    /// Folds one ended request in.
    pub fn add(&mut self, r: RequestRecord, max_records: usize) {
        let s = &mut self.stats;
        s.completed += 1;
        s.attempts += u64::from(r.attempts);
        if r.attempts > 1 {
            s.retried += 1;
        }
        let last = r.tried.len().saturating_sub(1);
        for (i, a) in r.tried.iter().enumerate() {
            let pod = a.pod.clone().unwrap_or_else(|| a.address.clone());
            let ps = s.by_pod.entry(pod).or_default();
            match (a.status, a.error.as_deref()) {
                (Some(503), Some("not ready")) => {
                    s.refused_not_ready += 1;
                    ps.refused_not_ready += 1;
                }
                (Some(503), Some("draining")) => {
                    s.refused_draining += 1;
                    ps.refused_draining += 1;
                }
                // The served answer is counted below, under the pod it names.
                (Some(200), _) if i == last => {}
                _ => ps.errors += 1,
            }
        }
        match r.outcome {
            Outcome::Served | Outcome::WrongDigest => {
                s.served += 1;
                if r.outcome == Outcome::WrongDigest {
                    s.wrong_digest += 1;
                }
                self.served_latencies.push(r.latency_ms);
                *s.by_comm
                    .entry(r.comm.clone().unwrap_or_else(|| "none".into()))
                    .or_default() += 1;
                if let Some(pod) = &r.pod {
                    let ps = s.by_pod.entry(pod.clone()).or_default();
                    ps.served += 1;
                    let sent = r.start_unix_ms;
                    ps.first_ok_unix_ms = Some(ps.first_ok_unix_ms.map_or(sent, |t| t.min(sent)));
                    ps.last_ok_unix_ms = Some(ps.last_ok_unix_ms.map_or(sent, |t| t.max(sent)));
                    if let Some(d) = &r.digest {
                        ps.digests.insert(d.clone());
                        if ps.digests.len() > 1 && !s.mixed_digest_members.contains(pod) {
                            s.mixed_digest_members.push(pod.clone());
                            s.mixed_digest_members.sort();
                        }
                    }
                }
            }
            Outcome::Failed => {
                s.failed += 1;
                if s.first_failures.len() < FAILURES_KEPT {
                    s.first_failures.push(r.failure_line());
                }
            }
        }
        if self.records.len() < max_records {
            self.records.push(r);
        } else {
            s.records_dropped += 1;
        }
    }

    /// The counters with latency percentiles filled in.
    pub fn snapshot(&self) -> LoadStats {
        let mut s = self.stats.clone();
        s.latency_ms = latency(&self.served_latencies);
        s
    }
}

fn latency(samples: &[f64]) -> Latency {
    if samples.is_empty() {
        return Latency::default();
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Latency {
        p50: at(0.5),
        p99: at(0.99),
        max: v[v.len() - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(pod: &str, status: Option<u16>, error: Option<&str>) -> Attempt {
        Attempt {
            pod: Some(pod.into()),
            address: "10.0.0.1:8080".into(),
            status,
            error: error.map(Into::into),
            latency_ms: 1.0,
        }
    }

    fn record(outcome: Outcome, pod: &str, digest: &str, tried: Vec<Attempt>) -> RequestRecord {
        RequestRecord {
            id: 0,
            start_ms: 0.0,
            start_unix_ms: 0,
            latency_ms: 10.0,
            outcome,
            status: Some(200),
            pod: Some(pod.into()),
            digest: Some(digest.into()),
            epoch: Some(1),
            comm: Some("tcp".into()),
            attempts: tried.len() as u32,
            tried,
            error: None,
        }
    }

    #[test]
    fn counters_follow_outcomes_and_a_member_with_two_digests_is_flagged() {
        let mut agg = Aggregate::default();
        agg.add(
            record(
                Outcome::Served,
                "b",
                "sha256:1",
                vec![
                    attempt("a", Some(503), Some("not ready")),
                    attempt("b", Some(200), None),
                ],
            ),
            10,
        );
        agg.add(
            record(
                Outcome::WrongDigest,
                "b",
                "sha256:2",
                vec![attempt("b", Some(200), None)],
            ),
            10,
        );
        let mut failed = record(
            Outcome::Failed,
            "a",
            "",
            vec![
                attempt("a", Some(503), Some("draining")),
                attempt("c", None, Some("connect: refused")),
            ],
        );
        failed.pod = None;
        failed.digest = None;
        agg.add(failed, 2);
        let s = agg.snapshot();
        assert_eq!(
            (
                s.completed,
                s.served,
                s.failed,
                s.wrong_digest,
                s.retried,
                s.attempts
            ),
            (3, 2, 1, 1, 2, 5)
        );
        assert_eq!((s.refused_not_ready, s.refused_draining), (1, 1));
        assert_eq!(s.by_pod["b"].served, 2);
        assert_eq!(s.by_pod["a"].refused_not_ready, 1);
        assert_eq!(s.by_pod["c"].errors, 1);
        assert_eq!(s.mixed_digest_members, vec!["b".to_string()]);
        assert_eq!(s.records_dropped, 1);
        assert_eq!(agg.records.len(), 2);
        assert_eq!(s.latency_ms.max, 10.0);
        assert_eq!(
            s.first_failures,
            vec![
                "at 0.0 s (unix 0 ms), 10 ms: no 200; tried [a: 503 draining after 1 ms; \
                 c: connect: refused after 1 ms]"
                    .to_string()
            ]
        );
    }

    #[test]
    fn only_the_first_failures_are_described() {
        let mut agg = Aggregate::default();
        for _ in 0..FAILURES_KEPT + 3 {
            let mut r = record(Outcome::Failed, "a", "", vec![]);
            r.error = Some("no ready endpoints".into());
            agg.add(r, 0);
        }
        let s = agg.snapshot();
        assert_eq!(s.failed, FAILURES_KEPT as u64 + 3);
        assert_eq!(s.first_failures.len(), FAILURES_KEPT);
        assert!(s.first_failures[0].contains("no ready endpoints; tried []"));
    }
}
