//! The NPU network verdict (pure), beside [`crate::nic::verify::decide`]: given what
//! `hccn.conf`, `hccn_tool` and the peers' `HcommNode`s say about the member's devices and
//! its group, decide whether HCCL can connect, with a named reason and a message naming
//! the devices, nodes and addresses to fix. Every failing check is in the message; the
//! reason is the first in [`decide`]'s order.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hcomm_crds::contract::PodReason;
use hcomm_crds::node::NpuLink;

use super::observe::DeviceObservation;
use super::output::PingResult;
use super::port::PeerTls;
use crate::nic::verify::Verdict;

/// One of the member's devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDevice {
    pub id: u32,
    /// The rank table's `device_ip` for it, as written.
    pub table_ip: String,
    /// `address_N` in `hccn.conf`.
    pub conf_ip: Option<IpAddr>,
    pub observed: DeviceObservation,
}

/// One ping from a local device to a peer device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    pub from: u32,
    pub peer: String,
    pub peer_device: u32,
    pub address: String,
    pub result: Result<PingResult, String>,
}

/// Everything the verdict looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NpuFacts {
    pub node: String,
    /// Why `hccn.conf` could not be read, if it could not.
    pub conf_error: Option<String>,
    pub local: Vec<LocalDevice>,
    /// Every `address_N` of the node's `hccn.conf`, by device (duplicates across the node
    /// break HCCL even on devices outside this member).
    pub node_addresses: Vec<(u32, IpAddr)>,
    /// The peers' devices of this group.
    pub peer_tls: Vec<PeerTls>,
    pub pings: Vec<Ping>,
}

fn ip_missing(f: &NpuFacts) -> Option<String> {
    let missing: Vec<String> = f
        .local
        .iter()
        .filter(|d| d.conf_ip.is_none())
        .map(|d| format!("device {} has no address_{} in hccn.conf", d.id, d.id))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let why = f
        .conf_error
        .as_deref()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    Some(format!(
        "{}{why}; the rank table expects device_ip there",
        missing.join(", ")
    ))
}

fn ip_mismatch(f: &NpuFacts) -> Option<String> {
    let mut bad = Vec::new();
    for d in &f.local {
        let Some(conf) = d.conf_ip else { continue };
        let table: Option<IpAddr> = d.table_ip.parse().ok();
        if table != Some(conf) {
            bad.push(format!(
                "device {}: rank table device_ip {} but hccn.conf address_{}={conf}",
                d.id, d.table_ip, d.id
            ));
        }
        if let Some(tool) = d.observed.tool_ip()
            && tool != conf
        {
            bad.push(format!(
                "device {}: hccn_tool -ip -g says {tool} but hccn.conf address_{}={conf}",
                d.id, d.id
            ));
        }
    }
    (!bad.is_empty()).then(|| bad.join("; "))
}

fn ip_duplicate(f: &NpuFacts) -> Option<String> {
    let mut by_ip: BTreeMap<IpAddr, Vec<u32>> = BTreeMap::new();
    let tool_ips = f
        .local
        .iter()
        .filter_map(|d| Some((d.id, d.observed.tool_ip()?)));
    for (id, ip) in f.node_addresses.iter().copied().chain(tool_ips) {
        let ids = by_ip.entry(ip).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let dups: Vec<String> = by_ip
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(ip, ids)| {
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            format!("devices {} of {} share {ip}", ids.join(" and "), f.node)
        })
        .collect();
    (!dups.is_empty()).then(|| dups.join("; "))
}

fn tool_failed(f: &NpuFacts) -> Option<String> {
    let mut bad = Vec::new();
    for d in &f.local {
        let o = &d.observed;
        for e in [
            o.ip.as_ref().err(),
            o.link.as_ref().err(),
            o.health.as_ref().err(),
            o.tls.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        {
            bad.push(format!("device {}: {e}", d.id));
        }
    }
    (!bad.is_empty()).then(|| bad.join("; "))
}

fn link_down(f: &NpuFacts) -> Option<String> {
    let down: Vec<String> = f
        .local
        .iter()
        .filter(|d| d.observed.link == Ok(NpuLink::Down))
        .map(|d| d.id.to_string())
        .collect();
    (!down.is_empty()).then(|| {
        format!(
            "the RoCE link of device {} on {} is DOWN (hccn_tool -link -g)",
            down.join(","),
            f.node
        )
    })
}

fn unhealthy(f: &NpuFacts) -> Option<String> {
    let bad: Vec<String> = f
        .local
        .iter()
        .filter_map(|d| {
            let h = d.observed.health.as_ref().ok()?;
            (!h.healthy()).then(|| format!("device {}: net health status {}", d.id, h.0))
        })
        .collect();
    (!bad.is_empty()).then(|| format!("{} on {}", bad.join("; "), f.node))
}

fn tls_mismatch(f: &NpuFacts) -> Option<String> {
    let local = f.local.iter().filter_map(|d| {
        let t = d.observed.tls.as_ref().ok()?;
        Some((f.node.as_str(), d.id, t.enabled))
    });
    let peers = f
        .peer_tls
        .iter()
        .filter_map(|p| Some((p.node.as_str(), p.device, p.enabled?)));
    let all: Vec<(&str, u32, bool)> = local.chain(peers).collect();
    let on = all.iter().find(|(_, _, e)| *e)?;
    let off = all.iter().find(|(_, _, e)| !*e)?;
    let count = |v: bool| all.iter().filter(|(_, _, e)| *e == v).count();
    Some(format!(
        "TLS is on for {} device {} but off for {} device {} ({} on, {} off); HCCL needs the same switch on every device (hccn_tool -tls -s)",
        on.0,
        on.1,
        off.0,
        off.1,
        count(true),
        count(false)
    ))
}

fn ping_failed(f: &NpuFacts) -> Option<String> {
    let bad: Vec<String> = f
        .pings
        .iter()
        .filter(|p| !matches!(p.result, Ok(r) if r.reached()))
        .map(|p| {
            let why = match &p.result {
                Ok(r) => format!("{} sent, 0 received", r.transmitted),
                Err(e) => e.clone(),
            };
            format!(
                "device {} -> {} device {} ({}): {why}",
                p.from, p.peer, p.peer_device, p.address
            )
        })
        .collect();
    (!bad.is_empty()).then(|| {
        format!(
            "{} of {} NPU pings from {} failed: {}",
            bad.len(),
            f.pings.len(),
            f.node,
            bad.join("; ")
        )
    })
}

/// The local checks in [`decide`]'s order (the pings' check comes after them).
fn local_checks(f: &NpuFacts) -> [(PodReason, Option<String>); 7] {
    [
        (PodReason::NpuIpMissing, ip_missing(f)),
        (PodReason::NpuIpMismatch, ip_mismatch(f)),
        (PodReason::NpuIpDuplicate, ip_duplicate(f)),
        (PodReason::NpuToolFailed, tool_failed(f)),
        (PodReason::NpuLinkDown, link_down(f)),
        (PodReason::NpuUnhealthy, unhealthy(f)),
        (PodReason::NpuTlsMismatch, tls_mismatch(f)),
    ]
}

/// The local checks only (addresses, tool answers, link, health, TLS), so the check can
/// skip the pings when these already fail.
pub fn decide_local(f: &NpuFacts) -> Verdict {
    Verdict::refused(local_checks(f)).unwrap_or_else(|| passed(f))
}

/// Decides. The reason is the first failing of NpuIpMissing, NpuIpMismatch,
/// NpuIpDuplicate, NpuToolFailed, NpuLinkDown, NpuUnhealthy, NpuTlsMismatch,
/// NpuPingFailed.
pub fn decide(f: &NpuFacts) -> Verdict {
    let checks = local_checks(f)
        .into_iter()
        .chain([(PodReason::NpuPingFailed, ping_failed(f))]);
    Verdict::refused(checks).unwrap_or_else(|| passed(f))
}

fn passed(f: &NpuFacts) -> Verdict {
    let ids: Vec<String> = f.local.iter().map(|d| d.id.to_string()).collect();
    let tls = f
        .local
        .first()
        .and_then(|d| d.observed.tls.as_ref().ok())
        .map_or("unknown", |t| if t.enabled { "on" } else { "off" });
    Verdict::verified(format!(
        "NPU devices {} have their addresses, links up, healthy, TLS {tls} like the group; {} NPU pings answered",
        ids.join(","),
        f.pings.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ascend::hccn::output::NetHealth;

    fn device(id: u32, ip: &str) -> LocalDevice {
        LocalDevice {
            id,
            table_ip: ip.into(),
            conf_ip: Some(ip.parse().unwrap()),
            observed: DeviceObservation::healthy(id, ip.parse().unwrap(), false),
        }
    }

    fn ping(from: u32, peer_device: u32, addr: &str, received: u32) -> Ping {
        Ping {
            from,
            peer: "node-b".into(),
            peer_device,
            address: addr.into(),
            result: Ok(PingResult {
                transmitted: 3,
                received,
            }),
        }
    }

    fn healthy() -> NpuFacts {
        NpuFacts {
            node: "node-a".into(),
            conf_error: None,
            local: vec![device(0, "192.168.100.1"), device(1, "192.168.100.2")],
            node_addresses: vec![
                (0, "192.168.100.1".parse().unwrap()),
                (1, "192.168.100.2".parse().unwrap()),
            ],
            peer_tls: vec![PeerTls {
                node: "node-b".into(),
                device: 0,
                enabled: Some(false),
            }],
            pings: vec![
                ping(0, 0, "192.168.101.1", 3),
                ping(1, 0, "192.168.101.1", 3),
            ],
        }
    }

    fn reason(f: &NpuFacts) -> (PodReason, String) {
        let v = decide(f);
        assert!(!v.ok, "{v:?}");
        (v.reason, v.message)
    }

    #[test]
    fn a_healthy_npu_network_passes() {
        let v = decide(&healthy());
        assert!(v.ok, "{v:?}");
        assert!(v.message.contains("TLS off"), "{}", v.message);
    }

    #[test]
    fn a_device_without_an_address_in_hccn_conf_is_npu_ip_missing() {
        let mut f = healthy();
        f.local[1].conf_ip = None;
        f.conf_error = Some("cannot read /etc/hccn.conf".into());
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuIpMissing);
        assert!(m.contains("device 1 has no address_1"), "{m}");
        assert!(m.contains("/etc/hccn.conf"), "{m}");
    }

    #[test]
    fn the_table_the_conf_and_the_tool_disagreeing_is_npu_ip_mismatch() {
        let mut f = healthy();
        f.local[0].table_ip = "192.168.100.9".into();
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuIpMismatch);
        assert!(m.contains("rank table device_ip 192.168.100.9"), "{m}");
        let mut f = healthy();
        f.local[1].observed = DeviceObservation::healthy(1, "10.9.9.9".parse().unwrap(), false);
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuIpMismatch);
        assert!(m.contains("hccn_tool -ip -g says 10.9.9.9"), "{m}");
    }

    #[test]
    fn two_devices_with_one_address_is_npu_ip_duplicate() {
        let mut f = healthy();
        f.node_addresses.push((5, "192.168.100.2".parse().unwrap()));
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuIpDuplicate);
        assert!(
            m.contains("devices 1 and 5 of node-a share 192.168.100.2"),
            "{m}"
        );
    }

    #[test]
    fn a_tool_error_is_npu_tool_failed_with_the_error() {
        let mut f = healthy();
        f.local[0].observed.link = Err("`hccn_tool -i 0 -link -g` did not finish".into());
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuToolFailed);
        assert!(m.contains("device 0: `hccn_tool -i 0 -link -g`"), "{m}");
    }

    #[test]
    fn a_down_link_is_npu_link_down() {
        let mut f = healthy();
        f.local[1].observed.link = Ok(NpuLink::Down);
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuLinkDown);
        assert!(m.contains("device 1 on node-a is DOWN"), "{m}");
    }

    #[test]
    fn a_health_other_than_success_is_npu_unhealthy() {
        let mut f = healthy();
        f.local[0].observed.health = Ok(NetHealth("Socket failed".into()));
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuUnhealthy);
        assert!(
            m.contains("device 0: net health status Socket failed"),
            "{m}"
        );
    }

    #[test]
    fn tls_differing_from_a_peer_is_npu_tls_mismatch_naming_both() {
        let mut f = healthy();
        f.peer_tls[0].enabled = Some(true);
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuTlsMismatch);
        assert!(
            m.contains("on for node-b device 0 but off for node-a device 0"),
            "{m}"
        );
        // A peer that has not published its switch is not a mismatch.
        f.peer_tls[0].enabled = None;
        assert!(decide(&f).ok);
    }

    #[test]
    fn an_unanswered_ping_or_one_that_could_not_run_is_npu_ping_failed() {
        let mut f = healthy();
        f.pings[1] = ping(1, 0, "192.168.101.1", 0);
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuPingFailed);
        assert!(
            m.contains("1 of 2 NPU pings from node-a failed: device 1 -> node-b device 0 (192.168.101.1): 3 sent, 0 received"),
            "{m}"
        );
        f.pings[1].result = Err("not run: the connect deadline passed".into());
        assert_eq!(reason(&f).0, PodReason::NpuPingFailed);
    }

    #[test]
    fn several_failures_are_all_in_the_message_with_the_address_first() {
        let mut f = healthy();
        f.local[0].conf_ip = None;
        f.local[1].observed.link = Ok(NpuLink::Down);
        let (r, m) = reason(&f);
        assert_eq!(r, PodReason::NpuIpMissing);
        assert!(m.contains("is DOWN"), "{m}");
    }
}
