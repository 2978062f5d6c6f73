//! The example pools on `backend: hccl`, with the HCCL conformance simulator as every
//! host's CANN runtime (`TestbedOptions::hccl_runtime`), under load: what HCCL faults do
//! to a pool. Needs root (the simulator's ranks talk over the hosts' NPU fabric); under
//! the harness, so without it the scenarios are reported ignored.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::contract::{POD_JOINED, PodReason};
use hcomm_e2e::harness::{self, Needs, Shared, Test};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{CommPatch, ExamplePools};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

/// Hosts: prefill 2 + decode up to 3 members, one device each, two devices per host.
const HOSTS: usize = 4;
/// The pools' `opTimeoutSeconds`: how long a hung collective runs before the backend
/// aborts its communicator (HCCL's own default, 120 s, would only slow the test).
const OP_TIMEOUT_SECONDS: u32 = 5;
const SCENARIO_DEADLINE: Duration = Duration::from_secs(300);

type Scenario = fn(&mut ExamplePools) -> futures::future::BoxFuture<'_, Result<()>>;

fn main() {
    let scenarios: [(&str, Scenario); 1] = [(
        "a_joiner_whose_hccl_collective_hangs_is_failed_and_replaced_while_the_pools_serve",
        |p| {
            Box::pin(a_joiner_whose_hccl_collective_hangs_is_failed_and_replaced(
                p,
            ))
        },
    )];
    let rt = std::sync::Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime"),
    );
    let shared: Shared<ExamplePools> = Shared::default();
    let tests = scenarios
        .into_iter()
        .map(|(name, scenario)| {
            let (rt, shared) = (rt.clone(), shared.clone());
            Test::new(name, Needs::NetworkNamespaces, move || {
                shared.with(
                    || {
                        Ok(rt.block_on(ExamplePools::start_with(
                            HOSTS,
                            &CommPatch {
                                backend: hcomm_crds::Backend::Hccl,
                                op_timeout_seconds: Some(OP_TIMEOUT_SECONDS),
                            },
                        ))?)
                    },
                    |pools| {
                        eprintln!("logs: {}", pools.bed.dir().join("logs").display());
                        let _ = rt.block_on(pools.stop());
                    },
                    |pools| {
                        rt.block_on(async {
                            tokio::time::timeout(SCENARIO_DEADLINE, scenario(pools))
                                .await
                                .map_err(|_| {
                                    anyhow::anyhow!("scenario deadline ({SCENARIO_DEADLINE:?})")
                                })?
                        })
                    },
                )
            })
        })
        .collect();
    let mut summary = harness::run_in_order(tests);
    if let Some(pools) = shared.teardown() {
        let whole_run = rt.block_on(async {
            let violations = pools
                .bed
                .hccl_runtime()
                .map(|rt| rt.violations())
                .unwrap_or_default();
            let (decode, prefill) = pools.stop().await?;
            decode
                .ensure_clean("decode, whole run")
                .map_err(anyhow::Error::msg)?;
            prefill
                .ensure_clean("prefill, whole run")
                .map_err(anyhow::Error::msg)?;
            ensure!(
                violations.is_empty(),
                "the HCCL simulator recorded violations:\n{violations}"
            );
            anyhow::Ok(())
        });
        if let Err(error) = whole_run {
            eprintln!("error: after the last scenario: {error:#}");
            summary.num_failed += 1;
        }
    }
    summary.exit();
}

/// A joiner's NPU hangs its first collective (the simulator's `hang_op=0`: the check
/// all-reduce its worker runs on the new epoch's HCCL communicator). Past the op timeout
/// the backend aborts that communicator before any device buffer is freed (the simulator
/// records a use after free or a free under a running collective as a violation; there
/// is none); the worker, which never served, tells its agent it cannot serve; its join
/// fails with that reason at once (not at the worker-ready timeout); the operator
/// replaces it, and the replacement builds the next epoch with the serving members and
/// serves. No request fails: the serving members keep serving throughout.
async fn a_joiner_whose_hccl_collective_hangs_is_failed_and_replaced(
    pools: &mut ExamplePools,
) -> Result<()> {
    let before = pools.decode_at(2).await?;
    let runtime = pools
        .bed
        .hccl_runtime()
        .context("the testbed runs the HCCL simulator")?;
    runtime.inject_once("decode-2-", "hang_op=0");
    let t = Instant::now();
    pools.bed.scale("decode", 3)?;
    let pods: Api<Pod> = Api::namespaced(pools.bed.client().await?, NS);
    let (failed, message) = loop {
        let list = pods.list(&ListParams::default()).await?.items;
        let found = list.iter().find_map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let c = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == POD_JOINED)?;
            (name.starts_with("decode-2-")
                && c.status == "False"
                && c.reason.as_deref() == Some(PodReason::JoinFailed.as_str()))
            .then(|| (name, c.message.clone().unwrap_or_default()))
        });
        if let Some(f) = found {
            break f;
        }
        ensure!(
            t.elapsed() < POOL_WAIT,
            "no decode-2-* join failed within {POOL_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let failed_after = t.elapsed();
    eprintln!("hccl hang: {failed} failed its join after {failed_after:?}: {message}");
    ensure!(
        message.contains("cannot serve") && message.contains("HCCL"),
        "{failed}: the join failure should carry the worker's reason: {message:?}"
    );
    // The worker waited one op timeout, not the agent's worker-ready timeout (600 s).
    ensure!(
        failed_after < Duration::from_secs(60),
        "{failed} failed only after {failed_after:?}"
    );
    let members = pools.decode_at(3).await?;
    ensure!(
        members.iter().all(|m| m.name != failed),
        "{failed} still a Ready member: {members:?}"
    );
    for b in &before {
        ensure!(
            members.iter().any(|m| m.name == b.name),
            "{} was replaced too; only the joiner should be: {members:?}",
            b.name
        );
    }
    eprintln!(
        "hccl hang: decode at 3 again after {:?}: {}",
        t.elapsed(),
        members
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let replacement = members
        .iter()
        .find(|m| !before.iter().any(|b| b.name == m.name))
        .context("a replacement member")?;
    pools
        .decode_load
        .wait_served(
            std::slice::from_ref(replacement),
            5,
            Duration::from_secs(30),
        )
        .await?;
    pools
        .decode_load
        .latest()
        .ensure_clean("decode, hung joiner")
        .map_err(anyhow::Error::msg)?;
    pools.decode_at(2).await?;
    Ok(())
}
