//! The group's finalizer (`hcomm.io/cleanup`): added before anything else is made for a
//! group, so deleting it drains its members first; removed once they are gone.

use hcomm_crds::HcommGroup;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::context::Context;
use crate::error::{Error, Result};

pub use hcomm_crds::contract::FINALIZER;

/// Adds the finalizer, unless the group has it.
pub async fn add(ctx: &Context, group: &HcommGroup) -> Result<()> {
    let add = |finalizers: &mut Vec<String>| {
        if !finalizers.iter().any(|f| f == FINALIZER) {
            finalizers.push(FINALIZER.to_owned());
        }
    };
    patch_finalizers(ctx, group, add, "add finalizer").await
}

/// Removes the finalizer; a group already gone is fine.
pub async fn remove(ctx: &Context, group: &HcommGroup) -> Result<()> {
    let remove = |finalizers: &mut Vec<String>| finalizers.retain(|f| f != FINALIZER);
    match patch_finalizers(ctx, group, remove, "remove finalizer").await {
        Err(error) if error.is_not_found() => Ok(()),
        other => other,
    }
}

/// Replaces the finalizer list, conditional on the `resourceVersion` just read (a merge
/// patch carrying `metadata.resourceVersion` conflicts when the object changed meanwhile).
async fn patch_finalizers(
    ctx: &Context,
    group: &HcommGroup,
    edit: impl Fn(&mut Vec<String>),
    action: &str,
) -> Result<()> {
    let api: Api<HcommGroup> =
        Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    // The cached object is stale after this round's own status write: read the latest.
    let Some(latest) = api
        .get_opt(&group.name_any())
        .await
        .map_err(Error::kube(action))?
    else {
        return Ok(());
    };
    let mut finalizers = latest.finalizers().to_vec();
    let before = finalizers.clone();
    edit(&mut finalizers);
    if finalizers == before {
        return Ok(());
    }
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": latest.resource_version(),
        }
    });
    api.patch(
        &group.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube(action))?;
    Ok(())
}
