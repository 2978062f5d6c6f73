//! `cargo demo --autoscale`: the decode pool moved by an autoscaler instead of
//! `kubectl scale`. The testbed's autoscaling chain (`testbed::autoscaling`: Prometheus,
//! KEDA's operator and metrics server, the HPA controller) runs the example
//! `ScaledObject`; a load step raises the decode workers' requests in flight, the HPA
//! raises the group to 4, the step ends, the scale-down stabilisation passes and the HPA
//! takes it back to 2. Every half second the demo samples the chain's links — load
//! offered, the metric Prometheus holds, the HPA's desired replicas, the group's Ready
//! members — prints them as a table and draws them ([`render_svg`]).

mod chart;

pub use chart::render_svg;

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hcomm_crds::HcommGroup;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Api;

use super::Clock;
use crate::testbed::autoscaling::{Autoscaling, example_scaled_object, wait_hpa_reads};
use crate::testbed::examples::{NAMESPACE, POOL_WAIT};
use crate::testbed::{self, LoadOptions, LoadRun, Result, Testbed};

/// The example the demo applies, and the HPA KEDA makes for it.
const EXAMPLE: &str = "keda-decode.yaml";
const SCALED_OBJECT: &str = "decode";
const HPA: &str = "keda-hpa-decode";
/// What the HPA's metric reads (the example's query).
const METRIC: &str = r#"sum(hcomm_worker_requests_in_flight{group="decode"})"#;
/// The group's bounds in the demo's copy of the example.
const MIN: u64 = 2;
const MAX: u64 = 4;
/// Requests in flight the load step adds to the base 4: 16 against the example's 4 per
/// member asks for 4 members.
const STEP: u32 = 12;
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// How long the metric must have read the whole offered load before the HPA's size
/// counts as its answer to it: KEDA's 1 s poll and two of the HPA's 2 s syncs.
const SETTLE: Duration = Duration::from_secs(5);

/// One sample of the chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the chain was up.
    pub t: f64,
    /// Requests in flight the routers keep on decode.
    pub offered: u32,
    /// The metric as Prometheus has it (what KEDA reads).
    pub metric: Option<f64>,
    /// The HPA's `status.desiredReplicas`.
    pub desired: Option<i32>,
    /// The group's `spec.replicas` (what the HPA writes through the scale subresource).
    pub replicas: Option<i32>,
    /// The group's `status.readyReplicas`.
    pub ready: Option<i32>,
}

/// What the autoscaled run did.
#[derive(Debug, Clone)]
pub struct Autoscaled {
    /// The size the HPA settled decode at under the whole load step (its first change
    /// may be smaller: it can answer a metric read mid-ramp).
    pub scaled_to: i32,
    /// The size it took decode back to.
    pub scaled_back_to: i32,
    /// From the load step to the HPA's size Ready.
    pub scale_out: Duration,
    /// From the step's end to decode back at its size, the leavers gone.
    pub scale_in: Duration,
    /// The HPA's `ScalingActive` condition once it read the metric through KEDA.
    pub hpa_read: String,
    /// The chain, sampled.
    pub samples: Vec<Sample>,
}

/// Runs the autoscaled scale-out and scale-in on `bed`'s decode pool, whose base load
/// (`base` requests in flight) already runs.
pub async fn run(
    bed: &Testbed,
    clock: &Clock,
    digest: &str,
    base: u32,
    hold: Duration,
) -> Result<Autoscaled> {
    clock.say("starting the autoscaling chain: Prometheus, KEDA's operator and metrics server");
    let chain = Arc::new(Autoscaling::start(bed).await?);
    clock.say(format!(
        "Prometheus at {} scrapes the member Pods; the apiserver serves \
         external.metrics.k8s.io through KEDA",
        chain.prometheus_url()
    ));
    let object = example_scaled_object(EXAMPLE, &chain.prometheus_url(), MIN, MAX)?;
    bed.kubectl_apply(&object)?;
    clock.say(format!(
        "kubectl apply -f examples/autoscaling/{EXAMPLE} (Prometheus at this testbed's, \
         decode {MIN}–{MAX}, KEDA polling every 1 s, scale-down stabilisation 10 s)"
    ));

    let offered = Arc::new(AtomicU32::new(base));
    let sampler = Sampler::start(bed.client().await?, chain.clone(), offered.clone());
    let hpa_read = wait_hpa_reads(bed, NAMESPACE, HPA, 1, POOL_WAIT).await?;
    clock.say(format!("{HPA}: {hpa_read}"));
    tokio::time::sleep(hold).await;

    clock.say(format!(
        "load step: {STEP} more requests in flight on decode (no kubectl scale from here on)"
    ));
    let step = bed.start_load(&LoadOptions {
        service: "decode".into(),
        namespace: NAMESPACE.into(),
        concurrency: STEP,
        tokens: 5,
        expect_digests: vec![digest.to_owned()],
    })?;
    offered.fetch_add(STEP, Ordering::Relaxed);
    let t = Instant::now();
    let first = wait_spec(&sampler, |n| n > MIN as i32).await?;
    clock.say(format!(
        "the HPA set decode's replicas to {first} after {:.2}s",
        t.elapsed().as_secs_f64()
    ));
    let (scaled_to, scale_out, members) = settle_out(bed, &sampler, t, clock).await?;
    clock.say(format!(
        "decode: {scaled_to} members Ready {:.2}s after the load step: {}",
        scale_out.as_secs_f64(),
        members
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    tokio::time::sleep(hold).await;
    let step_stats = stop_step(step, &offered).await?;
    clock.say(format!(
        "load step over: it served {} (failed {}, wrong digest {}); waiting for the HPA's \
         scale-down stabilisation",
        step_stats.served, step_stats.failed, step_stats.wrong_digest
    ));
    let t = Instant::now();
    let scaled_back_to = wait_spec(&sampler, |n| n <= MIN as i32).await?;
    clock.say(format!(
        "the HPA set decode's replicas to {scaled_back_to} after {:.2}s",
        t.elapsed().as_secs_f64()
    ));
    bed.wait_pool_ready(NAMESPACE, "decode", scaled_back_to as usize, POOL_WAIT)
        .await?;
    bed.wait_members(NAMESPACE, "decode", scaled_back_to as usize, POOL_WAIT)
        .await?;
    let scale_in = t.elapsed();
    clock.say(format!(
        "decode: back to {scaled_back_to} after {:.2}s (leavers drained, then deleted)",
        scale_in.as_secs_f64()
    ));
    tokio::time::sleep(hold).await;
    let samples = sampler.stop().await;
    bed.kubectl(&[
        "delete",
        "scaledobject",
        SCALED_OBJECT,
        "-n",
        NAMESPACE,
        "--timeout=60s",
    ])?;
    drop(chain);
    if step_stats.failed + step_stats.wrong_digest > 0 {
        return Err(testbed::Error::Unsupported(format!(
            "the load step lost requests: failed={} wrong_digest={}",
            step_stats.failed, step_stats.wrong_digest
        )));
    }
    Ok(Autoscaled {
        scaled_to,
        scaled_back_to,
        scale_out,
        scale_in,
        hpa_read,
        samples,
    })
}

/// Follows the HPA from its first change to the size it settles at under the whole step,
/// and returns that size, the time from the step (`t`) to that many members Ready, and
/// the members. The HPA's first change may answer a metric read mid-ramp (two Pods
/// scraped either side of the step's start summed to 9 once, and it asked for 3); it
/// settles once the metric has shown the whole offered load for [`SETTLE`] and its
/// size is Ready.
async fn settle_out(
    bed: &Testbed,
    sampler: &Sampler,
    t: Instant,
    clock: &Clock,
) -> Result<(i32, Duration, Vec<testbed::MemberPod>)> {
    let deadline = t + POOL_WAIT;
    let spec = || sampler.latest().and_then(|s| s.replicas);
    // The size last Ready, when it was, and its members.
    let mut ready: Option<(i32, Duration, Vec<testbed::MemberPod>)> = None;
    let mut followed = spec();
    loop {
        let target = spec().unwrap_or(MIN as i32);
        if followed != Some(target) {
            clock.say(format!("the HPA moved decode's replicas to {target}"));
            followed = Some(target);
        }
        if ready.as_ref().is_none_or(|(n, ..)| *n != target) {
            // Short rounds: the size may change while its members come up.
            ready = match bed
                .wait_pool_ready(NAMESPACE, "decode", target as usize, SAMPLE_EVERY)
                .await
            {
                Ok(members) => Some((target, t.elapsed(), members)),
                Err(testbed::Error::Timeout { .. }) => None,
                Err(e) => return Err(e),
            };
        }
        if let Some((n, ..)) = &ready
            && spec() == Some(*n)
            && sampler.metric_settled(SETTLE)
        {
            return Ok(ready.take().expect("matched above"));
        }
        if Instant::now() > deadline {
            return Err(testbed::Error::Timeout {
                what: format!(
                    "decode to settle at the HPA's size under the whole load step \
                     (last sample: {:?})",
                    sampler.latest()
                ),
                after: POOL_WAIT,
            });
        }
        tokio::time::sleep(SAMPLE_EVERY / 2).await;
    }
}

async fn stop_step(step: LoadRun, offered: &AtomicU32) -> Result<testbed::LoadStats> {
    let stats = step.stop().await;
    offered.fetch_sub(STEP, Ordering::Relaxed);
    stats
}

/// Samples the chain in the background.
struct Sampler {
    samples: Arc<std::sync::Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(client: kube::Client, chain: Arc<Autoscaling>, offered: Arc<AtomicU32>) -> Sampler {
        let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = samples.clone();
        let task = tokio::spawn(async move {
            let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), NAMESPACE);
            let groups: Api<HcommGroup> = Api::namespaced(client, NAMESPACE);
            let start = Instant::now();
            loop {
                let at = Instant::now();
                let metric = chain.query(METRIC).await.ok().flatten();
                let desired = hpas
                    .get_opt(HPA)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|h| h.status)
                    .map(|s| s.desired_replicas);
                let group = groups.get_opt("decode").await.ok().flatten();
                let sample = Sample {
                    t: at.duration_since(start).as_secs_f64(),
                    offered: offered.load(Ordering::Relaxed),
                    metric,
                    desired,
                    replicas: group.as_ref().map(|g| g.spec.replicas),
                    ready: group
                        .as_ref()
                        .and_then(|g| g.status.as_ref())
                        .map(|s| s.ready_replicas),
                };
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
                tokio::time::sleep_until((at + SAMPLE_EVERY).into()).await;
            }
        });
        Sampler { samples, task }
    }

    /// Whether the metric has read at least the offered load in every sample of the last
    /// `window` (and the samples cover it).
    fn metric_settled(&self, window: Duration) -> bool {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        metric_settled(&samples, window.as_secs_f64())
    }

    fn latest(&self) -> Option<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last()
            .copied()
    }

    async fn stop(self) -> Vec<Sample> {
        self.task.abort();
        let _ = self.task.await;
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Waits until the group's `spec.replicas` satisfies `done` (only the HPA writes it now)
/// and returns it.
async fn wait_spec(sampler: &Sampler, done: impl Fn(i32) -> bool) -> Result<i32> {
    let deadline = Instant::now() + POOL_WAIT;
    loop {
        if let Some(n) = sampler.latest().and_then(|s| s.replicas)
            && done(n)
        {
            return Ok(n);
        }
        if Instant::now() > deadline {
            return Err(testbed::Error::Timeout {
                what: format!(
                    "the HPA to change decode's replicas (last sample: {:?})",
                    sampler.latest()
                ),
                after: POOL_WAIT,
            });
        }
        tokio::time::sleep(SAMPLE_EVERY / 2).await;
    }
}

/// Whether the samples' metric has read at least their offered load for the last
/// `window` seconds.
fn metric_settled(samples: &[Sample], window: f64) -> bool {
    let Some(last) = samples.last() else {
        return false;
    };
    let full = |s: &Sample| s.metric.is_some_and(|m| m >= f64::from(s.offered));
    let since = samples
        .iter()
        .rev()
        .take_while(|s| full(s))
        .last()
        .map(|s| s.t);
    since.is_some_and(|since| last.t - since >= window)
}

/// The samples as a table, one row per second (the last sample of each), plus every row
/// where the desired or Ready count changed.
pub fn render_table(samples: &[Sample]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7}  {:>8}  {:>8}  {:>11}  {:>8}  {:>5}",
        "t (s)", "offered", "metric", "hpa desired", "replicas", "ready"
    );
    let cell = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    // The second of the last row printed, and the counts it showed.
    let mut last: Option<(i64, [Option<i32>; 3])> = None;
    for s in samples {
        let counts = [s.desired, s.replicas, s.ready];
        let second = s.t as i64;
        if last.is_some_and(|(at, shown)| at == second && shown == counts) {
            continue;
        }
        last = Some((second, counts));
        let _ = writeln!(
            out,
            "{:>7.1}  {:>8}  {:>8}  {:>11}  {:>8}  {:>5}",
            s.t,
            s.offered,
            cell(s.metric.map(|m| format!("{m:.1}"))),
            cell(s.desired.map(|d| d.to_string())),
            cell(s.replicas.map(|d| d.to_string())),
            cell(s.ready.map(|d| d.to_string())),
        );
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sample whose metric is the offered load and whose spec is the desired count.
    pub(crate) fn sample(t: f64, offered: u32, desired: i32, ready: i32) -> Sample {
        Sample {
            t,
            offered,
            metric: Some(f64::from(offered)),
            desired: Some(desired),
            replicas: Some(desired),
            ready: Some(ready),
        }
    }

    #[test]
    fn the_metric_settles_only_after_reading_the_whole_load_for_the_window() {
        let mut dip = sample(3.0, 16, 3, 2);
        dip.metric = Some(9.0);
        let samples = [
            sample(0.0, 4, 2, 2),
            sample(1.0, 16, 2, 2),
            sample(2.0, 16, 2, 2),
            dip,
            sample(4.0, 16, 3, 3),
            sample(8.0, 16, 4, 3),
        ];
        assert!(
            !metric_settled(&samples, 5.0),
            "the dip at 3 s restarts the window"
        );
        assert!(metric_settled(&samples, 4.0));
        assert!(!metric_settled(&samples[..3], 5.0));
        assert!(!metric_settled(&[], 0.0));
    }

    #[test]
    fn the_table_keeps_one_row_a_second_and_every_change() {
        let samples = [
            sample(0.0, 4, 2, 2),
            sample(0.5, 4, 2, 2),
            sample(1.0, 16, 2, 2),
            sample(1.5, 16, 4, 2),
            sample(2.0, 16, 4, 4),
        ];
        let table = render_table(&samples);
        // The header, then 0.0, 1.0, 1.5 (desired changed), 2.0; not 0.5.
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(!table.contains("    0.5  "), "{table}");
    }
}
