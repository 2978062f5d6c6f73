//! Fetch (the first step of the pipeline): read what the cluster holds about a group —
//! its member Pods, the devices every member Pod holds, the `HcommNode` inventories and the
//! recorded rank table — and turn it into planner inputs (and, for the `LinksHealthy`
//! condition, the link tests every node's agent published). The conversions are pure.

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::contract::{ANNOTATION_DEVICES, LABEL_GROUP};
use hcomm_crds::{DeviceHealth, HcommGroup, HcommNode, LinkTestResult};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::phase::{self, ObservedMember, parse_devices};
use crate::planner::{Device, NodeInventory, Recorded};
use crate::rank_table::{EPOCH_KEY, MEMBERS_KEY, config_map_name};

pub use hcomm_crds::contract::ANNOTATION_AVOID_NODES;

/// What the cluster holds about one group.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The group's member Pods.
    pub members: Vec<ObservedMember>,
    /// Devices held by member Pods of every group, per node.
    pub used_devices: BTreeMap<String, BTreeSet<i32>>,
    /// Node inventories.
    pub nodes: Vec<NodeInventory>,
    /// The latest link test per peer each node's agent published, by node name.
    pub link_tests: BTreeMap<String, Vec<LinkTestResult>>,
    /// The recorded epoch and member set.
    pub recorded: Recorded,
    /// The rank-table ConfigMap, if any.
    pub config_map: Option<ConfigMap>,
}

/// Reads everything the planner needs about `group`.
pub async fn fetch(ctx: &Context, group: &HcommGroup) -> Result<Observed> {
    let name = group.name_any();
    let namespace = group.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let own = pods
        .list(&ListParams::default().labels(&format!("{LABEL_GROUP}={name}")))
        .await
        .map_err(Error::kube(format!(
            "list member Pods of {namespace}/{name}"
        )))?;
    let all_members: Api<Pod> = match &ctx.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let every = all_members
        .list(&ListParams::default().labels(LABEL_GROUP))
        .await
        .map_err(Error::kube("list member Pods of every group"))?;
    let nodes: Api<HcommNode> = Api::all(ctx.client.clone());
    let nodes = nodes
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("list HcommNodes"))?;
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let config_map = config_maps
        .get_opt(&config_map_name(&name))
        .await
        .map_err(Error::kube(format!(
            "read rank table of {namespace}/{name}"
        )))?;

    let uid = group.meta().uid.clone();
    let members = own
        .items
        .iter()
        .filter(|pod| owned_by(pod, uid.as_deref()))
        .filter_map(phase::observe)
        .collect();
    Ok(Observed {
        members,
        used_devices: used_devices(&every.items),
        nodes: nodes.items.iter().map(inventory).collect(),
        link_tests: link_tests(&nodes.items),
        recorded: recorded(config_map.as_ref(), group),
        config_map,
    })
}

fn owned_by(pod: &Pod, uid: Option<&str>) -> bool {
    let Some(uid) = uid else { return true };
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Devices held per node by member Pods that have not finished (Succeeded/Failed Pods
/// release theirs).
pub fn used_devices(pods: &[Pod]) -> BTreeMap<String, BTreeSet<i32>> {
    let mut used: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for pod in pods {
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let devices = pod.annotations().get(ANNOTATION_DEVICES);
        if let (false, Some(node), Some(devices)) = (finished, node, devices) {
            used.entry(node).or_default().extend(parse_devices(devices));
        }
    }
    used
}

/// The planner's view of an `HcommNode`.
pub fn inventory(node: &HcommNode) -> NodeInventory {
    let status = node.status.clone().unwrap_or_default();
    NodeInventory {
        name: node.spec.node_name.clone(),
        topology: status.topology,
        data_address: status.data_address,
        devices: status
            .devices
            .into_iter()
            .map(|d| Device {
                id: d.id,
                ip: d.ip,
                healthy: d.health == DeviceHealth::Healthy,
            })
            .collect(),
    }
}

/// The link tests of every node, by node name (nodes without results are left out).
pub fn link_tests(nodes: &[HcommNode]) -> BTreeMap<String, Vec<LinkTestResult>> {
    nodes
        .iter()
        .filter_map(|node| {
            let tests = node.status.as_ref()?.link_tests.clone();
            (!tests.is_empty()).then(|| (node.spec.node_name.clone(), tests))
        })
        .collect()
}

/// The recorded epoch and set: the rank-table ConfigMap, else the group status.
pub fn recorded(config_map: Option<&ConfigMap>, group: &HcommGroup) -> Recorded {
    let status_epoch = group.status.as_ref().map_or(0, |s| s.epoch);
    let Some(data) = config_map.and_then(|c| c.data.as_ref()) else {
        return Recorded {
            epoch: status_epoch,
            members: BTreeSet::new(),
        };
    };
    let epoch = data
        .get(EPOCH_KEY)
        .and_then(|e| e.trim().parse().ok())
        .unwrap_or(0);
    Recorded {
        epoch: epoch.max(status_epoch),
        members: data
            .get(MEMBERS_KEY)
            .map(|m| {
                m.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Nodes to avoid, from the group's annotation.
pub fn avoid_nodes(group: &HcommGroup) -> Vec<String> {
    group
        .annotations()
        .get(ANNOTATION_AVOID_NODES)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}
