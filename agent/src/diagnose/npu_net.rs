//! The `npu-network` row of `diagnose`: each NPU's address, link, health and TLS switch
//! from `hccn.conf` and `hccn_tool`, and — when the rank table and the member's devices are
//! known — the same pre-join check a member runs ([`crate::ascend::hccn::check`]; peers'
//! TLS switches are not read here, the pings are). [`read`] does the I/O, [`check`] is pure.

use std::path::Path;
use std::time::Duration;

use hcomm_crds::node::{DeviceNetwork, NpuLink};
use tokio::time::Instant;

use super::checks::{Finding, Outcome};
use super::facts::Facts;
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

fn describe(id: u32, n: &DeviceNetwork) -> String {
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

/// The row (pure).
pub fn check(f: &Facts) -> Finding {
    let row = Finding {
        id: "npu-network",
        symptom: "handshake timeout on all nodes",
        cause: "an NPU without its address, two with one, a RoCE link down, unhealthy, TLS differing, or a peer NPU unreachable",
        checked: "hccn.conf, hccn_tool -ip/-link/-net_health/-tls -g, -ping -g to the rank table's peer NPUs".into(),
        outcome: Outcome::Pass,
        detail: String::new(),
    };
    let with = |outcome, detail: String| Finding {
        outcome,
        detail,
        ..row.clone()
    };
    let Some(seen) = &f.npu_network else {
        return with(Outcome::Skip, "not looked at".into());
    };
    let (devices, verdict) = match seen {
        NpuSeen::NoTool(why) => return with(Outcome::Skip, why.clone()),
        NpuSeen::Seen { devices, verdict } => (devices, verdict),
    };
    let facts: Vec<String> = devices.iter().map(|(id, n)| describe(*id, n)).collect();
    let facts = if facts.is_empty() {
        "no devices".to_owned()
    } else {
        facts.join("; ")
    };
    match verdict {
        Some(v) if !v.ok => with(
            Outcome::Fail,
            format!("{}: {} [{facts}]", v.reason.as_str(), v.message),
        ),
        Some(v) => with(Outcome::Pass, format!("{} [{facts}]", v.message)),
        None => {
            let bad = devices.iter().any(|(_, n)| {
                n.error.is_some()
                    || n.link == Some(NpuLink::Down)
                    || n.net_health.as_deref().is_some_and(|h| h != "Success")
                    || n.configured_ip.is_none()
            });
            let outcome = if bad { Outcome::Warn } else { Outcome::Pass };
            with(
                outcome,
                format!("{facts} (no rank table and --devices: peers not pinged)"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::PodReason;

    fn net(ip: &str, link: NpuLink) -> DeviceNetwork {
        DeviceNetwork {
            configured_ip: Some(ip.into()),
            link: Some(link),
            net_health: Some("Success".into()),
            tls_enabled: Some(false),
            error: None,
        }
    }

    fn facts(seen: NpuSeen) -> Facts {
        Facts {
            npu_network: Some(seen),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_without_the_tool_is_skipped_saying_where_it_looked() {
        let r = check(&facts(NpuSeen::NoTool("no hccn_tool at /x".into())));
        assert_eq!(
            (r.outcome, r.detail.as_str()),
            (Outcome::Skip, "no hccn_tool at /x")
        );
    }

    #[test]
    fn the_devices_facts_are_listed_and_a_down_link_warns_without_a_table() {
        let r = check(&facts(NpuSeen::Seen {
            devices: vec![
                (0, net("10.0.0.1", NpuLink::Up)),
                (1, net("10.0.0.2", NpuLink::Down)),
            ],
            verdict: None,
        }));
        assert_eq!(r.outcome, Outcome::Warn);
        assert!(
            r.detail
                .contains("npu0 10.0.0.1 UP Success TLS off; npu1 10.0.0.2 DOWN"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn a_failed_member_check_fails_the_row_with_its_reason() {
        let r = check(&facts(NpuSeen::Seen {
            devices: vec![(0, net("10.0.0.1", NpuLink::Up))],
            verdict: Some(Verdict {
                ok: false,
                reason: PodReason::NpuPingFailed,
                message: "1 of 1 NPU pings from n failed".into(),
            }),
        }));
        assert_eq!(r.outcome, Outcome::Fail);
        assert!(
            r.detail.starts_with("NpuPingFailed: 1 of 1"),
            "{}",
            r.detail
        );
    }
}
