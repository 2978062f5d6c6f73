//! A version-neutral, borrowed view of a table's servers and devices, so validation and
//! readers (the agent's control plan) are written once for v1.0 and v1.2.

use super::{v1, v12};

/// One server of any table version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerView<'a> {
    /// `server_id`.
    pub server_id: &'a str,
    /// `host_ip`, when the table has one.
    pub host_ip: Option<&'a str>,
    /// The server's devices, in table order.
    pub devices: Vec<DeviceView<'a>>,
}

impl<'a> ServerView<'a> {
    /// The server's host address: `host_ip`, else `server_id` (which HCCL tables commonly
    /// set to the host address).
    pub fn host_address(&self) -> &'a str {
        self.host_ip.unwrap_or(self.server_id)
    }
}

/// One device (rank) of any table version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceView<'a> {
    /// Physical device id.
    pub device_id: u32,
    /// The device's own address, when known.
    pub device_ip: Option<&'a str>,
    /// The rank.
    pub rank_id: u32,
    /// The device's id in its super pod (v1.2 only).
    pub super_device_id: Option<u32>,
}

impl<'a> From<&'a v1::Server> for ServerView<'a> {
    fn from(s: &'a v1::Server) -> Self {
        Self {
            server_id: &s.server_id,
            host_ip: s.host_ip.as_deref(),
            devices: s
                .device
                .iter()
                .map(|d| DeviceView {
                    device_id: d.device_id,
                    device_ip: d.device_ip.as_deref(),
                    rank_id: d.rank_id,
                    super_device_id: None,
                })
                .collect(),
        }
    }
}

impl<'a> From<&'a v12::Server> for ServerView<'a> {
    fn from(s: &'a v12::Server) -> Self {
        Self {
            server_id: &s.server_id,
            host_ip: s.host_ip.as_deref(),
            devices: s
                .device
                .iter()
                .map(|d| DeviceView {
                    device_id: d.device_id,
                    device_ip: d.device_ip.as_deref(),
                    rank_id: d.rank_id,
                    super_device_id: Some(d.super_device_id),
                })
                .collect(),
        }
    }
}
