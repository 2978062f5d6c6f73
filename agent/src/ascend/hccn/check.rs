//! The NPU network check before a member joins: which devices and peers the rank table
//! names ([`MemberNpus::from_table`], pure), then the facts through the
//! [`NpuNetwork`] port — the local devices and the peers' TLS switches together, then the
//! pings [`ping_targets`] chooses — all within one budget (the group's connect timeout),
//! judged by [`super::decide`]. Pings are skipped when a local check already failed. A
//! group whose table has no `device_ip` for this member (CPU/TCP) is not checked.
//!
//! Which pings: not every local NPU to every peer NPU (that is members × devices² per
//! verification, and each unanswered ping costs seconds), but each local NPU to the NPU
//! at the same position on the two ring-neighbour servers (the previous and the next
//! server in table order). On Atlas A2/A3, HCCL keeps a collective's traffic inside a
//! server on HCCS and sends it between servers plane by plane: the device at local
//! position p exchanges with the devices at position p of the other servers (the ring
//! and halving-doubling schedules both start with the neighbours). So these pings use
//! exactly the RoCE paths the member's first collective steps take, prove every local
//! NPU port sends and is answered, and stay at most two per local NPU whatever the
//! group's size. A broken far peer is that peer's own check's to find (its neighbours
//! ping it when they join).

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
    /// The pings to run ([`ping_targets`]).
    pub pings: Vec<PingTarget>,
}

/// One ping the check runs: from local NPU `from` to `peer`'s NPU `peer_device`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingTarget {
    pub from: u32,
    pub peer: String,
    pub peer_device: u32,
    pub address: String,
}

/// A server of the table as the pair selection sees it: its id and its devices (id,
/// device_ip) in table (local rank) order.
pub type ServerNpus = (String, Vec<(u32, String)>);

/// The pings of the member whose server is `servers[own]` and whose devices are
/// `devices` (ids on that server): each of its devices, at local position p on its
/// server, to the device at position p (modulo the peer's device count) of the previous
/// and the next server in table order (one when there are two servers, none alone). See
/// the module header for why. At most 2 × `devices.len()` pings.
pub fn ping_targets(servers: &[ServerNpus], own: usize, devices: &[u32]) -> Vec<PingTarget> {
    let n = servers.len();
    let Some((_, own_devices)) = servers.get(own) else {
        return Vec::new();
    };
    let mut neighbours = vec![(own + n - 1) % n, (own + 1) % n];
    neighbours.retain(|&i| i != own);
    neighbours.dedup();
    let mut pings = Vec::new();
    for (position, (from, _)) in own_devices.iter().enumerate() {
        if !devices.contains(from) {
            continue;
        }
        for &i in &neighbours {
            let (peer, peer_devices) = &servers[i];
            if peer_devices.is_empty() {
                continue;
            }
            let (peer_device, address) = &peer_devices[position % peer_devices.len()];
            pings.push(PingTarget {
                from: *from,
                peer: peer.clone(),
                peer_device: *peer_device,
                address: address.clone(),
            });
        }
    }
    pings
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
        let servers: Vec<ServerNpus> = table
            .servers()
            .iter()
            .map(|s| {
                let devs = s
                    .devices
                    .iter()
                    .filter_map(|d| Some((d.device_id, d.device_ip?.to_owned())))
                    .collect();
                (s.server_id.to_owned(), devs)
            })
            .collect();
        let index = servers.iter().position(|(id, _)| id == server.server_id)?;
        let ids: Vec<u32> = own.iter().map(|(id, _)| *id).collect();
        let pings = ping_targets(&servers, index, &ids);
        let peers = servers
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .map(|(_, s)| s)
            .collect();
        Some(MemberNpus {
            node: node.to_owned(),
            own,
            peers,
            pings,
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
    for t in &m.pings {
        let result = if Instant::now() >= deadline {
            Err(format!("not run: the connect deadline ({budget:?}) passed"))
        } else {
            match t.address.parse::<IpAddr>() {
                Ok(ip) => port.ping(t.from, ip, deadline).await,
                Err(_) => Err(format!("device_ip {:?} is not an address", t.address)),
            }
        };
        facts.pings.push(Ping {
            from: t.from,
            peer: t.peer.clone(),
            peer_device: t.peer_device,
            address: t.address.clone(),
            result,
        });
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

    fn servers(n: usize, devices: u32) -> Vec<ServerNpus> {
        (0..n)
            .map(|s| {
                let devs = (0..devices)
                    .map(|d| (d, format!("192.168.{s}.{}", 10 + d)))
                    .collect();
                (format!("node-{s}"), devs)
            })
            .collect()
    }

    fn pairs(pings: &[PingTarget]) -> Vec<(u32, &str, u32)> {
        pings
            .iter()
            .map(|p| (p.from, p.peer.as_str(), p.peer_device))
            .collect()
    }

    #[test]
    fn each_local_npu_pings_the_same_position_on_both_ring_neighbours_only() {
        let s = servers(5, 2);
        let pings = ping_targets(&s, 2, &[0, 1]);
        assert_eq!(
            pairs(&pings),
            [
                (0, "node-1", 0),
                (0, "node-3", 0),
                (1, "node-1", 1),
                (1, "node-3", 1)
            ]
        );
        assert_eq!(pings[0].address, "192.168.1.10");
        // The ring wraps: the first server's previous is the last.
        assert_eq!(
            pairs(&ping_targets(&s, 0, &[1])),
            [(1, "node-4", 1), (1, "node-1", 1)]
        );
    }

    #[test]
    fn two_servers_ping_once_per_npu_and_a_lone_server_not_at_all() {
        assert_eq!(
            pairs(&ping_targets(&servers(2, 2), 1, &[0, 1])),
            [(0, "node-0", 0), (1, "node-0", 1)]
        );
        assert!(ping_targets(&servers(1, 8), 0, &[0, 1]).is_empty());
    }

    #[test]
    fn only_the_members_own_npus_ping_and_positions_wrap_on_smaller_peers() {
        let mut s = servers(3, 4);
        s[0].1.truncate(1);
        // Devices 2 and 3 of node-1 are this member's (0 and 1 are another member's).
        assert_eq!(
            pairs(&ping_targets(&s, 1, &[2, 3])),
            [
                (2, "node-0", 0),
                (2, "node-2", 2),
                (3, "node-0", 0),
                (3, "node-2", 3)
            ]
        );
    }

    #[test]
    fn the_pings_stay_bounded_by_the_members_npus_at_any_group_size() {
        for n in [2, 3, 16, 64, 512] {
            let pings = ping_targets(&servers(n, 8), n / 2, &[0, 1, 2, 3, 4, 5, 6, 7]);
            assert!(pings.len() <= 16, "{n} servers: {} pings", pings.len());
        }
    }

    #[test]
    fn the_table_gives_the_member_its_neighbours_pings() {
        let m = MemberNpus::from_table(&table(true), "node-a", None, &[1]).unwrap();
        assert_eq!(
            pairs(&m.pings),
            [(1, "node-b", 1)],
            "device 1 is at position 1 on node-a; node-b's position 1 is its device 1"
        );
        assert_eq!(m.pings[0].address, "10.0.1.2");
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
