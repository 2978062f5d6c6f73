//! The Ascend device plugin of a real node (e2e only, never shipped): the NPUs of a
//! simulated host registered with the node's real kubelet over the device-plugin API, so
//! the kubelet's own device manager advertises `huawei.com/Ascend910`, chooses each Pod's
//! devices, and reports them in PodResources — the truth the agent cross-checks.
//!
//! What the real plugin does around that is played as it does it: Allocate gives the
//! container `ASCEND_VISIBLE_DEVICES` (the physical ids), and a loop — every
//! [`ANNOTATE_PERIOD`], as MindCluster's plugin polls — reads the kubelet's allocations
//! and writes each new Pod's allocation annotations (the same pure
//! [`crate::testbed::device_plugin::annotations`] the process kubelet's stand-in writes),
//! so a member's start includes that wait, as on a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_crds::contract::ascend::{configuration_annotation, kubelet_device_id, physical_id_of};
use hcomm_kubelet::device_plugin::proto::ContainerAllocateResponse;
use hcomm_kubelet::device_plugin::{DevicePlugin, DevicePluginServer, serve_device_plugin};
use hcomm_kubelet::{PodResourcesClient, Status};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::task::JoinHandle;

use super::error::{Error, Result};
use crate::hosts::hccn_conf::HccnConf;
use crate::testbed::device_plugin::{Admitted, PluginFault, PodAllocation, annotations};

/// How often the plugin looks for Pods it has not annotated yet.
pub const ANNOTATE_PERIOD: Duration = Duration::from_secs(1);
/// How long registration may wait for the kubelet's socket.
const REGISTER_DEADLINE: Duration = Duration::from_secs(30);
/// Each kubelet call ends within this.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// The plugin's decisions (pure).
#[derive(Debug)]
struct Ascend;

impl DevicePlugin for Ascend {
    fn allocate(
        &self,
        devices: &[String],
    ) -> std::result::Result<ContainerAllocateResponse, Status> {
        let mut ids = devices
            .iter()
            .map(|d| {
                physical_id_of(d)
                    .ok_or_else(|| Status::invalid_argument(format!("no such device {d}")))
            })
            .collect::<std::result::Result<Vec<u32>, Status>>()?;
        ids.sort_unstable();
        Ok(ContainerAllocateResponse {
            envs: [(
                hcomm_crds::contract::ascend::ENV_ASCEND_VISIBLE_DEVICES.to_owned(),
                crate::testbed::device_plugin::visible_devices(&ids),
            )]
            .into(),
        })
    }

    fn preferred(&self, available: &[String], must_include: &[String], size: usize) -> Vec<String> {
        // The lowest physical ids first, as the real plugin packs a server's NPUs.
        let mut chosen: Vec<String> = must_include.to_vec();
        let mut rest: Vec<&String> = available
            .iter()
            .filter(|d| !must_include.contains(d))
            .collect();
        rest.sort_by_key(|d| physical_id_of(d).unwrap_or(u32::MAX));
        chosen.extend(
            rest.into_iter()
                .take(size.saturating_sub(chosen.len()))
                .cloned(),
        );
        chosen
    }
}

/// A running plugin and its annotation loop; both stop on drop.
pub struct AscendPlugin {
    _server: DevicePluginServer,
    annotating: JoinHandle<()>,
}

/// Where and for whom a node's plugin runs.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    /// The Node.
    pub node: String,
    /// The node's address (the annotation's `host_ip`).
    pub host_ip: String,
    /// The kubelet's root (its `device-plugins/` and `pod-resources/` are below it).
    pub kubelet_root: PathBuf,
    /// The extended resource.
    pub resource: String,
    /// The host's NPUs (physical ids `0..npus`).
    pub npus: u32,
    /// The host's hccn.conf (the device IPs the annotation carries).
    pub hccn_conf: HccnConf,
}

impl AscendPlugin {
    /// Serves the plugin, registers it with the node's kubelet (waiting for the kubelet's
    /// socket), and starts annotating.
    pub async fn start(spec: PluginSpec, client: kube::Client) -> Result<AscendPlugin> {
        let dir = spec.kubelet_root.join("device-plugins");
        let devices: Vec<String> = (0..spec.npus)
            .map(|n| kubelet_device_id(&spec.resource, n))
            .collect();
        let plugin = Arc::new(Ascend);
        let server =
            serve_device_plugin(&dir, "hcomm-ascend.sock", &spec.resource, devices, plugin)
                .await
                .map_err(|e| Error::Command {
                    command: format!("serve the device plugin in {}", dir.display()),
                    message: e.to_string(),
                })?;
        let deadline = Instant::now() + REGISTER_DEADLINE;
        loop {
            match server.register(CALL_DEADLINE).await {
                Ok(()) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(Error::Command {
                        command: format!("register the device plugin of {}", spec.node),
                        message: e.to_string(),
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        let annotating = tokio::spawn(annotate_forever(spec, client));
        Ok(AscendPlugin {
            _server: server,
            annotating,
        })
    }
}

impl Drop for AscendPlugin {
    fn drop(&mut self) {
        self.annotating.abort();
    }
}

async fn annotate_forever(spec: PluginSpec, client: kube::Client) {
    let kubelet = PodResourcesClient::new(
        spec.kubelet_root.join("pod-resources/kubelet.sock"),
        CALL_DEADLINE,
    );
    let mut done: BTreeSet<(String, String)> = BTreeSet::new();
    let mut ticks = tokio::time::interval(ANNOTATE_PERIOD);
    loop {
        ticks.tick().await;
        let Ok(pods) = kubelet.list().await else {
            continue;
        };
        let allocations = allocations(&spec, &pods);
        done.retain(|key| allocations.contains_key(key));
        for (key, allocation) in allocations {
            if done.contains(&key) {
                continue;
            }
            if annotate(&client, &spec, &allocation).await {
                done.insert(key);
            }
        }
    }
}

/// The kubelet's allocations of the plugin's resource, per Pod (pure).
fn allocations(
    spec: &PluginSpec,
    pods: &[hcomm_kubelet::PodResources],
) -> BTreeMap<(String, String), PodAllocation> {
    pods.iter()
        .filter_map(|p| {
            let containers: BTreeMap<String, Vec<u32>> = p
                .containers
                .iter()
                .filter_map(|c| {
                    let mut ids: Vec<u32> = c
                        .devices
                        .iter()
                        .filter(|d| d.resource_name == spec.resource)
                        .flat_map(|d| d.device_ids.iter().filter_map(|i| physical_id_of(i)))
                        .collect();
                    ids.sort_unstable();
                    (!ids.is_empty()).then(|| (c.name.clone(), ids))
                })
                .collect();
            (!containers.is_empty()).then(|| {
                (
                    (p.namespace.clone(), p.name.clone()),
                    PodAllocation {
                        namespace: p.namespace.clone(),
                        name: p.name.clone(),
                        node: spec.node.clone(),
                        containers,
                    },
                )
            })
        })
        .collect()
}

/// Writes the Pod's annotations unless they are there; true once they are.
async fn annotate(client: &kube::Client, spec: &PluginSpec, allocation: &PodAllocation) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &allocation.namespace);
    let Ok(Some(pod)) = pods.get_opt(&allocation.name).await else {
        return false;
    };
    let present = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(configuration_annotation(&spec.resource)));
    if present {
        return true;
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let wanted = annotations(
        &spec.resource,
        Admitted {
            pod_name: &allocation.name,
            uid: &uid,
            host_ip: &spec.host_ip,
        },
        allocation,
        spec.npus,
        &spec.hccn_conf,
        PluginFault::None,
    );
    let patch = serde_json::json!({"metadata": {"annotations": wanted}});
    pods.patch(
        &allocation.name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::ascend::RESOURCE_ASCEND910;

    #[test]
    fn allocate_gives_the_physical_ids_and_preferred_packs_the_lowest() {
        let p = Ascend;
        let r = p
            .allocate(&["Ascend910-3".into(), "Ascend910-1".into()])
            .unwrap();
        assert_eq!(
            r.envs[hcomm_crds::contract::ascend::ENV_ASCEND_VISIBLE_DEVICES],
            "1,3"
        );
        assert!(p.allocate(&["weird".into()]).is_err());
        let available: Vec<String> = [5, 2, 7, 0]
            .iter()
            .map(|n| format!("Ascend910-{n}"))
            .collect();
        assert_eq!(
            p.preferred(&available, &["Ascend910-7".into()], 3),
            ["Ascend910-7", "Ascend910-0", "Ascend910-2"]
        );
    }

    #[test]
    fn only_the_plugins_resource_makes_an_allocation() {
        let spec = PluginSpec {
            node: "host-0".into(),
            host_ip: "198.19.0.10".into(),
            kubelet_root: "/k".into(),
            resource: RESOURCE_ASCEND910.into(),
            npus: 4,
            hccn_conf: HccnConf::default(),
        };
        let pod = |name: &str, resource: &str, ids: &[&str]| hcomm_kubelet::PodResources {
            name: name.into(),
            namespace: "ns".into(),
            containers: vec![hcomm_kubelet::ContainerResources {
                name: "worker".into(),
                devices: vec![hcomm_kubelet::ContainerDevices {
                    resource_name: resource.into(),
                    device_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
                    topology: None,
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let a = allocations(
            &spec,
            &[
                pod("m-0", RESOURCE_ASCEND910, &["Ascend910-2", "Ascend910-0"]),
                pod("gpu", "nvidia.com/gpu", &["GPU-1"]),
            ],
        );
        assert_eq!(a.len(), 1);
        assert_eq!(a[&("ns".into(), "m-0".into())].devices(), [0, 2]);
    }
}
