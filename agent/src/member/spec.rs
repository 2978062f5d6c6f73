//! What the operator planned for a member, read from its Pod (pure): group, index, first
//! rank, assigned devices, the worker's environment, drain request, standby, deletion.

use hcomm_crds::contract::{
    ANNOTATION_DEVICES, ANNOTATION_DRAIN_REQUESTED, ANNOTATION_WORKER_READINESS, LABEL_GROUP,
    LABEL_MEMBER_INDEX, LABEL_RANK, LABEL_STANDBY, STANDBY_TRUE, WORKER_READINESS_LOCAL_API,
};
use k8s_openapi::api::core::v1::Pod;

use crate::nic::verify::parse_device_list;

/// Environment variables the operator sets on the worker container.
pub mod env {
    pub const RANK_ID: &str = hcomm_crds::contract::env::RANK_ID;
    pub const RANK_SIZE: &str = hcomm_crds::contract::env::RANK_SIZE;
    pub const LOCAL_RANK_SIZE: &str = hcomm_crds::contract::env::LOCAL_RANK_SIZE;
    pub const VISIBLE_DEVICES: &str = hcomm_crds::contract::env::VISIBLE_DEVICES;
    pub const SOCKET_IFNAME: &str = hcomm_crds::contract::env::SOCKET_IFNAME;
    pub const EPOCH: &str = hcomm_crds::contract::env::EPOCH;
    pub const RANK_TABLE_FILE: &str = hcomm_crds::contract::env::RANK_TABLE_FILE;
    pub const WEIGHTS_PATH: &str = hcomm_crds::contract::env::WEIGHTS_PATH;
}

/// A member as planned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberSpec {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub node: String,
    pub group: String,
    pub member_index: Option<u32>,
    pub first_rank: Option<u32>,
    /// The member's physical devices: `hcomm.io/devices`, else (members placed by the
    /// scheduler) the device plugin's allocation annotation, ascending; None when neither
    /// is there or readable. The allocation check holds the annotation to the kubelet's
    /// record and the rank table before anything uses it.
    pub devices: Option<Vec<i32>>,
    pub visible_devices: Option<Vec<i32>>,
    pub socket_ifname: Option<String>,
    pub epoch: Option<u64>,
    pub rank_size: Option<u32>,
    pub local_rank_size: Option<u32>,
    pub rank_table_file: Option<String>,
    pub weights_path: Option<String>,
    pub drain_requested: Option<String>,
    pub deleting: bool,
    /// The operator holds the member as a warm standby (label `hcomm.io/standby`): joined,
    /// but its readiness gate stays False until the label goes.
    pub standby: bool,
    /// Hold the readiness gate until the worker reports `serving` (Pod annotation
    /// `hcomm.io/worker-readiness: local-api`).
    pub await_worker: bool,
    /// The NPU resource the Pod requests (None on CPU nodes: no allocation to check).
    pub npu: Option<super::allocation::NpuRequest>,
    /// The device plugin's allocation annotation for that resource, as written.
    pub device_allocation: Option<String>,
}

impl MemberSpec {
    /// `namespace/pod`, the key of a member everywhere in the agent.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.pod)
    }
}

fn num<T: std::str::FromStr>(s: Option<String>) -> Option<T> {
    s.and_then(|v| v.trim().parse().ok())
}

/// Reads a member from its Pod; None when the Pod is not a member (no group label).
pub fn from_pod(pod: &Pod) -> Option<MemberSpec> {
    let meta = &pod.metadata;
    let labels = meta.labels.as_ref()?;
    let group = labels.get(LABEL_GROUP)?.clone();
    let ann = meta.annotations.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    // The worker is the first container (the operator's template puts it there).
    let envs: Vec<(String, String)> = spec
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_ref())
        .map(|e| {
            e.iter()
                .filter_map(|v| Some((v.name.clone(), v.value.clone()?)))
                .collect()
        })
        .unwrap_or_default();
    let env = |k: &str| envs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let npu = super::allocation::npu_request(pod);
    let device_allocation = npu
        .as_ref()
        .and_then(|n| super::allocation::annotation_of(pod, &n.resource).cloned());
    Some(MemberSpec {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        pod: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        node: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        group,
        member_index: num(labels.get(LABEL_MEMBER_INDEX).cloned()),
        first_rank: num(labels.get(LABEL_RANK).cloned()),
        devices: ann
            .get(ANNOTATION_DEVICES)
            .and_then(|d| parse_device_list(d))
            .or_else(|| super::allocation::allocated_devices(device_allocation.as_deref()?)),
        visible_devices: env(env::VISIBLE_DEVICES).and_then(|d| parse_device_list(&d)),
        socket_ifname: env(env::SOCKET_IFNAME).filter(|s| !s.trim().is_empty()),
        epoch: num(env(env::EPOCH)),
        rank_size: num(env(env::RANK_SIZE)),
        local_rank_size: num(env(env::LOCAL_RANK_SIZE)),
        rank_table_file: env(env::RANK_TABLE_FILE),
        weights_path: env(env::WEIGHTS_PATH),
        drain_requested: ann.get(ANNOTATION_DRAIN_REQUESTED).cloned(),
        deleting: meta.deletion_timestamp.is_some(),
        standby: labels.get(LABEL_STANDBY).map(String::as_str) == Some(STANDBY_TRUE),
        await_worker: ann.get(ANNOTATION_WORKER_READINESS).map(String::as_str)
            == Some(WORKER_READINESS_LOCAL_API),
        npu,
        device_allocation,
    })
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use serde_json::json;

    /// A member Pod as the operator creates it.
    pub fn member_pod(name: &str, node: &str, devices: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "ns1", "uid": "u-1",
                "labels": { (hcomm_crds::contract::LABEL_GROUP): "g1", (hcomm_crds::contract::LABEL_MEMBER_INDEX): "1", (hcomm_crds::contract::LABEL_RANK): "2" },
                "annotations": { (hcomm_crds::contract::ANNOTATION_DEVICES): devices }
            },
            "spec": {
                "nodeName": node,
                "containers": [{ "name": "worker", "image": "w", "env": [
                    { "name": hcomm_crds::contract::env::RANK_ID, "value": "2" },
                    { "name": hcomm_crds::contract::env::RANK_SIZE, "value": "4" },
                    { "name": hcomm_crds::contract::env::LOCAL_RANK_SIZE, "value": "2" },
                    { "name": hcomm_crds::contract::env::VISIBLE_DEVICES, "value": devices },
                    { "name": hcomm_crds::contract::env::SOCKET_IFNAME, "value": "data" },
                    { "name": hcomm_crds::contract::env::EPOCH, "value": "7" },
                    { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }
                ]}]
            }
        }))
        .expect("valid pod")
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::member_pod;
    use super::*;

    #[test]
    fn a_member_pod_yields_its_plan() {
        let m = from_pod(&member_pod("w-1", "host-1", "2,3")).unwrap();
        assert_eq!(m.key(), "ns1/w-1");
        assert_eq!(m.group, "g1");
        assert_eq!(m.node, "host-1");
        assert_eq!(m.member_index, Some(1));
        assert_eq!(m.first_rank, Some(2));
        assert_eq!(m.devices, Some(vec![2, 3]));
        assert_eq!(m.visible_devices, Some(vec![2, 3]));
        assert_eq!(m.socket_ifname.as_deref(), Some("data"));
        assert_eq!(m.epoch, Some(7));
        assert_eq!(m.local_rank_size, Some(2));
        assert!(m.drain_requested.is_none());
        assert!(!m.deleting);
    }

    #[test]
    fn pods_without_the_group_label_are_not_members() {
        let mut p = member_pod("w", "n", "0");
        p.metadata.labels.as_mut().unwrap().remove(LABEL_GROUP);
        assert!(from_pod(&p).is_none());
    }

    #[test]
    fn a_malformed_devices_annotation_is_none_not_a_guess() {
        let mut p = member_pod("w", "n", "0");
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANNOTATION_DEVICES.into(), "zero".into());
        assert_eq!(from_pod(&p).unwrap().devices, None);
    }

    #[test]
    fn a_pod_placed_by_the_device_plugin_takes_its_devices_from_the_plugins_annotation() {
        use hcomm_crds::contract::ascend::{
            ANNOTATION_ASCEND_910_CONFIGURATION, RESOURCE_ASCEND910,
        };
        let mut p = member_pod("w", "n", "0");
        let ann = p.metadata.annotations.as_mut().unwrap();
        ann.remove(ANNOTATION_DEVICES);
        ann.insert(
            ANNOTATION_ASCEND_910_CONFIGURATION.into(),
            r#"{"devices":[{"device_id":"6"},{"device_id":"4"}]}"#.into(),
        );
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some(
                [(
                    RESOURCE_ASCEND910.to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
                )]
                .into(),
            ),
            ..Default::default()
        });
        let m = from_pod(&p).unwrap();
        assert_eq!(m.devices, Some(vec![4, 6]), "ascending physical ids");
        assert_eq!(m.npu.as_ref().map(|n| n.count), Some(2));
        assert!(m.device_allocation.is_some());
        // Without the NPU request the plugin's annotation is not looked at.
        p.spec.as_mut().unwrap().containers[0].resources = None;
        let m = from_pod(&p).unwrap();
        assert_eq!((m.devices, m.npu, m.device_allocation), (None, None, None));
    }

    #[test]
    fn the_drain_annotation_is_read() {
        let mut p = member_pod("w", "n", "0");
        p.metadata.annotations.as_mut().unwrap().insert(
            ANNOTATION_DRAIN_REQUESTED.into(),
            "2026-11-29T10:00:00Z".into(),
        );
        assert_eq!(
            from_pod(&p).unwrap().drain_requested.as_deref(),
            Some("2026-11-29T10:00:00Z")
        );
    }
}
