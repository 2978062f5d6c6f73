//! The production [`NpuNetwork`]: this node's `hccn.conf` and `hccn_tool` (paths from
//! `--hccn-conf` / `--hccn-tool`), and the peers' `HcommNode`s for their TLS switches
//! (none when offline, as in `diagnose` without a cluster). Every read is bounded by the
//! caller's deadline.

use std::net::IpAddr;
use std::path::PathBuf;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt as _};
use hcomm_crds::HcommNode;
use hcomm_crds::contract::LABEL_GROUP;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tokio::time::Instant;

use super::observe::observe;
use super::output::PingResult;
use super::port::{NodeObservation, NpuNetwork, PeerTls};
use super::runner::HccnTool;
use crate::config::Context;

pub struct HccnNetwork {
    tool: HccnTool,
    conf: PathBuf,
    client: Option<kube::Client>,
    /// (namespace, group) whose member Pods' nodes are the peers' candidates.
    group: Option<(String, String)>,
}

impl HccnNetwork {
    pub fn new(ctx: &Context) -> HccnNetwork {
        HccnNetwork {
            tool: ctx.cfg.sources.hccn(),
            conf: ctx.cfg.sources.hccn_conf.clone(),
            client: Some(ctx.client.clone()),
            group: None,
        }
    }

    /// Finds peers among the nodes of `group`'s member Pods in `namespace` (by name or
    /// data address), so a table naming servers by data address is understood.
    pub fn with_group(mut self, namespace: &str, group: &str) -> HccnNetwork {
        self.group = Some((namespace.to_owned(), group.to_owned()));
        self
    }

    /// This node's tool and conf only: peers' TLS switches are not read.
    pub fn offline(tool: HccnTool, conf: PathBuf) -> HccnNetwork {
        HccnNetwork {
            tool,
            conf,
            client: None,
            group: None,
        }
    }
}

impl NpuNetwork for HccnNetwork {
    fn observe<'a>(
        &'a self,
        devices: &'a [u32],
        deadline: Instant,
    ) -> BoxFuture<'a, NodeObservation> {
        async move {
            let conf = super::conf::read(&self.conf).map_err(|e| e.to_string());
            let mut out = Vec::new();
            for id in devices {
                out.push(observe(&self.tool, *id, deadline).await);
            }
            NodeObservation { conf, devices: out }
        }
        .boxed()
    }

    fn ping(
        &self,
        device: u32,
        address: IpAddr,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<PingResult, String>> {
        async move {
            let IpAddr::V4(v4) = address else {
                return Err(format!("{address} is not IPv4 (hccn_tool pings IPv4)"));
            };
            self.tool
                .ping(device, v4, deadline)
                .await
                .map_err(|e| e.to_string())
        }
        .boxed()
    }

    fn peer_tls<'a>(
        &'a self,
        peers: &'a [String],
        deadline: Instant,
    ) -> BoxFuture<'a, Vec<PeerTls>> {
        async move {
            let Some(client) = &self.client else {
                return Vec::new();
            };
            let names = match &self.group {
                Some((namespace, group)) => group_nodes(client, namespace, group, deadline).await,
                None => peers.to_vec(),
            };
            // The nodes read by the deadline; one that cannot be read is left out.
            let reads = crate::member::group::read_hcomm_nodes(
                client,
                names,
                crate::member::group::ReadAt::Latest,
            )
            .take_until(tokio::time::sleep_until(deadline));
            let nodes: Vec<HcommNode> = reads
                .filter_map(|(_, read)| std::future::ready(read.ok().flatten()))
                .collect()
                .await;
            let mut out = Vec::new();
            for peer in peers {
                let Some(n) = node_of(&nodes, peer) else {
                    continue;
                };
                let devices = n.status.as_ref().map(|s| s.devices.as_slice());
                for d in devices.unwrap_or_default() {
                    let Ok(device) = u32::try_from(d.id) else {
                        continue;
                    };
                    out.push(PeerTls {
                        node: peer.clone(),
                        device,
                        enabled: d.network.as_ref().and_then(|n| n.tls_enabled),
                    });
                }
            }
            out
        }
        .boxed()
    }
}

/// The nodes `group`'s member Pods are bound to (none when the list fails or the
/// deadline passes: the peers' switches are then unknown, which is not a mismatch).
async fn group_nodes(
    client: &kube::Client,
    namespace: &str,
    group: &str,
    deadline: Instant,
) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&format!("{LABEL_GROUP}={group}"));
    let Ok(Ok(list)) = tokio::time::timeout_at(deadline, pods.list(&params)).await else {
        return Vec::new();
    };
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The `HcommNode` a rank-table `server_id` names: the one of that name, else the one
/// whose data address it is.
pub fn node_of<'a>(nodes: &'a [HcommNode], server_id: &str) -> Option<&'a HcommNode> {
    nodes
        .iter()
        .find(|n| n.name_any() == server_id)
        .or_else(|| {
            nodes.iter().find(|n| {
                n.status
                    .as_ref()
                    .is_some_and(|s| s.data_address.as_deref() == Some(server_id))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, data_address: &str) -> HcommNode {
        serde_json::from_value(serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommNode",
            "metadata": {"name": name},
            "spec": {"nodeName": name},
            "status": {"dataAddress": data_address}
        }))
        .unwrap()
    }

    #[test]
    fn a_server_id_finds_its_node_by_name_or_by_data_address() {
        let nodes = [node("host-1", "198.18.0.11"), node("host-2", "198.18.0.12")];
        let name = |n: Option<&HcommNode>| n.map(|n| n.name_any());
        assert_eq!(name(node_of(&nodes, "host-2")), Some("host-2".into()));
        assert_eq!(name(node_of(&nodes, "198.18.0.11")), Some("host-1".into()));
        assert_eq!(name(node_of(&nodes, "198.18.0.99")), None);
    }
}
