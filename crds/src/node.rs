//! `HcommNode`: the inventory a node agent publishes about its node (cluster-scoped).
//!
//! The agent is the only writer. The operator reads it to place members (devices,
//! topology labels) and to fill the rank table (device and data addresses).

// kube's `printcolumn(...)` repeats `type_ = ...`; clippy mistakes that for a duplicate.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What hcomm knows about one node: its devices, NICs, topology and software, published
/// by the node's agent. Named after the Kubernetes Node.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "hcomm.io",
    version = "v1alpha1",
    kind = "HcommNode",
    // Without `doc`, kube's derive says "Auto-generated derived type ..." (see HcommGroup).
    doc = "What hcomm knows about one node: its devices, NICs, topology and software, published by the node's agent. Named after the Kubernetes Node.",
    plural = "hcommnodes",
    shortname = "hcn",
    category = "hcomm",
    status = "HcommNodeStatus",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Data-IP", type_ = "string", json_path = ".status.dataAddress"),
    printcolumn(name = "CANN", type_ = "string", json_path = ".status.software.cann"),
    printcolumn(
        name = "Driver",
        type_ = "string",
        json_path = ".status.software.driver"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HcommNodeSpec {
    /// The Kubernetes Node this inventory describes.
    pub node_name: String,
}

/// The node's inventory as last observed by its agent.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HcommNodeStatus {
    /// Accelerator devices (NPUs), or CPU ranks on CPU nodes.
    #[serde(default)]
    pub devices: Vec<DeviceInventory>,

    /// Network interfaces and their role.
    #[serde(default)]
    pub nics: Vec<NicInventory>,

    /// The address of the NIC the agent resolved as the data NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_address: Option<String>,

    /// Where the node sits in the network.
    #[serde(default)]
    pub topology: TopologyLabels,

    /// Driver, firmware and CANN versions.
    #[serde(default)]
    pub software: SoftwareVersions,

    /// Size of `/dev/shm` in bytes, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_bytes: Option<i64>,

    /// The latest link test to each peer the agent probed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link_tests: Vec<LinkTestResult>,

    /// When the agent last refreshed this inventory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,

    /// Node-level conditions (e.g. `AgentReady`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One accelerator device (or CPU rank slot).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInventory {
    /// The physical device id (`/dev/davinci<id>`).
    pub id: i32,
    /// The device model (e.g. `Ascend910B3`), or `cpu`.
    pub model: String,
    /// The NUMA node the device is attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// The device's own RoCE address (`device_ip` in HCCL rank tables), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Health as reported by the driver.
    pub health: DeviceHealth,
    /// The device's RoCE network as `hccn_tool` last reported it (NPUs only); peers
    /// compare their TLS switch against it before joining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<DeviceNetwork>,
}

/// One NPU's own network (its RoCE port), as `hccn_tool` reports it. A field is absent when
/// the tool could not tell; `error` then says why.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNetwork {
    /// The address in `/etc/hccn.conf` (`address_N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configured_ip: Option<String>,
    /// The RoCE link state (`hccn_tool -i N -link -g`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<NpuLink>,
    /// The network health (`hccn_tool -i N -net_health -g`), e.g. `Success`, `Fault`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_health: Option<String>,
    /// Whether TLS is switched on for the device (`hccn_tool -i N -tls -g`); it must be
    /// the same on every device of a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_enabled: Option<bool>,
    /// What went wrong reading the state, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An NPU's RoCE link state.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NpuLink {
    /// `link status: UP`.
    Up,
    /// `link status: DOWN`.
    Down,
}

/// Device health.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceHealth {
    /// The driver reports the device healthy.
    Healthy,
    /// The driver reports a fault.
    Unhealthy,
    /// The health could not be read.
    Unknown,
}

/// One network interface.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NicInventory {
    /// The interface name.
    pub name: String,
    /// Its addresses (CIDR notation).
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Link speed in Mbit/s, if the driver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<i64>,
    /// The NUMA node of the NIC, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// Whether the link is up.
    pub up: bool,
    /// What the interface is for.
    pub role: NicRole,
}

/// The role of a NIC.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NicRole {
    /// Carries collective traffic (matches the data-NIC rule).
    Data,
    /// Carries management traffic (API server, SSH).
    Management,
    /// Neither (loopback, bridges, unused).
    Other,
}

/// Where the node sits in the network; ranks are ordered by these so ring neighbours are
/// physically close.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLabels {
    /// The super-pod (Atlas SuperPoD) the node belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_pod: Option<String>,
    /// The rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// The top-of-rack switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
}

/// Software versions; `unknown` where the version file or tool was missing.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SoftwareVersions {
    /// The NPU driver version.
    pub driver: String,
    /// The NPU firmware version.
    pub firmware: String,
    /// The CANN toolkit version.
    pub cann: String,
    /// The hcomm agent version.
    pub agent: String,
}

impl Default for SoftwareVersions {
    fn default() -> Self {
        let unknown = || UNKNOWN_VERSION.to_owned();
        Self {
            driver: unknown(),
            firmware: unknown(),
            cann: unknown(),
            agent: unknown(),
        }
    }
}

/// The value of a version that could not be read.
pub const UNKNOWN_VERSION: &str = "unknown";

/// The result of one link test from this node to a peer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LinkTestResult {
    /// The peer node.
    pub peer: String,
    /// The peer's data address.
    pub peer_address: String,
    /// The local interface used.
    pub interface: String,
    /// Whether the peer answered within the deadline.
    pub reachable: bool,
    /// Round-trip latency in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_micros: Option<i64>,
    /// Measured throughput in Mbit/s, if a bandwidth probe ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<i64>,
    /// The error, when not reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the test ran.
    pub time: Time,
}
