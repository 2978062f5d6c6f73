//! What the operator's caches keep of each object it watches: everything a reconcile
//! reads, without `metadata.managedFields` (server-side apply's bookkeeping, often larger
//! than the fields it describes, read by nothing here) and, for Nodes, without
//! `status.images` (the kubelet lists every image on the node: tens of KiB per node on
//! inference nodes that hold several multi-GiB images, times every node of the cluster).
//! The API server still sends them; only the copies kept for the life of the process
//! lose them, as controller-runtime's cache transforms do.

use k8s_openapi::api::core::v1::Node;

/// Drops what no reconcile reads from any watched object.
pub fn object<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// [`object`], and the Node's image list.
pub fn node(node: &mut Node) {
    object(node);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::ascend::RESOURCE_ASCEND910;
    use k8s_openapi::api::core::v1::{ContainerImage, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
    use std::collections::BTreeMap;

    #[test]
    fn a_node_keeps_what_placement_and_cordons_read_and_loses_its_images_and_managed_fields() {
        let mut n = Node {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                labels: Some(BTreeMap::from([("zone".into(), "a".into())])),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: Some(true),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([(
                    RESOURCE_ASCEND910.into(),
                    Quantity("8".into()),
                )])),
                images: Some(vec![ContainerImage {
                    names: Some(vec!["mindie:2.0".into()]),
                    size_bytes: Some(20 << 30),
                }]),
                ..Default::default()
            }),
        };
        node(&mut n);
        assert_eq!(n.metadata.managed_fields, None);
        let status = n.status.as_ref().unwrap();
        assert_eq!(status.images, None);
        assert_eq!(
            crate::observe::allocatable([&n], RESOURCE_ASCEND910).get("node-1"),
            Some(&8)
        );
        assert!(crate::disruption::is_cordoned(&n));
        assert_eq!(n.metadata.labels.as_ref().unwrap()["zone"], "a");
    }
}
