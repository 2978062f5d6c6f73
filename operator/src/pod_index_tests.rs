//! The index against what it folds: the NPU accounting counts only the operator's own
//! member Pods (issue 17, point 6: a stranger's Pod in another namespace carrying forged
//! `hcomm.io/*` labels, annotations and an HcommGroup owner reference does not change what
//! a node has free, nor so the placement), and the index kept event by event is the index
//! of the Pods the events leave.

use std::collections::BTreeMap;

use hcomm_crds::contract::ANNOTATION_DEVICES;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::watcher::Event;

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

fn groups() -> BTreeSet<Owner> {
    BTreeSet::from([("ai".into(), "decode".into(), "uid-decode".into())])
}

/// NPUs of [`NPU`] per node among `pods` (the index of them, read).
fn used_npus(pods: &[Pod]) -> BTreeMap<String, u32> {
    PodIndex::of(pods).read().used_npus(NPU, &groups())
}

/// Whether `pod` counts: it names an owner, and that group exists.
fn counted(pod: &Pod) -> bool {
    owner(pod).is_some_and(|o| groups().contains(&o))
}

#[test]
fn the_operators_own_members_are_counted() {
    let own = pod("ai", "decode", "uid-decode", "n1", 2);
    assert!(counted(&own));
    assert_eq!(used_npus(&[own]), BTreeMap::from([("n1".to_owned(), 2)]));
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
        assert!(!counted(p), "{:?}", p.metadata);
    }
    // Each under a name of its own (the index keeps one Pod per name).
    let mut all = vec![own];
    all.extend(
        forged
            .into_iter()
            .enumerate()
            .map(|(i, p)| named(p, &format!("forged-{i}"))),
    );
    assert_eq!(
        used_npus(&all),
        BTreeMap::from([("n1".to_owned(), 2)]),
        "only the group's own member counts"
    );
}

fn named(mut p: Pod, name: &str) -> Pod {
    p.metadata.name = Some(name.into());
    p
}

fn finished(mut p: Pod) -> Pod {
    p.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    p
}

/// What a reconcile reads from `index`: the decode group's Pod names and the NPUs per node.
fn reading(index: &PodIndex) -> (Vec<String>, BTreeMap<String, u32>) {
    let read = index.read();
    (read.names("ai", "decode"), read.used_npus(NPU, &groups()))
}

#[test]
fn the_index_kept_event_by_event_is_the_index_of_the_pods_left() {
    let (index, mut writer) = super::index();
    let a = named(pod("ai", "decode", "uid-decode", "n1", 2), "decode-a");
    let b = named(pod("ai", "decode", "uid-decode", "n1", 1), "decode-b");
    let c = named(pod("ai", "decode", "uid-decode", "n2", 4), "decode-c");
    writer.apply(&Event::Apply(a.clone()));
    writer.apply(&Event::Apply(b.clone()));
    writer.apply(&Event::Apply(c.clone()));
    assert_eq!(
        reading(&index),
        (
            vec!["decode-a".into(), "decode-b".into(), "decode-c".into()],
            BTreeMap::from([("n1".into(), 3), ("n2".into(), 4)])
        )
    );
    // The same Pod again changes nothing; an update replaces what it held.
    writer.apply(&Event::Apply(a.clone()));
    let a_moved = named(pod("ai", "decode", "uid-decode", "n3", 2), "decode-a");
    writer.apply(&Event::Apply(a_moved.clone()));
    // A finished Pod releases its NPUs and stays a member; a deleted one is gone.
    writer.apply(&Event::Apply(finished(c.clone())));
    writer.apply(&Event::Delete(b.clone()));
    let left = [a_moved.clone(), finished(c.clone())];
    assert_eq!(reading(&index), reading(&PodIndex::of(&left)));
    assert_eq!(
        reading(&index),
        (
            vec!["decode-a".into(), "decode-c".into()],
            BTreeMap::from([("n3".into(), 2)])
        )
    );
    assert!(index.read().contains("ai", "decode-c"));
    assert!(!index.read().contains("ai", "decode-b"));
}

#[test]
fn a_relist_replaces_the_index_once_complete() {
    let (index, mut writer) = super::index();
    let a = named(pod("ai", "decode", "uid-decode", "n1", 2), "decode-a");
    let b = named(pod("ai", "decode", "uid-decode", "n2", 8), "decode-b");
    writer.apply(&Event::Apply(a.clone()));
    writer.apply(&Event::Init);
    writer.apply(&Event::InitApply(b.clone()));
    assert_eq!(
        reading(&index),
        reading(&PodIndex::of([&a])),
        "the index stays whole while the relist runs"
    );
    writer.apply(&Event::InitDone);
    assert_eq!(
        reading(&index),
        reading(&PodIndex::of([&b])),
        "a, missing from the relist, was deleted meanwhile"
    );
}

#[test]
fn a_group_that_is_gone_holds_nothing_and_another_groups_pods_are_not_its_members() {
    let own = named(pod("ai", "decode", "uid-decode", "n1", 2), "decode-a");
    let orphan = named(pod("ai", "old", "uid-old", "n1", 8), "old-a");
    let index = PodIndex::of([&own, &orphan]);
    assert_eq!(reading(&index).1, BTreeMap::from([("n1".into(), 2)]));
    assert_eq!(index.read().names("ai", "old"), vec!["old-a".to_owned()]);
    assert!(index.read().names("other", "decode").is_empty());
}

#[test]
fn each_containers_request_counts_else_its_limit() {
    let mut p = named(pod("ai", "decode", "uid-decode", "n1", 2), "decode-a");
    let spec = p.spec.as_mut().unwrap();
    let mut sidecar = spec.containers[0].clone();
    sidecar.name = "sidecar".into();
    let resources = sidecar.resources.as_mut().unwrap();
    resources.requests = None; // only a limit: it counts
    resources.limits = Some(BTreeMap::from([(NPU.into(), Quantity("3".into()))]));
    spec.containers.push(sidecar);
    assert_eq!(
        reading(&PodIndex::of([&p])).1,
        BTreeMap::from([("n1".into(), 5)])
    );
}
