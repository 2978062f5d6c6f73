//! A server (node) entry of a rank table. v1.0 and v1.2 servers have the same fields and
//! differ only in their devices, so both formats name this one struct with their own
//! device type ([`super::v1::Server`], [`super::v12::Server`]).

use serde::{Deserialize, Serialize};

/// One server of a table whose devices are `D`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerOf<D> {
    /// The server's identity (an address or a name).
    pub server_id: String,
    /// The server's host address; optional in the format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    /// The server's ranks, in rank order.
    pub device: Vec<D>,
}
