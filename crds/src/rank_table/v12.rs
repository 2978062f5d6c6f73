//! Rank table v1.2: the A3 (super pod) format. Devices add their super-pod device id
//! (`super_device_id`, from `npu-smi info -t spod-info`) and optional backup NIC; the table
//! adds `super_pod_list`, which assigns every server to one super pod. `server_count` is
//! optional here. Numbers are JSON strings, as in v1.0.

use serde::{Deserialize, Serialize};

use super::{Status, num};

/// The `version` value of this format.
pub const VERSION: &str = "1.2";

/// A v1.2 rank table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankTable {
    /// Always [`VERSION`].
    pub version: String,
    /// HCCL waits until a table reads `completed`.
    pub status: Status,
    /// `len(server_list)` when present.
    #[serde(default, with = "num::option", skip_serializing_if = "Option::is_none")]
    pub server_count: Option<u32>,
    /// One entry per server, in rank order.
    pub server_list: Vec<Server>,
    /// Which servers share a super pod.
    #[serde(default)]
    pub super_pod_list: Vec<SuperPod>,
}

/// One server of a v1.2 table.
pub type Server = super::ServerOf<Device>;

/// One rank of a v1.2 table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Physical device id on its server.
    #[serde(with = "num")]
    pub device_id: u32,
    /// The device's own NIC address. All devices of a table have one or none do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_ip: Option<String>,
    /// The device's id inside its super pod (unique per super pod).
    #[serde(with = "num")]
    pub super_device_id: u32,
    /// A backup NIC address of the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_device_ip: Option<String>,
    /// The port of the backup NIC.
    #[serde(default, with = "num::option", skip_serializing_if = "Option::is_none")]
    pub backup_device_port: Option<u32>,
    /// The rank.
    #[serde(with = "num")]
    pub rank_id: u32,
}

/// One super pod: the servers that share its fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuperPod {
    /// The super pod's id.
    pub super_pod_id: String,
    /// Its servers, by `server_id`.
    pub server_list: Vec<SuperPodServer>,
}

/// A server reference inside a super pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuperPodServer {
    /// The `server_id` of a server of the table's `server_list`.
    pub server_id: String,
}
