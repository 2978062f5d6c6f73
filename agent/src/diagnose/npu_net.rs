//! The `npu-network` row of `diagnose`: each NPU's address, link, health and TLS switch
//! from `hccn.conf` and `hccn_tool`, and — when the rank table and the member's devices are
//! known — the same pre-join check a member runs ([`crate::ascend::hccn::check`]; peers'
//! TLS switches are not read here, the pings are). [`read`] does the I/O; the row is
//! `super::checks::npu_network` (pure).

use std::path::Path;
use std::time::Duration;

use hcomm_crds::node::{DeviceNetwork, NpuLink};
use tokio::time::Instant;

use crate::ascend::hccn::check::{MemberNpus, check as npu_check};
use crate::ascend::hccn::conf;
use crate::ascend::hccn::live::HccnNetwork;
use crate::ascend::hccn::observe::{observe, to_network};
use crate::ascend::hccn::runner::HccnTool;
use crate::nic::verify::Verdict;

/// What `diagnose` saw of the NPU network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NpuSeen {
    /// No tool at the path (not an Ascend node, or the driver's tools are not mounted).
    NoTool(String),
    Seen {
        /// Every device of the node, as the tool reports it.
        devices: Vec<(u32, DeviceNetwork)>,
        /// The pre-join check of the member's devices, when the table names them.
        verdict: Option<Verdict>,
    },
}

/// Asks the tool about every device, then runs the member's check within `budget`.
pub async fn read(
    tool: HccnTool,
    conf_path: &Path,
    device_ids: &[i32],
    member: Option<&MemberNpus>,
    budget: Duration,
) -> NpuSeen {
    if !tool.exists() {
        return NpuSeen::NoTool(format!("no hccn_tool at {}", tool.path.display()));
    }
    let conf = conf::read(conf_path);
    let deadline = Instant::now() + crate::inventory::npu_net::REFRESH_BUDGET;
    let mut devices = Vec::new();
    for id in device_ids.iter().filter_map(|d| u32::try_from(*d).ok()) {
        let o = observe(&tool, id, deadline).await;
        devices.push((id, to_network(conf.as_ref().ok(), &o)));
    }
    let verdict = match member {
        Some(m) => {
            let net = HccnNetwork::offline(tool, conf_path.to_owned());
            Some(npu_check(&net, m, budget).await)
        }
        None => None,
    };
    NpuSeen::Seen { devices, verdict }
}

/// One device in the row: `npu0 10.0.0.1 UP Success TLS off`.
pub fn describe(id: u32, n: &DeviceNetwork) -> String {
    let link = match n.link {
        Some(NpuLink::Up) => "UP",
        Some(NpuLink::Down) => "DOWN",
        None => "link ?",
    };
    let tls = match n.tls_enabled {
        Some(true) => "TLS on",
        Some(false) => "TLS off",
        None => "TLS ?",
    };
    let mut s = format!(
        "npu{id} {} {link} {} {tls}",
        n.configured_ip.as_deref().unwrap_or("no-address"),
        n.net_health.as_deref().unwrap_or("health ?"),
    );
    if let Some(e) = &n.error {
        s.push_str(&format!(" ({e})"));
    }
    s
}
