//! Issue 17, point 6: the operator's NPU accounting counts only its own member Pods. A
//! stranger's Pod in another namespace carrying forged `hcomm.io/*` labels, annotations
//! and an HcommGroup owner reference does not change what a node has free, nor so the
//! placement.

use std::collections::BTreeMap;

use hcomm_crds::contract::{ANNOTATION_DEVICES, LABEL_GROUP, LABEL_MANAGED_BY, MANAGER_NAME};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;

use super::*;

const NPU: &str = hcomm_crds::contract::ascend::RESOURCE_ASCEND910;

/// A Pod on `node` requesting `npus`, labelled and owned as the operator's members are,
/// by group `group` with `owner_uid`.
fn pod(ns: &str, group: &str, owner_uid: &str, node: &str, npus: u32) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("{group}-0"), "namespace": ns,
            "labels": {(LABEL_GROUP): group, (LABEL_MANAGED_BY): MANAGER_NAME},
            "annotations": {(ANNOTATION_DEVICES): "0,1,2,3,4,5,6,7"},
            "ownerReferences": [{
                "apiVersion": HcommGroup::api_version(&()), "kind": HcommGroup::kind(&()),
                "name": group, "uid": owner_uid, "controller": true
            }]
        },
        "spec": {"nodeName": node, "containers": [{"name": "w",
            "resources": {"requests": {(NPU): npus.to_string()}, "limits": {(NPU): npus.to_string()}}}]}
    }))
    .unwrap()
}

fn groups() -> Groups {
    Groups::from([("ai".into(), "decode".into(), "uid-decode".into())])
}

#[test]
fn the_operators_own_members_are_counted() {
    let own = pod("ai", "decode", "uid-decode", "n1", 2);
    assert!(operator_owned(&own, &groups()));
    assert_eq!(
        used_npus(&[own], NPU, &groups()),
        BTreeMap::from([("n1".to_owned(), 2)])
    );
}

#[test]
fn a_strangers_pod_with_forged_labels_and_owner_does_not_count() {
    let own = pod("ai", "decode", "uid-decode", "n1", 2);
    let forged = [
        // Another namespace, an owner UID that is no group's.
        pod("mallory", "decode", "uid-made-up", "n1", 8),
        // Another namespace, the real group's name and UID copied from its Pods.
        pod("mallory", "decode", "uid-decode", "n2", 8),
        // The group's namespace, a made-up owner UID.
        pod("ai", "decode", "uid-made-up", "n2", 8),
        // The real owner, but labelled as another group.
        {
            let mut p = pod("ai", "decode", "uid-decode", "n2", 8);
            p.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert(LABEL_GROUP.into(), "prefill".into());
            p
        },
        // Not controlled by the group (a plain owner reference).
        {
            let mut p = pod("ai", "decode", "uid-decode", "n2", 8);
            p.metadata.owner_references.as_mut().unwrap()[0].controller = None;
            p
        },
    ];
    for p in &forged {
        assert!(!operator_owned(p, &groups()), "{:?}", p.metadata);
    }
    let mut all = vec![own];
    all.extend(forged);
    assert_eq!(
        used_npus(&all, NPU, &groups()),
        BTreeMap::from([("n1".to_owned(), 2)]),
        "only the group's own member counts"
    );
}

#[test]
fn existing_groups_are_read_from_their_metadata() {
    let g: kube::core::PartialObjectMeta<HcommGroup> = serde_json::from_value(serde_json::json!({
        "apiVersion": HcommGroup::api_version(&()), "kind": HcommGroup::kind(&()),
        "metadata": {"name": "decode", "namespace": "ai", "uid": "uid-decode"}
    }))
    .unwrap();
    assert_eq!(existing_groups([&g.metadata]), groups());
}
