//! [`Nodes::Kubelet`](super::Nodes::Kubelet): a real node on every host
//! ([`crate::realnode`]) with the images its Pods run and the Ascend device plugin on the
//! hosts' NPUs, in place of kwok Nodes and the process kubelet.
//!
//! The testbed still runs the agents and the operator as processes (entering each node's
//! namespaces), so tests can kill, roll and read them; the chart's own agent DaemonSet
//! Pods wait in ErrImagePull until a test imports the agent image and upgrades the
//! release to run them (`e2e/tests/realnode.rs`, the chart scenario).

use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};

use super::{Error, Result, Testbed, binaries, npus};
use crate::controlplane::assets;
use crate::realnode::ascend_plugin::{AscendPlugin, PluginSpec};
use crate::realnode::image::ImageSpec;
use crate::realnode::{self, KubeProxy, NodeSpec, RealNode};

/// The reference worker's image, as the examples name it.
pub const WORKER_IMAGE: &str = "hcomm/example-worker:0.1.0";

/// How long a node may take from its kubelet's start to Ready.
const NODE_READY: Duration = Duration::from_secs(60);

/// Host `i`'s `/24` of the testbed's `/16` Pod range.
pub fn pod_subnet(pod_range: &str, i: usize) -> Result<String> {
    let unsupported = || {
        Error::Unsupported(format!(
            "a Pod range of the form a.b.0.0/16, not {pod_range}"
        ))
    };
    let (net, len) = pod_range.split_once('/').ok_or_else(unsupported)?;
    let octets: Vec<&str> = net.split('.').collect();
    if len != "16" || octets.len() != 4 || i > 250 {
        return Err(unsupported());
    }
    Ok(format!("{}.{}.{}.0/24", octets[0], octets[1], i + 1))
}

impl Testbed {
    /// Builds the images, starts every host's node, routes their Pod ranges to each
    /// other, waits for every Node to be Ready, and registers each host's NPUs.
    pub(super) async fn start_real_nodes(&mut self, pod_range: &str) -> Result<()> {
        let images = self.dir.join("images");
        std::fs::create_dir_all(&images).map_err(Error::io("create images dir"))?;
        let worker = images.join("example-worker.tar");
        ImageSpec::programs(
            WORKER_IMAGE,
            &[(
                binaries::find(binaries::WORKER)?,
                "/usr/local/bin/hcomm-worker",
            )],
        )?
        .write_archive(&worker)?;
        let archives = [realnode::pause::archive()?, worker];
        let kubelet = assets::kubelet().map_err(realnode::Error::from)?;
        let kube_proxy = assets::kube_proxy().map_err(realnode::Error::from)?;
        let proxy_kubeconfig = self.dir.join("nodes/kube-proxy.kubeconfig");
        std::fs::create_dir_all(self.dir.join("nodes")).map_err(Error::io("create nodes dir"))?;
        realnode::kube_proxy_kubeconfig(self.cp.kubeconfig_path(), &proxy_kubeconfig)?;
        for h in self.hosts.hosts() {
            let dir = self.dir.join("nodes").join(h.name());
            std::fs::create_dir_all(&dir).map_err(Error::io("create node dir"))?;
            let kubeconfig = dir.join("kubelet.kubeconfig");
            realnode::node_kubeconfig(self.cp.kubeconfig_path(), h.name(), &kubeconfig)?;
            let host_root = self.host_root(h.index());
            let unique = format!("{}-{}", self.hosts.prefix(), h.name());
            let subnet = pod_subnet(pod_range, h.index())?;
            let node = RealNode::start(&NodeSpec {
                name: h.name(),
                netns: h.netns().expect("namespace hosts (checked at start)"),
                address: h.mgmt_ip(),
                gateway: self.hosts.mgmt_gateway(),
                host_root: &host_root,
                dir: &dir,
                unique: &unique,
                pod_subnet: &subnet,
                kubeconfig: &kubeconfig,
                kubelet: &kubelet,
                kube_proxy: Some(KubeProxy {
                    binary: &kube_proxy,
                    kubeconfig: &proxy_kubeconfig,
                    cluster_cidr: pod_range,
                }),
                images: &archives,
            })?;
            self.real_nodes.push(node);
        }
        for (i, from) in self.real_nodes.iter().enumerate() {
            let netns = self.hosts.host(i)?.netns().expect("namespace hosts");
            for (j, to) in self.real_nodes.iter().enumerate() {
                if i != j {
                    from.route_to(netns, to)?;
                }
            }
        }
        let client = self.cp.client().await?;
        for node in &self.real_nodes {
            realnode::wait_ready(client.clone(), node, NODE_READY).await?;
        }
        if self.options.devices_per_host > 0 {
            self.start_device_plugins(client).await?;
        }
        Ok(())
    }

    /// The Ascend device plugin on each host, and the node labels it publishes.
    async fn start_device_plugins(&mut self, client: kube::Client) -> Result<()> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        let labels = serde_json::json!({"metadata": {"labels": npus::node_labels()}});
        for (i, node) in self.real_nodes.iter().enumerate() {
            nodes
                .patch(node.name(), &PatchParams::default(), &Patch::Merge(&labels))
                .await
                .map_err(Error::kube(format!("label Node {}", node.name())))?;
            let hccn_conf = if self.hosts.npus_per_host() > 0 {
                self.hosts.hccn_conf(i)?
            } else {
                Default::default()
            };
            let plugin = AscendPlugin::start(
                PluginSpec {
                    node: node.name().to_owned(),
                    host_ip: node.address().to_string(),
                    kubelet_root: node.kubelet_root().to_path_buf(),
                    resource: hcomm_crds::contract::ascend::RESOURCE_ASCEND910.to_owned(),
                    npus: self.options.devices_per_host,
                    hccn_conf,
                },
                client.clone(),
            )
            .await?;
            self.ascend_plugins.push(plugin);
        }
        Ok(())
    }

    /// The real nodes, with [`super::Nodes::Kubelet`].
    pub fn real_nodes(&self) -> &[RealNode] {
        &self.real_nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_gets_its_own_slash_24_of_the_range() {
        assert_eq!(pod_subnet("10.117.0.0/16", 0).unwrap(), "10.117.1.0/24");
        assert_eq!(pod_subnet("10.117.0.0/16", 3).unwrap(), "10.117.4.0/24");
        assert!(pod_subnet("127.100.0.0/8", 0).is_err());
    }
}
