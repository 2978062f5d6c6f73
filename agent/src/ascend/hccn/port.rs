//! The NPU network as the pre-join check ([`super::check`]) reaches it: the node's
//! `hccn.conf` and `hccn_tool`, and the peers' published TLS switches. Production:
//! [`super::live::HccnNetwork`]; the member task's tests use an in-memory fake. Nothing
//! here writes anywhere: a joiner's check only reads, so serving members are untouched.

use std::net::IpAddr;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::conf::HccnConf;
use super::observe::DeviceObservation;
use super::output::PingResult;

/// The local side: `hccn.conf` and the member's devices.
#[derive(Debug, Clone)]
pub struct NodeObservation {
    pub conf: Result<HccnConf, String>,
    pub devices: Vec<DeviceObservation>,
}

/// One peer device's TLS switch as its node published it (None: not published).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTls {
    pub node: String,
    pub device: u32,
    pub enabled: Option<bool>,
}

pub trait NpuNetwork: Send + Sync {
    /// Reads `hccn.conf` and asks the tool about each of `devices`, by `deadline`.
    fn observe<'a>(
        &'a self,
        devices: &'a [u32],
        deadline: Instant,
    ) -> BoxFuture<'a, NodeObservation>;
    /// Pings `address` from local device `device` (`-ping -g address`), by `deadline`.
    fn ping(
        &self,
        device: u32,
        address: IpAddr,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<PingResult, String>>;
    /// The TLS switch of every device the `peers` published, by `deadline`; a peer is a
    /// rank-table `server_id` (a node name or data address) and is returned as given.
    fn peer_tls<'a>(
        &'a self,
        peers: &'a [String],
        deadline: Instant,
    ) -> BoxFuture<'a, Vec<PeerTls>>;
}
