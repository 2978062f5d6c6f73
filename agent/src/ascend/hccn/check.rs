//! The NPU network check before a member joins: which devices and peers the rank table
//! names ([`MemberNpus::from_table`], pure), then the facts through the
//! [`NpuNetwork`] port — the local devices and the peers' TLS switches together, then a
//! ping from each local NPU to every peer NPU — all within one budget (the group's connect
//! timeout), judged by [`super::decide`]. Pings are skipped when a local check already
//! failed. A group whose table has no `device_ip` for this member (CPU/TCP) is not checked.

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::decide::{LocalDevice, NpuFacts, Ping, decide, decide_local};
use super::port::{NpuNetwork, PeerTls};
use crate::member::ranktable::{RankTable, server_of};
use crate::nic::verify::Verdict;

/// The member's devices and its peers' devices, with their rank-table `device_ip`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberNpus {
    pub node: String,
    /// (device id, rank-table device_ip), in device order.
    pub own: Vec<(u32, String)>,
    /// (peer server id, its devices (id, device_ip)), other servers only.
    pub peers: Vec<(String, Vec<(u32, String)>)>,
}

impl MemberNpus {
    /// None when this member's devices carry no `device_ip` in the table (a CPU/TCP
    /// group), or the node is not in it (the NIC verification names that).
    pub fn from_table(
        table: &RankTable,
        node: &str,
        data_ip: Option<&str>,
        devices: &[i32],
    ) -> Option<MemberNpus> {
        let server = server_of(table, node, data_ip)?;
        let mut own: Vec<(u32, String)> = server
            .devices
            .iter()
            .filter(|d| i32::try_from(d.device_id).is_ok_and(|id| devices.contains(&id)))
            .filter_map(|d| Some((d.device_id, d.device_ip?.to_owned())))
            .collect();
        own.sort_unstable();
        own.dedup();
        if own.is_empty() {
            return None;
        }
        let peers = table
            .servers()
            .iter()
            .filter(|s| s.server_id != server.server_id)
            .map(|s| {
                let devs = s
                    .devices
                    .iter()
                    .filter_map(|d| Some((d.device_id, d.device_ip?.to_owned())))
                    .collect();
                (s.server_id.to_owned(), devs)
            })
            .collect();
        Some(MemberNpus {
            node: node.to_owned(),
            own,
            peers,
        })
    }
}

/// Gathers the facts within `budget` and decides.
pub async fn check(port: &dyn NpuNetwork, m: &MemberNpus, budget: Duration) -> Verdict {
    let deadline = Instant::now() + budget;
    let ids: Vec<u32> = m.own.iter().map(|(id, _)| *id).collect();
    let peer_names: Vec<String> = m.peers.iter().map(|(n, _)| n.clone()).collect();
    let (observed, published) = futures::join!(
        port.observe(&ids, deadline),
        port.peer_tls(&peer_names, deadline)
    );
    let (conf, conf_error) = match observed.conf {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e)),
    };
    let local = m
        .own
        .iter()
        .map(|(id, table_ip)| LocalDevice {
            id: *id,
            table_ip: table_ip.clone(),
            conf_ip: conf.as_ref().and_then(|c| c.address(*id)),
            observed: observed
                .devices
                .iter()
                .find(|o| o.id == *id)
                .cloned()
                .unwrap_or_else(|| unobserved(*id)),
        })
        .collect();
    // Only the devices the group uses on each peer count for TLS.
    let peer_tls: Vec<PeerTls> = published
        .into_iter()
        .filter(|p| {
            m.peers
                .iter()
                .any(|(n, devs)| *n == p.node && devs.iter().any(|(d, _)| *d == p.device))
        })
        .collect();
    let mut facts = NpuFacts {
        node: m.node.clone(),
        conf_error,
        local,
        node_addresses: conf
            .iter()
            .flat_map(|c| c.devices.iter())
            .filter_map(|(id, d)| Some((*id, d.address?)))
            .collect(),
        peer_tls,
        pings: Vec::new(),
    };
    let local_verdict = decide_local(&facts);
    if !local_verdict.ok {
        return local_verdict;
    }
    for (from, _) in &m.own {
        for (peer, devs) in &m.peers {
            for (peer_device, address) in devs {
                let result = if Instant::now() >= deadline {
                    Err(format!("not run: the connect deadline ({budget:?}) passed"))
                } else {
                    match address.parse::<IpAddr>() {
                        Ok(ip) => port.ping(*from, ip, deadline).await,
                        Err(_) => Err(format!("device_ip {address:?} is not an address")),
                    }
                };
                facts.pings.push(Ping {
                    from: *from,
                    peer: peer.clone(),
                    peer_device: *peer_device,
                    address: address.clone(),
                    result,
                });
            }
        }
    }
    decide(&facts)
}

fn unobserved(id: u32) -> super::observe::DeviceObservation {
    let e = "the port returned no observation for this device";
    super::observe::DeviceObservation {
        id,
        ip: Err(e.into()),
        link: Err(e.into()),
        health: Err(e.into()),
        tls: Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(with_ips: bool) -> RankTable {
        let ip = |s: &str| {
            if with_ips {
                format!(r#","device_ip":"{s}""#)
            } else {
                String::new()
            }
        };
        RankTable::parse(&format!(
            r#"{{"version":"1.0","status":"completed","server_count":"2","server_list":[
            {{"server_id":"node-a","host_ip":"127.0.0.1","device":[{{"device_id":"0"{},"rank_id":"0"}},{{"device_id":"1"{},"rank_id":"1"}}]}},
            {{"server_id":"node-b","host_ip":"127.0.0.2","device":[{{"device_id":"0"{},"rank_id":"2"}},{{"device_id":"1"{},"rank_id":"3"}}]}}]}}"#,
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            ip("10.0.1.1"),
            ip("10.0.1.2")
        ))
        .unwrap()
    }

    #[test]
    fn the_member_and_its_peers_devices_come_from_the_table() {
        let m = MemberNpus::from_table(&table(true), "node-a", None, &[1]).unwrap();
        assert_eq!(m.own, [(1, "10.0.0.2".to_owned())]);
        assert_eq!(
            m.peers,
            [(
                "node-b".to_owned(),
                vec![(0, "10.0.1.1".to_owned()), (1, "10.0.1.2".to_owned())]
            )]
        );
    }

    #[test]
    fn a_table_without_device_ips_is_not_checked() {
        assert_eq!(
            MemberNpus::from_table(&table(false), "node-a", None, &[0, 1]),
            None
        );
        assert_eq!(
            MemberNpus::from_table(&table(true), "node-z", None, &[0]),
            None
        );
    }
}
