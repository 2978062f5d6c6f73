//! Publishing the node's `HcommNode` with server-side apply (field manager
//! [`crate::FIELD_MANAGER`]): the object (spec) first, then its status subresource.
//!
//! One writer for the whole status: the inventory refresh and the health prober (which
//! publishes a link flip at once) both go through [`publish_known`], so `status.linkTests`
//! is never written under a second field manager.

use hcomm_crds::{HcommNode, HcommNodeSpec, HcommNodeStatus};
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::config::Context;
use crate::error::{Error, Result};

/// Applies this node's status from the inventory in hand and the latest link tests.
pub async fn publish_known(ctx: &Context) -> Result<()> {
    let tests = ctx
        .link_tests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let status = super::to_status(
        &*ctx.inventory.read().await,
        &ctx.cfg.node_nic_rule(),
        tests,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    publish(&ctx.client, &ctx.cfg.node_name, &status).await
}

/// Applies `HcommNode/<node>` and its status.
pub async fn publish(client: &kube::Client, node: &str, status: &HcommNodeStatus) -> Result<()> {
    let api: Api<HcommNode> = Api::all(client.clone());
    let pp = PatchParams::apply(crate::FIELD_MANAGER).force();
    let obj = serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION,
        "kind": "HcommNode",
        "metadata": { "name": node },
        "spec": HcommNodeSpec { node_name: node.to_owned() },
    });
    api.patch(node, &pp, &Patch::Apply(&obj))
        .await
        .map_err(Error::kube(format!("apply HcommNode {node}")))?;
    let st = serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION,
        "kind": "HcommNode",
        "metadata": { "name": node },
        "status": status,
    });
    api.patch_status(node, &pp, &Patch::Apply(&st))
        .await
        .map_err(Error::kube(format!("apply HcommNode {node} status")))?;
    Ok(())
}
