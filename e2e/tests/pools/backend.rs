//! `comm.backend` is honoured: a `backend: hccl` group on hosts without the Ascend CANN
//! runtime (none here) is refused at verification with a reason that says so, while the
//! example pools (`backend: tcp`) keep serving.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::contract::{POD_VERIFIED, PodReason};
use hcomm_e2e::testbed::ExamplePools;
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::pools::workspace_root;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde::Deserialize as _;

use crate::check;

/// The scenario's group.
const HCCL_GROUP: &str = "hccl";

/// A one-member copy of the decode example with `comm.backend: hccl`: its member is not
/// verified (`hcomm.io/verified=False`, reason `HcclRuntimeUnavailable`, the message naming the
/// libraries and the paths tried), a Warning Event says so, it never turns Ready, and
/// removing the group leaves nothing. Prefill and decode serve cleanly throughout. Were
/// the field ignored, the member would be verified and serve on the TCP engine.
///
/// Precondition: decode at 2 members, Ready.
pub async fn an_hccl_group_without_the_hccl_runtime_is_refused_while_the_pools_serve(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(2).await?;
    let bed = &pools.bed;
    bed.kubectl_apply(&hccl_group(pools)?)?;
    let pods: Api<Pod> = Api::namespaced(bed.client().await?, NS);
    let selector = format!("{}={HCCL_GROUP}", hcomm_crds::contract::LABEL_GROUP);
    let t = Instant::now();
    let (pod, message) = loop {
        let members = pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        let verified: Vec<String> = members
            .iter()
            .filter(|p| verified_condition(p).is_some_and(|(status, _, _)| status == "True"))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        ensure!(
            verified.is_empty(),
            "{verified:?} verified without an HCCL runtime: backend: hccl was ignored"
        );
        let refused = members.iter().find_map(|p| {
            let (status, reason, message) = verified_condition(p)?;
            (status == "False" && reason == PodReason::HcclRuntimeUnavailable.as_str())
                .then(|| (p.metadata.name.clone().unwrap_or_default(), message))
        });
        if let Some(found) = refused {
            break found;
        }
        ensure!(
            t.elapsed() < POOL_WAIT,
            "no {HCCL_GROUP} member refused with {} within {POOL_WAIT:?}: {:?}",
            PodReason::HcclRuntimeUnavailable,
            members.iter().map(verified_condition).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "hccl backend: {pod} refused after {:?}: {message}",
        t.elapsed()
    );
    for needed in ["libhccl.so", "libascendcl.so", "searched:"] {
        ensure!(
            message.contains(needed),
            "{pod}: the refusal should name {needed:?}: {message:?}"
        );
    }
    check::verification_warning(bed, &pod, PodReason::HcclRuntimeUnavailable).await?;

    bed.kubectl(&["delete", &format!("hcg/{HCCL_GROUP}")])?;
    bed.wait_members(NS, HCCL_GROUP, 0, POOL_WAIT).await?;
    check::pools_clean(pools, "beside a refused hccl group")
}

/// The Pod's `hcomm.io/verified` as (status, reason, message).
fn verified_condition(p: &Pod) -> Option<(String, String, String)> {
    hcomm_e2e::testbed::pools::condition_of(p, POD_VERIFIED)
}

/// The decode example's `HcommGroup` renamed, one member, `backend: hccl`, its weights
/// pointed at the testbed's set, on the testbed's data NIC.
fn hccl_group(pools: &ExamplePools) -> Result<String> {
    let path = workspace_root().join("examples/decode-pool.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path:?}"))?;
    let mut group = serde_yaml::Deserializer::from_str(&text)
        .map(serde_yaml::Value::deserialize)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .find(|d| d["kind"] == "HcommGroup")
        .context("no HcommGroup in the decode example")?;
    group["metadata"]["name"] = HCCL_GROUP.into();
    let spec = &mut group["spec"];
    spec["replicas"] = 1.into();
    spec["comm"]["backend"] = "hccl".into();
    // HCCL's own floor (HCCL_CONNECT_TIMEOUT ≥ 120 s); the API refuses less for hccl.
    spec["comm"]["connectTimeoutSeconds"] = 120.into();
    spec["weights"]["source"] = pools.models.display().to_string().into();
    spec["weights"]["digest"] = pools.digest.clone().into();
    if !pools.bed.hosts().is_isolated() {
        spec["comm"]["socketIfname"] = "lo".into();
    }
    Ok(serde_yaml::to_string(&group)?)
}
