//! Member Pods (pure): the user's template plus what membership adds — labels, the
//! readiness gate, the device annotation, the rank environment, the rank-table volume,
//! the node, and the controller owner reference.

use std::collections::BTreeMap;

use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{
    ANNOTATION_DEVICES, ANNOTATION_WEIGHTS_DIGEST, LABEL_EPOCH, LABEL_GROUP, LABEL_MANAGED_BY,
    LABEL_MEMBER_INDEX, LABEL_RANK, LABEL_ROLE, MANAGER_NAME, READINESS_GATE,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, EnvVar, Pod, PodReadinessGate, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::planner::PlannedMember;
use crate::rank_table::{MOUNT_DIR, RANK_TABLE_FILE, config_map_name};

/// Name of the rank-table volume added to member Pods.
pub const VOLUME_NAME: &str = "hcomm-rank-table";

/// The controller owner reference pointing at `group`.
pub fn owner_reference(group: &HcommGroup) -> Option<OwnerReference> {
    let mut owner = group.controller_owner_ref(&())?;
    owner.block_owner_deletion = Some(true);
    Some(owner)
}

/// The labels every member Pod of `group` carries (the selector).
pub fn selector_labels(group: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_GROUP.to_owned(), group.to_owned())])
}

/// The `status.selector` string.
pub fn selector_string(group: &str) -> String {
    format!("{LABEL_GROUP}={group}")
}

/// Builds the Pod of joiner `member` at `epoch` in a domain of `world_size` ranks.
pub fn build(group: &HcommGroup, member: &PlannedMember, epoch: i64, world_size: i32) -> Pod {
    let name = group.metadata.name.clone().unwrap_or_default();
    let spec_ = &group.spec;
    let dpm = spec_.devices_per_member;
    let template = spec_.template.clone();
    let template_meta = template.metadata.unwrap_or_default();

    let mut labels = template_meta.labels.unwrap_or_default();
    labels.extend(selector_labels(&name));
    labels.insert(LABEL_MEMBER_INDEX.into(), member.index.to_string());
    labels.insert(LABEL_RANK.into(), (member.index * dpm).to_string());
    labels.insert(LABEL_ROLE.into(), spec_.role.as_str().into());
    labels.insert(LABEL_EPOCH.into(), epoch.to_string());
    labels.insert(LABEL_MANAGED_BY.into(), MANAGER_NAME.into());

    let devices = join(&member.devices);
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(ANNOTATION_DEVICES.into(), devices.clone());
    if let Some(w) = &spec_.weights {
        annotations.insert(ANNOTATION_WEIGHTS_DIGEST.into(), w.digest.clone());
    }

    let mut env = vec![
        var(hcomm_crds::contract::env::GROUP, &name),
        var(
            hcomm_crds::contract::env::MEMBER_INDEX,
            &member.index.to_string(),
        ),
        var(hcomm_crds::contract::env::EPOCH, &epoch.to_string()),
        var(
            hcomm_crds::contract::env::RANK_ID,
            &(member.index * dpm).to_string(),
        ),
        var(
            hcomm_crds::contract::env::RANK_SIZE,
            &world_size.to_string(),
        ),
        var(hcomm_crds::contract::env::LOCAL_RANK_SIZE, &dpm.to_string()),
        var(hcomm_crds::contract::env::VISIBLE_DEVICES, &devices),
        var(hcomm_crds::contract::env::RANK_TABLE_FILE, RANK_TABLE_FILE),
        var(hcomm_crds::contract::env::BACKEND, backend(spec_)),
    ];
    if let Some(ifname) = &spec_.comm.socket_ifname {
        env.push(var(hcomm_crds::contract::env::SOCKET_IFNAME, ifname));
    }

    let mut pod_spec: PodSpec = template.spec.unwrap_or_default();
    for container in &mut pod_spec.containers {
        let existing = container.env.get_or_insert_with(Vec::new);
        existing.retain(|e| !env.iter().any(|ours| ours.name == e.name));
        existing.extend(env.iter().cloned());
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: VOLUME_NAME.into(),
                mount_path: MOUNT_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
    }
    pod_spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: VOLUME_NAME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(&name),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    });
    let gates = pod_spec.readiness_gates.get_or_insert_with(Vec::new);
    if !gates.iter().any(|g| g.condition_type == READINESS_GATE) {
        gates.push(PodReadinessGate {
            condition_type: READINESS_GATE.into(),
        });
    }
    pod_spec.node_name = Some(member.node.clone());

    Pod {
        metadata: ObjectMeta {
            name: Some(member.name.clone()),
            namespace: group.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: owner_reference(group).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

fn backend(spec: &hcomm_crds::HcommGroupSpec) -> &'static str {
    match spec.comm.backend {
        hcomm_crds::Backend::Hccl => "hccl",
        hcomm_crds::Backend::Tcp => "tcp",
    }
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

fn join(devices: &[i32]) -> String {
    devices
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn group(json: serde_json::Value) -> HcommGroup {
        let mut group: HcommGroup = serde_json::from_value(json).expect("valid group JSON");
        group.metadata.uid = Some("uid-1".into());
        group
    }

    pub(crate) fn decode() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
            "metadata": {"name": "decode", "namespace": "ns"},
            "spec": {"replicas": 2, "role": "decode", "devicesPerMember": 2,
                     "comm": {"backend": "tcp", "socketIfname": "=data0"},
                     "template": {"metadata": {"labels": {"app": "w"}},
                                  "spec": {"containers": [{"name": "worker", "image": "w",
                                            "env": [{"name": hcomm_crds::contract::env::RANK_ID, "value": "stale"}]}]}}}
        })
    }

    #[test]
    fn a_member_pod_carries_labels_gate_env_volume_node_and_owner() {
        let g = group(decode());
        let member = PlannedMember {
            name: "decode-1-e3".into(),
            index: 1,
            node: "n1".into(),
            devices: vec![2, 3],
            joiner: true,
        };
        let pod = build(&g, &member, 3, 4);
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_GROUP], "decode");
        assert_eq!(labels[LABEL_RANK], "2");
        assert_eq!(labels[LABEL_MEMBER_INDEX], "1");
        assert_eq!(labels[LABEL_EPOCH], "3");
        assert_eq!(labels[LABEL_ROLE], "decode");
        assert_eq!(labels["app"], "w");
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_DEVICES],
            "2,3"
        );
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.controller, owner.uid.as_str()),
            (Some(true), "uid-1")
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(
            spec.readiness_gates.unwrap()[0].condition_type,
            READINESS_GATE
        );
        let env: BTreeMap<String, String> = spec.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        assert_eq!(
            env[hcomm_crds::contract::env::RANK_ID],
            "2",
            "the plan overrides the template"
        );
        assert_eq!(env[hcomm_crds::contract::env::RANK_SIZE], "4");
        assert_eq!(env[hcomm_crds::contract::env::LOCAL_RANK_SIZE], "2");
        assert_eq!(env[hcomm_crds::contract::env::VISIBLE_DEVICES], "2,3");
        assert_eq!(env[hcomm_crds::contract::env::SOCKET_IFNAME], "=data0");
        assert_eq!(
            env[hcomm_crds::contract::env::RANK_TABLE_FILE],
            RANK_TABLE_FILE
        );
        assert_eq!(env[hcomm_crds::contract::env::BACKEND], "tcp");
        assert_eq!(env[hcomm_crds::contract::env::EPOCH], "3");
        assert_eq!(
            spec.volumes.unwrap()[0].config_map.as_ref().unwrap().name,
            "decode-rank-table"
        );
    }
}
