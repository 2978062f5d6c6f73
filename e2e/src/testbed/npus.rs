//! kwok Nodes that look like Ascend NPU nodes to the scheduler: the labels and the
//! extended resource the Ascend device plugin would publish (`huawei.com/Ascend910: 8`
//! in capacity and allocatable), so the real kube-scheduler counts NPUs — a Pod asking
//! for more than a node has stays Pending, two Pods of half a node fill it.
//!
//! A real plugin registers the resource with the kubelet, which reports it in the Node's
//! status; kwok keeps whatever capacity a Node's status holds (see `e2e/k8s/kwok`), so
//! the testbed writes it there once, right after the Node is Ready.

use std::collections::BTreeMap;

use hcomm_crds::contract::ascend::{
    ACCELERATOR_ASCEND910, LABEL_ACCELERATOR, LABEL_CHIP_NAME, RESOURCE_ASCEND910,
};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::{Error, Result};

/// The chip the simulated nodes claim (an Atlas 800T A2's).
pub const CHIP_NAME: &str = "910B3";

/// The labels the device plugin sets on a 910-family node.
pub fn node_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            LABEL_ACCELERATOR.to_owned(),
            ACCELERATOR_ASCEND910.to_owned(),
        ),
        (LABEL_CHIP_NAME.to_owned(), CHIP_NAME.to_owned()),
    ])
}

/// The Node status patch that advertises `count` NPUs (capacity and allocatable; a merge
/// patch, so kwok's cpu, memory and pods stay).
pub fn status_patch(count: u32) -> serde_json::Value {
    let npus = serde_json::json!({ RESOURCE_ASCEND910: count.to_string() });
    serde_json::json!({ "status": { "capacity": npus, "allocatable": npus } })
}

/// Writes `count` NPUs into Node `name`'s capacity and allocatable.
pub async fn advertise(client: kube::Client, name: &str, count: u32) -> Result<()> {
    let nodes: Api<Node> = Api::all(client);
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(status_patch(count)),
        )
        .await
        .map_err(Error::kube(format!(
            "advertise {count} NPUs on Node {name}"
        )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_advertises_the_resource_in_capacity_and_allocatable() {
        let p = status_patch(8);
        assert_eq!(p["status"]["capacity"][RESOURCE_ASCEND910], "8");
        assert_eq!(p["status"]["allocatable"][RESOURCE_ASCEND910], "8");
        assert_eq!(
            p["status"]["capacity"].as_object().unwrap().len(),
            1,
            "a merge patch: nothing else is touched"
        );
        assert_eq!(node_labels()[LABEL_ACCELERATOR], ACCELERATOR_ASCEND910);
    }
}
