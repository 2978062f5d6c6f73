//! Rank table v1.0: the format `RANK_TABLE_FILE` points at on A2 (Atlas 800T/900) clusters
//! and the one the operator publishes. Every number is a JSON string, as HCCL writes it.
//!
//! ```json
//! {"version": "1.0", "server_count": "1", "status": "completed",
//!  "server_list": [{"server_id": "10.0.0.1", "host_ip": "10.0.0.1",
//!    "device": [{"device_id": "0", "device_ip": "192.168.1.1", "rank_id": "0"}]}]}
//! ```

use serde::{Deserialize, Serialize};

use super::{Status, num};

/// The `version` value of this format.
pub const VERSION: &str = "1.0";

/// A v1.0 rank table. Field order is the order the operator has always written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankTable {
    /// Always [`VERSION`].
    pub version: String,
    /// `len(server_list)`; HCCL refuses a table where they differ.
    #[serde(with = "num")]
    pub server_count: u32,
    /// One entry per server (node), in rank order.
    pub server_list: Vec<Server>,
    /// HCCL waits (polling every second) until a table reads `completed`.
    pub status: Status,
}

/// One server (node) of a v1.0 table.
pub type Server = super::ServerOf<Device>;

/// One rank of a v1.0 table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Physical device id on its server.
    #[serde(with = "num")]
    pub device_id: u32,
    /// The device's own NIC address (RoCE). All devices of a table have one or none do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_ip: Option<String>,
    /// The rank.
    #[serde(with = "num")]
    pub rank_id: u32,
}

impl RankTable {
    /// A completed table of `servers`, with `server_count` filled in.
    pub fn completed(server_list: Vec<Server>) -> Self {
        Self {
            version: VERSION.to_owned(),
            server_count: u32::try_from(server_list.len()).unwrap_or(u32::MAX),
            server_list,
            status: Status::Completed,
        }
    }
}
