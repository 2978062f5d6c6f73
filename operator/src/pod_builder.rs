//! Member Pods (pure): the user's template plus what membership adds — labels, the
//! readiness gate, the NPU resource request, a required node affinity for the planned
//! node, the rank and HCCL environment, the rank-table volume, the Pod's own local-API
//! directory (read-only, by `subPathExpr` on the Pod's UID, so a worker reaches its own
//! agent socket and no other Pod's), and the controller owner reference.
//!
//! The operator never writes `nodeName` (the scheduler binds the Pod, counting the NPU
//! resource, taints and quotas; `schedulerName` stays as the template has it, e.g.
//! Volcano) nor `ASCEND_VISIBLE_DEVICES` (the device plugin sets it at allocation).
//!
//! Size: one pure function from (group, planned member) to a Pod, and its examples; every
//! part it adds reads the same member and template, so splitting would pass them around.

use std::collections::BTreeMap;

use hcomm_crds::contract::env;
use hcomm_crds::contract::{
    ANNOTATION_WEIGHTS_DIGEST, LABEL_EPOCH, LABEL_GROUP, LABEL_MANAGED_BY, LABEL_MEMBER_INDEX,
    LABEL_RANK, LABEL_REVISION, LABEL_ROLE, LABEL_STANDBY, MANAGER_NAME, READINESS_GATE,
    STANDBY_TRUE,
};
use hcomm_crds::group::Bootstrap;
use hcomm_crds::{Backend, HcommGroup, HcommGroupSpec};
use k8s_openapi::api::core::v1::{
    CSIVolumeSource, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, HostPathVolumeSource,
    ObjectFieldSelector, Pod, PodReadinessGate, PodSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::planner::PlannedMember;
use crate::rank_table::{MOUNT_DIR, RANK_TABLE_FILE, config_map_name};

/// Name of the rank-table volume added to member Pods.
pub const VOLUME_NAME: &str = "hcomm-rank-table";
/// Name of the local-API volume added to member Pods (the agent's CSI volume for the Pod,
/// or the node's Pod-sockets directory of which each container mounts only its Pod's
/// subdirectory).
pub const AGENT_API_VOLUME: &str = hcomm_crds::local_api::VOLUME;

/// Seconds of a member's termination grace beyond its drain timeout: leaving the epoch.
pub const LEAVE_GRACE_SECONDS: i64 = 15;

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

/// How a member Pod gets its local-API directory (`--local-api-volume`; see
/// `hcomm_crds::local_api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LocalApiVolume {
    /// A CSI ephemeral inline volume of the agent's driver: the kubelet asks the agent for
    /// the Pod's own directory. No hostPath, so the Pod passes Pod Security `baseline`.
    #[default]
    Csi,
    /// The node's Pod-sockets directory as a hostPath, narrowed to the Pod by `subPathExpr`:
    /// for clusters where the agent's CSI driver cannot be registered. Refused by `baseline`.
    HostPath,
}

/// Builds the Pod of joiner `member` at `epoch` in a domain of `world_size` ranks, with its
/// local-API directory given as `api`.
pub fn build(
    group: &HcommGroup,
    member: &PlannedMember,
    epoch: i64,
    world_size: i32,
    api: LocalApiVolume,
) -> Pod {
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
    labels.insert(LABEL_REVISION.into(), crate::revision::of(spec_));
    labels.insert(LABEL_MANAGED_BY.into(), MANAGER_NAME.into());
    if member.standby {
        labels.insert(LABEL_STANDBY.into(), STANDBY_TRUE.into());
    } else {
        labels.remove(LABEL_STANDBY);
    }

    let mut annotations = template_meta.annotations.unwrap_or_default();
    if let Some(w) = &spec_.weights {
        annotations.insert(ANNOTATION_WEIGHTS_DIGEST.into(), w.digest.clone());
    }
    // Gang scheduling by Volcano: the Pod names the group's PodGroup (crate::podgroup).
    if spec_
        .scheduling
        .as_ref()
        .is_some_and(|s| s.pod_group.is_some())
    {
        annotations.insert(
            hcomm_crds::contract::volcano::ANNOTATION_GROUP_NAME.into(),
            hcomm_crds::contract::volcano::pod_group_name(&name),
        );
    }

    let env = environment(spec_, &name, member.index, epoch, world_size);

    let mut pod_spec: PodSpec = template.spec.unwrap_or_default();
    // A member deleted directly (`kubectl delete pod`, an eviction, a node shutdown) drains
    // on SIGTERM: unless the template says otherwise, it gets the group's drain time plus
    // time to leave the epoch before the kubelet's SIGKILL.
    pod_spec
        .termination_grace_period_seconds
        .get_or_insert(i64::from(spec_.scaling.drain_timeout_seconds) + LEAVE_GRACE_SECONDS);
    for container in &mut pod_spec.containers {
        let existing = container.env.get_or_insert_with(Vec::new);
        existing.retain(|e| !MANAGED_ENV.contains(&e.name.as_str()));
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
    add_agent_api(&mut pod_spec, api);
    let gates = pod_spec.readiness_gates.get_or_insert_with(Vec::new);
    if !gates.iter().any(|g| g.condition_type == READINESS_GATE) {
        gates.push(PodReadinessGate {
            condition_type: READINESS_GATE.into(),
        });
    }
    if let Some(worker) = pod_spec.containers.first_mut() {
        request_npus(worker, &spec_.npu.resource_name, dpm);
    }
    crate::affinity::require_node(&mut pod_spec, &member.node);

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

/// The Pod's own local-API directory in every container, read-only (connecting to a socket
/// needs no write access to its mount): the agent's CSI volume, or the host's Pod-sockets
/// directory narrowed to `$(HCOMM_POD_UID)` by `subPathExpr`. A template's own mount at the
/// same path is replaced: two mounts cannot share a path, and that one could give a worker
/// the node's whole directory.
fn add_agent_api(pod_spec: &mut PodSpec, api: LocalApiVolume) {
    use hcomm_crds::local_api::{CSI_DRIVER, MOUNT_DIR, POD_SOCKETS_DIR};
    for container in &mut pod_spec.containers {
        let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
        mounts.retain(|m| m.mount_path.trim_end_matches('/') != MOUNT_DIR);
        mounts.push(VolumeMount {
            name: AGENT_API_VOLUME.into(),
            mount_path: MOUNT_DIR.into(),
            sub_path_expr: (api == LocalApiVolume::HostPath)
                .then(|| format!("$({})", env::POD_UID)),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
    volumes.retain(|v| v.name != AGENT_API_VOLUME);
    let volume = Volume {
        name: AGENT_API_VOLUME.into(),
        ..Volume::default()
    };
    volumes.push(match api {
        LocalApiVolume::Csi => Volume {
            csi: Some(CSIVolumeSource {
                driver: CSI_DRIVER.into(),
                read_only: Some(true),
                ..CSIVolumeSource::default()
            }),
            ..volume
        },
        LocalApiVolume::HostPath => Volume {
            host_path: Some(HostPathVolumeSource {
                path: POD_SOCKETS_DIR.into(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..volume
        },
    });
}

/// The environment of member `index` (see `docs/manual.md`, "Worker environment", and
/// `hcomm_crds::contract::env` for the per-process rule).
fn environment(
    spec: &HcommGroupSpec,
    group: &str,
    index: i32,
    epoch: i64,
    world_size: i32,
) -> Vec<EnvVar> {
    let dpm = spec.devices_per_member;
    let first_rank = index * dpm;
    let mut env = vec![
        var(env::GROUP, group),
        var(env::MEMBER_INDEX, &index.to_string()),
        var(env::EPOCH, &epoch.to_string()),
        var(env::FIRST_RANK, &first_rank.to_string()),
        var(env::RANK_SIZE, &world_size.to_string()),
        var(env::LOCAL_RANK_SIZE, &dpm.to_string()),
        var(env::BACKEND, backend(spec)),
        EnvVar {
            name: env::POD_UID.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.uid".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
        var(env::AGENT_SOCKET, hcomm_crds::local_api::MOUNT_SOCKET),
    ];
    if dpm == 1 {
        // One process per member: its per-process values are the member's.
        env.push(var(env::RANK_ID, &first_rank.to_string()));
        env.push(var(env::DEVICE_ID, "0"));
    }
    if let Some(ifname) = &spec.comm.socket_ifname {
        env.push(var(env::SOCKET_IFNAME, ifname));
    }
    if spec.comm.backend == Backend::Hccl {
        let connect = spec
            .comm
            .connect_timeout_seconds
            .clamp(HCCL_CONNECT_TIMEOUT_RANGE.0, HCCL_CONNECT_TIMEOUT_RANGE.1);
        env.push(var(env::HCCL_CONNECT_TIMEOUT, &connect.to_string()));
        env.push(var(
            env::HCCL_EXEC_TIMEOUT,
            &spec.comm.exec_timeout_seconds.max(0).to_string(),
        ));
        env.push(var(
            env::HCCL_BUFFSIZE,
            &spec.comm.buffer_size_mb.max(1).to_string(),
        ));
    }
    if spec.comm.bootstrap == Bootstrap::RankTable {
        env.push(var(env::RANK_TABLE_FILE, RANK_TABLE_FILE));
    }
    env
}

/// The names the operator may set: a template's own value of any of them is dropped
/// (a stale `RANK_ID` in a template of a multi-device member would send every process to
/// one rank), whether or not this member gets one.
const MANAGED_ENV: &[&str] = &[
    env::GROUP,
    env::MEMBER_INDEX,
    env::EPOCH,
    env::FIRST_RANK,
    env::RANK_SIZE,
    env::LOCAL_RANK_SIZE,
    env::BACKEND,
    env::POD_UID,
    env::AGENT_SOCKET,
    env::RANK_ID,
    env::DEVICE_ID,
    env::SOCKET_IFNAME,
    env::HCCL_CONNECT_TIMEOUT,
    env::HCCL_EXEC_TIMEOUT,
    env::HCCL_BUFFSIZE,
    env::RANK_TABLE_FILE,
];

/// HCCL's accepted `HCCL_CONNECT_TIMEOUT` (seconds). The schema refuses other values for
/// `backend: hccl`; a group stored before that rule is clamped rather than handed to HCCL.
pub const HCCL_CONNECT_TIMEOUT_RANGE: (i32, i32) = (120, 7200);

/// Sets the worker's request and limit of `resource` to `count` (extended resources must
/// have equal requests and limits), whatever the template had: the operator's capacity
/// accounting assumes exactly `devicesPerMember` per member.
fn request_npus(worker: &mut Container, resource: &str, count: i32) {
    let quantity = Quantity(count.to_string());
    let resources = worker
        .resources
        .get_or_insert_with(ResourceRequirements::default);
    resources
        .requests
        .get_or_insert_with(BTreeMap::new)
        .insert(resource.to_owned(), quantity.clone());
    resources
        .limits
        .get_or_insert_with(BTreeMap::new)
        .insert(resource.to_owned(), quantity);
}

fn backend(spec: &HcommGroupSpec) -> &'static str {
    match spec.comm.backend {
        Backend::Hccl => "hccl",
        Backend::Tcp => "tcp",
    }
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hcomm_crds::contract::ascend::{RESOURCE_ASCEND910, RESOURCE_NPU};

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

    fn member(index: i32, node: &str) -> PlannedMember {
        PlannedMember {
            name: format!("decode-{index}-e3"),
            index,
            node: node.into(),
            devices: Vec::new(),
            allocation: None,
            joiner: true,
            standby: false,
        }
    }

    fn env_of(pod: &Pod) -> BTreeMap<String, String> {
        pod.spec.as_ref().unwrap().containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn a_member_gets_its_drain_time_plus_leaving_as_grace_unless_the_template_sets_one() {
        let g = group(decode());
        let pod = build(&g, &member(1, "n1"), 3, 4);
        let drain = i64::from(g.spec.scaling.drain_timeout_seconds);
        assert_eq!(
            pod.spec.unwrap().termination_grace_period_seconds,
            Some(drain + LEAVE_GRACE_SECONDS)
        );
        let mut json = decode();
        json["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 7.into();
        let pod = build(&group(json), &member(1, "n1"), 3, 4);
        assert_eq!(pod.spec.unwrap().termination_grace_period_seconds, Some(7));
    }

    #[test]
    fn a_member_pod_carries_labels_gate_env_volume_affinity_and_owner() {
        let g = group(decode());
        let pod = build(&g, &member(1, "n1"), 3, 4);
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_GROUP], "decode");
        assert_eq!(labels[LABEL_RANK], "2");
        assert_eq!(labels[LABEL_MEMBER_INDEX], "1");
        assert_eq!(labels[LABEL_EPOCH], "3");
        assert_eq!(labels[LABEL_ROLE], "decode");
        assert_eq!(labels["app"], "w");
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.controller, owner.uid.as_str()),
            (Some(true), "uid-1")
        );
        let env = env_of(&pod);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name, None, "the scheduler binds the Pod");
        assert_eq!(crate::affinity::required_node(&spec).as_deref(), Some("n1"));
        assert_eq!(
            spec.readiness_gates.unwrap()[0].condition_type,
            READINESS_GATE
        );
        assert_eq!(env[env::FIRST_RANK], "2");
        assert!(
            !env.contains_key(env::RANK_ID),
            "two processes: RANK_ID is per process, and the template's stale one is dropped"
        );
        assert_eq!(env[env::RANK_SIZE], "4");
        assert_eq!(env[env::LOCAL_RANK_SIZE], "2");
        assert!(
            !env.contains_key(env::VISIBLE_DEVICES),
            "the device plugin sets it"
        );
        assert!(
            !env.contains_key(env::RANK_TABLE_FILE),
            "RootInfo bootstrap"
        );
        assert!(!env.contains_key(env::HCCL_CONNECT_TIMEOUT), "tcp backend");
        assert_eq!(env[env::SOCKET_IFNAME], "=data0");
        assert_eq!(env[env::BACKEND], "tcp");
        assert_eq!(env[env::EPOCH], "3");
        assert_eq!(
            spec.volumes.unwrap()[0].config_map.as_ref().unwrap().name,
            "decode-rank-table"
        );
    }

    #[test]
    fn the_worker_requests_its_npus_from_the_device_plugin_and_keeps_the_scheduler_name() {
        let mut json = decode();
        json["spec"]["template"]["spec"]["schedulerName"] = "volcano".into();
        json["spec"]["template"]["spec"]["containers"][0]["resources"] =
            serde_json::json!({"limits": {RESOURCE_ASCEND910: "8", "cpu": "4"}});
        json["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "sidecar", "image": "s"}));
        let pod = build(&group(json), &member(0, "n1"), 1, 2);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.scheduler_name.as_deref(), Some("volcano"));
        let resources = spec.containers[0].resources.clone().unwrap();
        let want = Quantity("2".into());
        assert_eq!(resources.requests.unwrap()[RESOURCE_ASCEND910], want);
        let limits = resources.limits.unwrap();
        assert_eq!(
            limits[RESOURCE_ASCEND910], want,
            "devicesPerMember, not the template's 8"
        );
        assert_eq!(limits["cpu"], Quantity("4".into()));
        assert!(
            spec.containers[1].resources.is_none(),
            "only the worker holds the NPUs"
        );
        let mut json = decode();
        json["spec"]["npu"] = serde_json::json!({"resourceName": RESOURCE_NPU});
        let pod = build(&group(json), &member(0, "n1"), 1, 2);
        let requests = pod.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap();
        assert!(requests.contains_key(RESOURCE_NPU) && !requests.contains_key(RESOURCE_ASCEND910));
    }

    #[test]
    fn a_single_device_member_gets_its_rank_and_device_and_hccl_gets_its_settings() {
        let mut json = decode();
        json["spec"]["devicesPerMember"] = 1.into();
        json["spec"]["comm"] = serde_json::json!({"backend": "hccl", "socketIfname": "eth",
            "connectTimeoutSeconds": 300, "execTimeoutSeconds": 0, "bufferSizeMb": 64,
            "bootstrap": "RankTable"});
        let env = env_of(&build(&group(json), &member(3, "n1"), 2, 4));
        assert_eq!(env[env::RANK_ID], "3");
        assert_eq!(env[env::DEVICE_ID], "0");
        assert_eq!(env[env::FIRST_RANK], "3");
        assert_eq!(env[env::HCCL_CONNECT_TIMEOUT], "300");
        assert_eq!(env[env::HCCL_EXEC_TIMEOUT], "0");
        assert_eq!(env[env::HCCL_BUFFSIZE], "64");
        assert_eq!(env[env::RANK_TABLE_FILE], RANK_TABLE_FILE);
        assert_eq!(env[env::SOCKET_IFNAME], "eth");
    }

    #[test]
    fn a_connect_timeout_stored_before_the_hccl_range_rule_is_clamped_into_it() {
        let mut json = decode();
        json["spec"]["comm"] = serde_json::json!({"backend": "hccl", "connectTimeoutSeconds": 30});
        let env = env_of(&build(&group(json), &member(0, "n1"), 1, 2));
        assert_eq!(env[env::HCCL_CONNECT_TIMEOUT], "120");
        let defaults = env_of(&build(
            &group({
                let mut j = decode();
                j["spec"]["comm"] = serde_json::json!({});
                j
            }),
            &member(0, "n1"),
            1,
            2,
        ));
        assert_eq!(
            (
                defaults[env::HCCL_CONNECT_TIMEOUT].as_str(),
                defaults[env::HCCL_EXEC_TIMEOUT].as_str(),
                defaults[env::HCCL_BUFFSIZE].as_str()
            ),
            ("120", "1836", "200"),
            "HCCL's own defaults"
        );
    }

    /// A member Pod as the operator builds it by default (CSI local-API volume).
    fn build(g: &HcommGroup, m: &PlannedMember, epoch: i64, world: i32) -> Pod {
        super::build(g, m, epoch, world, LocalApiVolume::Csi)
    }

    #[test]
    fn each_container_mounts_only_its_pods_local_api_directory_read_only() {
        use hcomm_crds::local_api::{CSI_DRIVER, MOUNT_DIR, MOUNT_SOCKET, POD_SOCKETS_DIR};
        for api in [LocalApiVolume::Csi, LocalApiVolume::HostPath] {
            let mut json = decode();
            // A template written for the old shared socket: its mount is replaced.
            json["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
                serde_json::json!([{"name": "old", "mountPath": format!("{MOUNT_DIR}/")}]);
            json["spec"]["template"]["spec"]["containers"][0]["env"] = serde_json::json!([
            {"name": env::AGENT_SOCKET, "value": "/elsewhere.sock"}]);
            let pod = super::build(&group(json), &member(0, "n1"), 1, 2, api);
            let env = env_of(&pod);
            assert_eq!(env[env::AGENT_SOCKET], MOUNT_SOCKET);
            let c = &pod.spec.as_ref().unwrap().containers[0];
            let uid = c
                .env
                .iter()
                .flatten()
                .find(|e| e.name == env::POD_UID)
                .unwrap();
            let field = uid.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
            assert_eq!(field.field_path, "metadata.uid");
            let at_dir: Vec<&VolumeMount> = c
                .volume_mounts
                .iter()
                .flatten()
                .filter(|m| m.mount_path.trim_end_matches('/') == MOUNT_DIR)
                .collect();
            assert_eq!(at_dir.len(), 1, "{at_dir:?}");
            let m = at_dir[0];
            assert_eq!(m.name, AGENT_API_VOLUME);
            assert_eq!(m.read_only, Some(true));
            let volumes = pod.spec.as_ref().unwrap().volumes.clone().unwrap();
            let v = volumes.iter().find(|v| v.name == AGENT_API_VOLUME).unwrap();
            match api {
                LocalApiVolume::Csi => {
                    // The volume itself is the Pod's own directory: nothing to narrow.
                    assert_eq!(m.sub_path_expr, None);
                    let csi = v.csi.as_ref().unwrap();
                    assert_eq!(
                        (csi.driver.as_str(), csi.read_only),
                        (CSI_DRIVER, Some(true))
                    );
                    assert!(v.host_path.is_none());
                }
                LocalApiVolume::HostPath => {
                    assert_eq!(m.sub_path_expr, Some(format!("$({})", env::POD_UID)));
                    assert_eq!(v.host_path.as_ref().unwrap().path, POD_SOCKETS_DIR);
                    assert!(v.csi.is_none());
                }
            }
        }
    }
}
