//! Samples taken at the edges of a phase, and their deltas: the apiserver's own request
//! counters (`apiserver_request_total`, by verb, resource and subresource — counted by the
//! server, so they cannot be flattered by a client), the operator's reconcile counter and
//! duration histogram and its API calls' latency by verb and resource (its `/metrics`),
//! the operator's memory and CPU time, and the CPU time of every other process on the
//! path (the control plane's components, the bench itself; `/proc`).
//! Parsing is pure and unit-tested; the fetches are thin.

use std::collections::BTreeMap;

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// (verb, resource, subresource).
pub type RequestKey = (String, String, String);

/// A cumulative histogram: (upper bound, count), ascending, `+Inf` last.
pub type Buckets = Vec<(f64, f64)>;

/// The operator's API-call histograms by (verb, `resource[/subresource]`).
pub type CallLatency = BTreeMap<(String, String), Buckets>;

/// The operator's name among the processes of [`Sample::cpu_by_process`].
pub const OPERATOR: &str = "hcomm-operator";

/// One sample.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// apiserver requests so far.
    pub requests: BTreeMap<RequestKey, f64>,
    /// The operator's reconciles so far.
    pub reconciles: f64,
    /// Its reconciles deferred (no work: the Pod cache lacked the group's own writes).
    pub deferred: f64,
    /// The operator's reconcile-duration histogram.
    pub buckets: Buckets,
    /// The operator's API calls' durations, as it saw them.
    pub calls: CallLatency,
    /// The operator's CPU seconds (user + system) so far.
    pub cpu_s: f64,
    /// The operator's resident memory now, MiB.
    pub rss_mib: f64,
    /// CPU seconds so far of each watched process, by name: where a phase's CPU went
    /// when the machine is the limit.
    pub cpu_by_process: BTreeMap<String, f64>,
}

impl Sample {
    /// Takes a sample: the apiserver's `/metrics` through `client`, the operator's through
    /// `operator_metrics` (a plain `http://host:port/path` URL), `/proc/<pid>` of the
    /// operator (also listed in `cpu_by_process` as [`OPERATOR`]) and of each `(name, pid)`
    /// in `watched` (one gone is left out).
    pub async fn take(
        client: &kube::Client,
        operator_metrics: &str,
        pid: u32,
        watched: &[(String, u32)],
    ) -> Result<Sample> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let apiserver = client
            .request_text(request)
            .await
            .context("GET the apiserver's /metrics")?;
        let operator = http_get(operator_metrics).await?;
        let (cpu_s, rss_mib) = hcomm_e2e::bench::process(pid)?;
        let (reconciles, deferred, buckets) = reconcile_metrics(&operator);
        Ok(Sample {
            requests: apiserver_requests(&apiserver),
            reconciles,
            deferred,
            buckets,
            calls: call_latency(&operator),
            cpu_s,
            rss_mib,
            cpu_by_process: watched
                .iter()
                .filter_map(|(name, pid)| {
                    let (cpu, _) = hcomm_e2e::bench::process(*pid).ok()?;
                    Some((name.clone(), cpu))
                })
                .chain([(OPERATOR.to_owned(), cpu_s)])
                .collect(),
        })
    }

    /// What happened between `self` (earlier) and `later`.
    pub fn delta(&self, later: &Sample) -> Delta {
        let requests = later
            .requests
            .iter()
            .map(|(k, v)| (k.clone(), v - self.requests.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        let calls = later
            .calls
            .iter()
            .map(|(k, after)| {
                let before = self.calls.get(k).map_or(&[][..], Vec::as_slice);
                (k.clone(), bucket_delta(before, after))
            })
            .filter(|(_, b)| b.last().is_some_and(|(_, n)| *n > 0.0))
            .collect();
        Delta {
            requests,
            reconciles: later.reconciles - self.reconciles,
            deferred: later.deferred - self.deferred,
            buckets: bucket_delta(&self.buckets, &later.buckets),
            calls,
            cpu_s: later.cpu_s - self.cpu_s,
            rss_mib: later.rss_mib,
            cpu_by_process: later
                .cpu_by_process
                .iter()
                .filter_map(|(name, after)| {
                    Some((name.clone(), after - self.cpu_by_process.get(name)?))
                })
                .collect(),
        }
    }
}

/// The change over a phase.
#[derive(Debug, Clone, Default)]
pub struct Delta {
    pub requests: BTreeMap<RequestKey, f64>,
    pub reconciles: f64,
    pub deferred: f64,
    pub buckets: Buckets,
    /// The operator's API calls made in the phase, by (verb, resource).
    pub calls: CallLatency,
    pub cpu_s: f64,
    /// At the end of the phase.
    pub rss_mib: f64,
    /// CPU seconds of each watched process seen at both ends.
    pub cpu_by_process: BTreeMap<String, f64>,
}

impl Delta {
    /// The `q` quantile of the reconcile durations, in milliseconds, interpolated linearly
    /// inside its bucket as Prometheus' `histogram_quantile` does; `None` without
    /// reconciles.
    pub fn reconcile_quantile_ms(&self, q: f64) -> Option<f64> {
        quantile(&self.buckets, q).map(|s| s * 1000.0)
    }

    /// Requests of every verb `verb` (e.g. `LIST`), all resources.
    pub fn verb_total(&self, verb: &str) -> f64 {
        self.requests
            .iter()
            .filter(|((v, _, _), _)| v == verb)
            // A fold from +0: an empty f64 sum is -0, which prints as "-0".
            .fold(0.0, |total, (_, n)| total + n)
    }
}

/// `after` − `before`, bucket by bucket (a bucket missing before counts from 0).
fn bucket_delta(before: &[(f64, f64)], after: &[(f64, f64)]) -> Buckets {
    after
        .iter()
        .map(|(le, v)| {
            let was = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, b)| *b);
            (*le, v - was)
        })
        .collect()
}

/// The quantile of a cumulative histogram ((upper bound, count) ascending, `+Inf` last).
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let inside = count - lower.1;
            let fraction = if inside > 0.0 {
                (rank - lower.1) / inside
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * fraction);
        }
        lower = (le, count);
    }
    Some(lower.0)
}

/// `apiserver_request_total`, summed over codes and versions, by (verb, resource,
/// subresource).
pub fn apiserver_requests(text: &str) -> BTreeMap<RequestKey, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
        *out.entry((get("verb"), get("resource"), get("subresource")))
            .or_default() += value;
    }
    out
}

/// The operator's `hcomm_operator_reconciles_total`,
/// `hcomm_operator_reconciles_deferred_total` and the buckets of
/// `hcomm_operator_reconcile_duration_seconds`.
pub fn reconcile_metrics(text: &str) -> (f64, f64, Buckets) {
    let (mut reconciles, mut deferred) = (0.0, 0.0);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("hcomm_operator_reconciles_total ") {
            reconciles = v.trim().parse().unwrap_or(0.0);
        } else if let Some(v) = line.strip_prefix("hcomm_operator_reconciles_deferred_total ") {
            deferred = v.trim().parse().unwrap_or(0.0);
        }
    }
    let buckets = histograms(text, "hcomm_operator_reconcile_duration_seconds")
        .remove(&BTreeMap::new())
        .unwrap_or_default();
    (reconciles, deferred, buckets)
}

/// `hcomm_operator_api_request_duration_seconds` by (verb, resource).
pub fn call_latency(text: &str) -> CallLatency {
    histograms(text, "hcomm_operator_api_request_duration_seconds")
        .into_iter()
        .map(|(labels, b)| {
            let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
            ((get("verb"), get("resource")), b)
        })
        .collect()
}

/// Every series of histogram `name`: its buckets (ascending) by its labels other than `le`.
fn histograms(text: &str, name: &str) -> BTreeMap<BTreeMap<String, String>, Buckets> {
    let prefix = format!("{name}_bucket{{");
    let mut out: BTreeMap<_, Buckets> = BTreeMap::new();
    for line in text.lines() {
        let Some((labels, value)) = line
            .strip_prefix(&prefix)
            .and_then(|rest| rest.rsplit_once("} "))
        else {
            continue;
        };
        let mut labels = parse_labels(labels);
        let le = labels.remove("le").map_or(f64::NAN, |l| {
            if l == "+Inf" {
                f64::INFINITY
            } else {
                l.parse().unwrap_or(f64::NAN)
            }
        });
        if let Ok(value) = value.trim().parse::<f64>()
            && !le.is_nan()
        {
            out.entry(labels).or_default().push((le, value));
        }
    }
    for buckets in out.values_mut() {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// `a="x",b="y"` (values without escaped quotes, as these metrics have).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter_map(|pair| {
            let (k, v) = pair.split_once("=\"")?;
            Some((k.trim().to_owned(), v.trim_end_matches('"').to_owned()))
        })
        .collect()
}

/// A plain HTTP/1.0 GET of `url` (`http://host:port/path`) with a 10 s deadline.
async fn http_get(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("not http: {url}"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        stream
            .write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
            .await?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await?;
        anyhow::Ok(body)
    };
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), fetch)
        .await
        .map_err(|_| anyhow!("GET {url}: no answer within 10 s"))??;
    Ok(text
        .split_once("\r\n\r\n")
        .map_or(text.clone(), |(_, b)| b.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quantile_interpolates_inside_its_bucket() {
        let b = [
            (0.01, 50.0),
            (0.1, 90.0),
            (1.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert!((quantile(&b, 0.5).unwrap() - 0.01).abs() < 1e-9);
        assert!((quantile(&b, 0.7).unwrap() - 0.055).abs() < 1e-9);
        assert!((quantile(&b, 0.99).unwrap() - 0.91).abs() < 1e-9);
        assert_eq!(quantile(&[(0.1, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
    }

    #[test]
    fn cpu_by_process_counts_only_processes_seen_at_both_ends() {
        let before = Sample {
            cpu_by_process: BTreeMap::from([("etcd".to_owned(), 1.5), ("kwok".to_owned(), 4.0)]),
            ..Sample::default()
        };
        let later = Sample {
            cpu_by_process: BTreeMap::from([
                ("etcd".to_owned(), 4.0),
                ("restarted".to_owned(), 9.0),
            ]),
            ..Sample::default()
        };
        assert_eq!(
            before.delta(&later).cpu_by_process,
            BTreeMap::from([("etcd".to_owned(), 2.5)])
        );
    }

    #[test]
    fn apiserver_counters_are_summed_by_verb_resource_and_subresource() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="410",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="status",verb="PATCH",version="v1"} 7
"#;
        let r = apiserver_requests(text);
        assert_eq!(r[&("LIST".into(), "pods".into(), String::new())], 4.0);
        assert_eq!(r[&("PATCH".into(), "pods".into(), "status".into())], 7.0);
    }

    #[test]
    fn the_operators_histogram_and_counter_are_read() {
        let text = "hcomm_operator_reconciles_total 12\n\
            hcomm_operator_reconciles_deferred_total 4\n\
            hcomm_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 3\n\
            hcomm_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 12\n\
            hcomm_operator_reconcile_duration_seconds_bucket{le=\"0.1\"} 11\n";
        let (n, deferred, b) = reconcile_metrics(text);
        assert_eq!((n, deferred), (12.0, 4.0));
        assert_eq!(b, vec![(0.005, 3.0), (0.1, 11.0), (f64::INFINITY, 12.0)]);
    }

    #[test]
    fn the_operators_call_latency_is_read_by_verb_and_resource() {
        let text = "hcomm_operator_api_request_duration_seconds_bucket{resource=\"pods\",verb=\"POST\",le=\"0.01\"} 2\n\
            hcomm_operator_api_request_duration_seconds_bucket{resource=\"pods\",verb=\"POST\",le=\"+Inf\"} 3\n\
            hcomm_operator_api_request_duration_seconds_bucket{resource=\"hcommgroups/status\",verb=\"PATCH\",le=\"+Inf\"} 5\n\
            hcomm_operator_api_request_duration_seconds_count{resource=\"pods\",verb=\"POST\"} 3\n";
        let calls = call_latency(text);
        assert_eq!(
            calls[&("POST".into(), "pods".into())],
            vec![(0.01, 2.0), (f64::INFINITY, 3.0)]
        );
        assert_eq!(
            calls[&("PATCH".into(), "hcommgroups/status".into())],
            vec![(f64::INFINITY, 5.0)]
        );
        let before = Sample {
            calls: calls.clone(),
            ..Sample::default()
        };
        let mut later = before.clone();
        later
            .calls
            .get_mut(&("POST".into(), "pods".into()))
            .unwrap()
            .iter_mut()
            .for_each(|b| b.1 += 1.0);
        let d = before.delta(&later);
        assert_eq!(d.calls.len(), 1, "only calls made in the phase");
        assert_eq!(
            d.calls[&("POST".into(), "pods".into())],
            vec![(0.01, 1.0), (f64::INFINITY, 1.0)]
        );
    }
}
