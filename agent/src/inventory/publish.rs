//! Publishing the node's `HcommNode` with server-side apply (field manager
//! [`crate::FIELD_MANAGER`]): the object (spec) first, then its status subresource.

use hcomm_crds::{HcommNode, HcommNodeSpec, HcommNodeStatus};
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::error::{Error, Result};

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
