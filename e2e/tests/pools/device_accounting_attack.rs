//! A stranger makes every node look full (issue 17, point 6), end to end: Pods in another
//! namespace carrying the operator's labels, the decode group's label, the devices
//! annotation and an `HcommGroup` controller reference — some with the decode group's
//! real UID copied from its Pods, some with a made-up one — each requiring one testbed
//! host and requesting all of its NPUs. They can never be scheduled (a node selector no
//! node matches), so they hold no real NPU; were the operator to count them, every host
//! would look full and the next scale-out would stop at `InsufficientCapacity`.
//!
//! The operator counts only Pods controlled by a group that exists in the Pod's own
//! namespace (`operator/src/pod_index.rs`, `owner` and `Index::used_npus`): decode scales
//! 2 → 4 onto those hosts and back, and no request fails. (Kubernetes' garbage collector deletes such Pods
//! once it sees their owner missing; a finalizer keeps them here so that the accounting is
//! tried throughout, as it would be against Pods whose deletion is slow.)

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::ascend::RESOURCE_ASCEND910;
use hcomm_crds::contract::{
    ANNOTATION_DEVICES, GroupReason, LABEL_GROUP, LABEL_MANAGED_BY, MANAGER_NAME,
};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, Testbed};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use crate::check;

/// The stranger's namespace.
const STRANGER: &str = "mallory";
/// Holds the forged Pods in the API until the scenario releases them.
const FINALIZER: &str = "e2e.hcomm.io/held";

/// Pods in another namespace, forged as decode members (the real group UID on some, a
/// made-up one on others) and claiming every NPU of every host: decode still scales 2 → 4
/// and back with no `InsufficientCapacity`, and no request fails.
///
/// Precondition: decode at 2 members, Ready (6 of the 10 devices free).
pub async fn forged_member_pods_in_another_namespace_do_not_make_nodes_look_full(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(2).await?;
    let bed = &pools.bed;
    let client = bed.client().await?;
    let groups: Api<HcommGroup> = Api::namespaced(client.clone(), NS);
    let decode_uid = groups
        .get("decode")
        .await?
        .uid()
        .context("decode has no UID")?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": STRANGER}}))?;
    if namespaces.get_opt(STRANGER).await?.is_none() {
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    let forged_pods: Api<Pod> = Api::namespaced(client.clone(), STRANGER);
    let hosts: Vec<String> = bed
        .hosts()
        .hosts()
        .iter()
        .map(|h| h.name().to_owned())
        .collect();
    for (i, host) in hosts.iter().enumerate() {
        let owner_uid = if i % 2 == 0 {
            decode_uid.clone()
        } else {
            format!("00000000-0000-4000-8000-00000000000{i}")
        };
        forged_pods
            .create(&PostParams::default(), &forged(i, host, &owner_uid)?)
            .await
            .with_context(|| format!("create the forged Pod on {host}"))?;
    }

    let capacity_before = capacity_events(bed).await?;
    bed.scale("decode", 4)?;
    tokio::select! {
        ready = bed.wait_pool_ready(NS, "decode", 4, POOL_WAIT) => { ready?; }
        refused = capacity_refused(bed, &capacity_before) => {
            bail!("the forged Pods made the hosts look full: {}", refused?)
        }
    }
    bed.scale("decode", 2)?;
    bed.wait_pool_ready(NS, "decode", 2, POOL_WAIT).await?;

    // The forged Pods were there throughout (held by a finalizer once the garbage
    // collector found their owner missing) and none was bound.
    let left = forged_pods.list(&ListParams::default()).await?.items;
    ensure!(
        left.len() == hosts.len()
            && left
                .iter()
                .all(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none())),
        "the forged Pods changed: {:?}",
        left.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    let release = Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}));
    for p in &left {
        forged_pods
            .patch(&p.name_any(), &PatchParams::default(), &release)
            .await?;
    }
    forged_pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await?;
    namespaces
        .delete(STRANGER, &DeleteParams::default())
        .await?;
    check::pools_clean(pools, "beside forged member Pods")
}

/// A Pod forged as a decode member on `host`, claiming its 2 NPUs, that no node admits.
fn forged(i: usize, host: &str, owner_uid: &str) -> Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("decode-{i}-e1"),
            "labels": {(LABEL_GROUP): "decode", (LABEL_MANAGED_BY): MANAGER_NAME},
            // The garbage collector deletes a Pod whose owner is missing (every owner
            // here: the reference is resolved in the Pod's namespace); the finalizer keeps
            // the Pod, as a stranger's Pods whose deletion is slow would stay, so the
            // accounting is tried for the whole scenario.
            "finalizers": [FINALIZER],
            "annotations": {(ANNOTATION_DEVICES): "0,1"},
            "ownerReferences": [{
                "apiVersion": HcommGroup::api_version(&()), "kind": HcommGroup::kind(&()),
                "name": "decode", "uid": owner_uid, "controller": true
            }]
        },
        "spec": {
            "nodeSelector": {"hcomm.e2e/no-such-node": "true"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{
                    "key": "kubernetes.io/hostname", "operator": "In", "values": [host]
                }]}]
            }}},
            "containers": [{
                "name": "worker", "image": "none",
                "resources": {
                    "requests": {(RESOURCE_ASCEND910): "2"},
                    "limits": {(RESOURCE_ASCEND910): "2"}
                }
            }]
        }
    }))?)
}

/// The count of each `InsufficientCapacity` Event on the decode group.
async fn capacity_events(bed: &Testbed) -> Result<BTreeMap<String, i32>> {
    let events: Api<Event> = Api::namespaced(bed.client().await?, NS);
    let fields = format!(
        "involvedObject.name=decode,reason={}",
        GroupReason::InsufficientCapacity
    );
    Ok(events
        .list(&ListParams::default().fields(&fields))
        .await?
        .items
        .into_iter()
        .map(|e| (e.name_any(), e.count.unwrap_or(1)))
        .collect())
}

/// Returns the message of an `InsufficientCapacity` Event on decode that is not in
/// `before` (or counted more often since); polls until one appears.
async fn capacity_refused(bed: &Testbed, before: &BTreeMap<String, i32>) -> Result<String> {
    let events: Api<Event> = Api::namespaced(bed.client().await?, NS);
    loop {
        let now = capacity_events(bed).await?;
        if let Some((name, _)) = now
            .iter()
            .find(|(name, count)| before.get(*name).is_none_or(|b| *count > b))
        {
            let e = events.get(name).await?;
            return Ok(e.message.unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
