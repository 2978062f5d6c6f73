//! The node's configuration files, rendered from what differs between nodes (pure, so
//! each setting this sandbox needs is pinned by a test and said why once).

use std::net::Ipv4Addr;
use std::path::Path;

/// The sandbox image containerd runs each Pod's network namespace in. Built here
/// ([`super::pause`]) and imported under this name, so nothing is ever pulled.
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// containerd's socket inside the node's mount namespace (its `/run` is the node's own).
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";

/// The CNI plugins Debian's `containernetworking-plugins` installs.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// containerd 1.6's CRI configuration for one node. `state` and `root` are the node's own
/// (its `/run` and `/var/lib` are bind mounts of the host's folders); `cni_conf_dir`
/// holds only this node's network.
pub fn containerd_toml(root: &Path, cni_conf_dir: &Path) -> String {
    format!(
        r#"version = 2
root = "{root}"
state = "/run/containerd"
# Snapshotters and tracing this sandbox has no use for (their probes only log errors).
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{CONTAINERD_SOCKET}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  # Without CAP_SYS_RESOURCE in the bounding set, lowering a container's oom_score_adj
  # fails and runc dies ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
"#,
        root = root.display(),
        cni = cni_conf_dir.display(),
    )
}

/// The Pod network of one node: a bridge inside the node's network namespace, addresses
/// from the node's own `/24` (host-local), the node itself as every Pod's gateway. The
/// routes between nodes' ranges and from the root namespace are the testbed's
/// ([`super::RealNode::start`]).
pub fn cni_conflist(pod_subnet: &str) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "hcomm-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

/// What differs between nodes' kubelets.
#[derive(Debug, Clone)]
pub struct KubeletSettings<'a> {
    /// The address the kubelet serves on and reports as the Node's InternalIP.
    pub address: Ipv4Addr,
    /// The node's cgroup below every hierarchy's root (`/<name>`), made beforehand.
    pub cgroup_root: &'a str,
}

/// The `KubeletConfiguration` of one node.
pub fn kubelet_config(s: &KubeletSettings<'_>) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This sandbox has cgroups v1 (hybrid) only, which kubelet 1.35 refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
containerRuntimeEndpoint: unix://{CONTAINERD_SOCKET}
# The node's API serves logs and exec to the API server on the management network only;
# a test node trusts every caller there.
address: {address}
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
readOnlyPort: 0
failSwapOn: false
# Nodes share one machine's disk and memory: evict only when it is nearly out of both.
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
# Images are imported, never pulled: none may be collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# The machine's resolv.conf names resolvers no Pod here may use.
resolvConf: ""
"#,
        cgroup_root = s.cgroup_root,
        address = s.address,
    )
}

/// kube-proxy's configuration for one node: iptables mode inside the host's network
/// namespace. The conntrack settings it would write are machine-wide (`nf_conntrack_max`,
/// the TCP timeouts): zero leaves each as the machine has it.
pub fn kube_proxy_config(kubeconfig: &Path, node: &str, cluster_cidr: &str) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {node}
clusterCIDR: {cluster_cidr}
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: [primary]
"#,
        kubeconfig = kubeconfig.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_never_pulls_its_sandbox_and_keeps_oom_scores() {
        let t = containerd_toml(Path::new("/n/containerd"), Path::new("/n/cni"));
        assert!(t.contains(r#"sandbox_image = "registry.k8s.io/pause:3.10""#));
        assert!(t.contains("restrict_oom_score_adj = true"));
        assert!(t.contains(r#"conf_dir = "/n/cni""#));
        assert!(t.contains(r#"root = "/n/containerd""#));
    }

    #[test]
    fn the_pod_network_is_the_nodes_subnet_behind_a_gateway_bridge() {
        let v: serde_json::Value = serde_json::from_str(&cni_conflist("10.100.3.0/24")).unwrap();
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.100.3.0/24");
    }

    #[test]
    fn kube_proxy_leaves_the_machines_conntrack_settings_alone() {
        let yaml = kube_proxy_config(Path::new("/n/kp.kubeconfig"), "host-1", "10.100.0.0/16");
        let v: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(v["mode"], "iptables");
        assert_eq!(v["hostnameOverride"], "host-1");
        assert_eq!(v["conntrack"]["maxPerCore"], 0);
        assert_eq!(v["conntrack"]["tcpEstablishedTimeout"], "0s");
        assert_eq!(v["clientConnection"]["kubeconfig"], "/n/kp.kubeconfig");
    }

    #[test]
    fn the_kubelet_runs_on_cgroup_v1_with_its_own_root_and_collects_no_image() {
        let yaml = kubelet_config(&KubeletSettings {
            address: Ipv4Addr::new(198, 19, 0, 10),
            cgroup_root: "/hcs1-host-0",
        });
        let v: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(v["failCgroupV1"], false);
        assert_eq!(v["cgroupDriver"], "cgroupfs");
        assert_eq!(v["cgroupRoot"], "/hcs1-host-0");
        assert_eq!(v["address"], "198.19.0.10");
        assert_eq!(v["imageGCHighThresholdPercent"], 100);
        assert_eq!(
            v["containerRuntimeEndpoint"],
            "unix:///run/containerd/containerd.sock"
        );
    }
}
