//! A stand-in for the Ascend device plugin on kwok Nodes, for the operator's tests: the
//! Nodes advertise `huawei.com/Ascend910` (so the real scheduler counts it), and every
//! member Pod the scheduler binds gets the plugin's allocation annotation — the lowest
//! free NPU ids of its node, each with its own device IP — as the real plugin writes it at
//! admission. It polls (every 200 ms) rather than watches: simple, and the tests' waits
//! are seconds long.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hcomm_crds::contract::LABEL_GROUP;
use hcomm_crds::contract::ascend::{
    ANNOTATION_ASCEND_910_CONFIGURATION, AllocatedDevice, DeviceAllocation, RESOURCE_ASCEND910,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use tokio::task::JoinHandle;

/// NPUs per node (by name), with the node's ordinal for its device IPs.
pub type Inventory = Arc<Mutex<BTreeMap<String, (u32, u32)>>>;

/// The running stand-in; stops when dropped.
pub struct DevicePlugin {
    task: JoinHandle<()>,
    /// The nodes it serves.
    pub nodes: Inventory,
}

impl Drop for DevicePlugin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DevicePlugin {
    /// Starts allocating for member Pods in `namespace`.
    pub fn start(client: kube::Client, namespace: &str) -> Self {
        let nodes: Inventory = Arc::default();
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let task = tokio::spawn(allocate_forever(pods, nodes.clone()));
        Self { task, nodes }
    }

    /// Makes `node` advertise `npus` NPUs (allocatable and capacity, beside kwok's own
    /// defaults) and serves it.
    pub async fn add_node(
        &self,
        client: kube::Client,
        node: &str,
        npus: u32,
    ) -> anyhow::Result<()> {
        {
            let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
            let ordinal = nodes.len() as u32 + 1;
            nodes.insert(node.to_owned(), (ordinal, npus));
        }
        let resources = serde_json::json!({
            "cpu": "1k", "memory": "1Ti", "pods": "1M", (RESOURCE_ASCEND910): npus.to_string()
        });
        let patch =
            serde_json::json!({"status": {"capacity": resources, "allocatable": resources}});
        let api: Api<Node> = Api::all(client);
        api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}

async fn allocate_forever(pods: Api<Pod>, nodes: Inventory) {
    loop {
        if let Ok(list) = pods.list(&ListParams::default().labels(LABEL_GROUP)).await {
            let inventory = nodes.lock().unwrap_or_else(|e| e.into_inner()).clone();
            for (name, allocation) in allocations(&list.items, &inventory) {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    (ANNOTATION_ASCEND_910_CONFIGURATION): serde_json::to_string(&allocation).unwrap_or_default()
                }}});
                let _ = pods
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The allocations to write: for each bound Pod without one, the lowest NPUs of its node
/// no other Pod holds (none when the node has too few: the scheduler would not have bound
/// it, so that is a test failure the operator's status will show).
fn allocations(
    pods: &[Pod],
    inventory: &BTreeMap<String, (u32, u32)>,
) -> Vec<(String, DeviceAllocation)> {
    let mut held: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for pod in pods {
        let (Some(node), Some(text)) = (
            pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_ASCEND_910_CONFIGURATION)),
        ) else {
            continue;
        };
        if let Ok(a) = DeviceAllocation::parse(text) {
            held.entry(node)
                .or_default()
                .extend(a.physical_ids().unwrap_or_default());
        }
    }
    let mut out = Vec::new();
    for pod in pods {
        let annotated = pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_ASCEND_910_CONFIGURATION));
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        if annotated || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some((ordinal, npus)) = inventory.get(&node).copied() else {
            continue;
        };
        let want: u32 = pod
            .spec
            .as_ref()
            .map(|s| {
                s.containers
                    .iter()
                    .filter_map(|c| {
                        c.resources
                            .as_ref()?
                            .limits
                            .as_ref()?
                            .get(RESOURCE_ASCEND910)?
                            .0
                            .parse::<u32>()
                            .ok()
                    })
                    .sum()
            })
            .unwrap_or(0);
        let taken = held.entry(node.clone()).or_default();
        let ids: Vec<u32> = (0..npus)
            .filter(|id| !taken.contains(id))
            .take(want as usize)
            .collect();
        if ids.len() != want as usize {
            continue;
        }
        taken.extend(&ids);
        let name = pod.metadata.name.clone().unwrap_or_default();
        out.push((
            name.clone(),
            DeviceAllocation {
                pod_name: name,
                server_id: pod.metadata.uid.clone().unwrap_or_default(),
                host_ip: String::new(),
                super_pod_id: None,
                devices: ids
                    .iter()
                    .map(|id| AllocatedDevice {
                        device_id: id.to_string(),
                        device_ip: format!("192.168.{ordinal}.{}", id + 1),
                        super_device_id: None,
                    })
                    .collect(),
            },
        ));
    }
    out
}
