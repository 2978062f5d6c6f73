//! An autoscaler moving a pool on load, with no `kubectl scale`: the decode workers'
//! requests in flight, scraped by Prometheus, read by KEDA's Prometheus scaler from the
//! example `ScaledObject`, served to the HPA KEDA made through `external.metrics.k8s.io`
//! (the apiserver's aggregation layer), and the HPA controller scaling the `HcommGroup`
//! through its scale subresource (`hcomm_e2e::testbed::autoscaling`).

use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use hcomm_e2e::testbed::autoscaling::{Autoscaling, example_scaled_object, wait_hpa_reads};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, LoadOptions, Testbed};

use crate::check;

/// Extra requests in flight for the load step: with the scenarios' base load (4) the
/// decode workers hold ~16, and the example's threshold of 4 per member asks for 4.
const STEP_CONCURRENCY: u32 = 12;
/// The group's bounds in the test's copy of the example.
const MIN: u64 = 2;
const MAX: u64 = 4;

/// decode 2 → 4 → 2 on load through Prometheus → KEDA → HPA: the load step makes the HPA
/// raise `spec.replicas` to 4 and the members join under load; the step ends, the HPA's
/// scale-down stabilisation passes, and members drain and leave. No request fails. The
/// HPA's status shows it read the metric through KEDA's external metrics API.
///
/// Precondition: decode at 2 members, Ready.
pub async fn keda_scales_decode_on_load_through_the_hpa_and_back(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(2).await?;
    let chain = Autoscaling::start(&pools.bed).await?;
    let scaled_object =
        example_scaled_object("keda-decode.yaml", &chain.prometheus_url(), MIN, MAX)?;
    pools.bed.kubectl_apply(&scaled_object)?;
    let hpa = "keda-hpa-decode";
    let read = wait_hpa_reads(&pools.bed, NS, hpa, 1, POOL_WAIT).await?;
    eprintln!("autoscaling: {hpa} reads the metric: {read}");

    let step = pools.bed.start_load(&LoadOptions {
        concurrency: STEP_CONCURRENCY,
        ..ExamplePools::load_options("decode", &pools.digest)
    })?;
    let t = Instant::now();
    wait_replicas(&pools.bed, MAX, POOL_WAIT).await?;
    let up = t.elapsed();
    let grown = pools
        .bed
        .wait_pool_ready(NS, "decode", MAX as usize, POOL_WAIT)
        .await?;
    eprintln!(
        "autoscaling: the HPA asked for {MAX} after {up:.1?}; {MAX} Ready after {:.1?}",
        t.elapsed()
    );
    let step_stats = step.stop().await?;
    check::clean(&step_stats, "the load step")?;
    ensure!(step_stats.served > 0, "the load step served nothing");

    let t = Instant::now();
    wait_replicas(&pools.bed, MIN, POOL_WAIT).await?;
    let down = t.elapsed();
    let shrunk = pools
        .bed
        .wait_pool_ready(NS, "decode", MIN as usize, POOL_WAIT)
        .await?;
    eprintln!(
        "autoscaling: the HPA asked for {MIN} {down:.1?} after the step; {MIN} Ready after {:.1?}",
        t.elapsed()
    );
    ensure!(
        shrunk
            .iter()
            .all(|m| grown.iter().any(|g| g.name == m.name)),
        "scale-in made new members: {shrunk:?} (from {grown:?})"
    );
    check::clean(&pools.decode_load.latest(), "decode, autoscaled 2 → 4 → 2")?;

    // KEDA removes its HPA with the ScaledObject; the group keeps its size.
    pools.bed.kubectl(&[
        "delete",
        "scaledobject",
        "decode",
        "-n",
        NS,
        "--timeout=60s",
    ])?;

    // The SLO examples, one at a time (one autoscaler per group), held at the pools'
    // size: KEDA takes each, and its HPA reads every trigger's metric from Prometheus
    // through KEDA (the policy itself is the load step's above).
    for (file, name, triggers) in [
        ("keda-decode-itl.yaml", "decode-itl", 1),
        ("keda-prefill-ttft.yaml", "prefill-ttft", 2),
    ] {
        let object = example_scaled_object(file, &chain.prometheus_url(), MIN, MIN)?;
        pools.bed.kubectl_apply(&object)?;
        let hpa = format!("keda-hpa-{name}");
        let read = wait_hpa_reads(&pools.bed, NS, &hpa, triggers, POOL_WAIT).await?;
        eprintln!("autoscaling: {file}: {hpa} reads its {triggers} metric(s): {read}");
        pools
            .bed
            .kubectl(&["delete", "scaledobject", name, "-n", NS, "--timeout=60s"])?;
    }
    drop(chain);
    // Unregistered with the chain: an aggregated API left without its server would fail
    // every later scenario's discovery.
    ensure!(
        pools
            .bed
            .kubectl(&["get", "apiservice", "v1beta1.external.metrics.k8s.io"])
            .is_err(),
        "the external metrics APIService outlived the chain"
    );
    check::pools_clean(pools, "with the SLO autoscalers applied")
}

/// Waits until decode's `spec.replicas` is `n`: what only the HPA changes here.
async fn wait_replicas(bed: &Testbed, n: u64, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let now = bed
            .kubectl(&[
                "get",
                "hcg",
                "decode",
                "-n",
                NS,
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .unwrap_or_default();
        if now.trim() == n.to_string() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let hpa = bed
                .kubectl(&["describe", "hpa", "keda-hpa-decode", "-n", NS])
                .unwrap_or_default();
            bail!("decode's spec.replicas is {now:?}, not {n}, after {within:?}; the HPA:\n{hpa}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
