//! The HCCL rank table (v1.0 JSON, the `rank_table.json` key of the group's ConfigMap) and
//! what a member derives from it (pure): its ranks and devices, its peers' data addresses,
//! and the agent-side control domain (one rank per member) it joins.
//!
//! Control domain: members hold `devicesPerMember` consecutive ranks, so member control
//! rank = first rank / devicesPerMember and world = ranks / devicesPerMember. Each member's
//! endpoint listens on `comm_port_base + <its first device id>` on its node's data address
//! (device ids are unique per node, so members on one node never collide), which makes the
//! rendezvous root computable by everyone from the table alone: the holder of rank 0.

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;
use serde_json::Value;

/// ConfigMap key of the rank table.
pub const KEY_RANK_TABLE: &str = "rank_table.json";
/// ConfigMap key of the epoch.
pub const KEY_EPOCH: &str = "epoch";

/// One device entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankDevice {
    pub device_id: i32,
    pub device_ip: Option<String>,
    pub rank_id: u32,
}

/// One server (node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankServer {
    pub server_id: String,
    pub host_ip: String,
    pub devices: Vec<RankDevice>,
}

/// A parsed rank table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankTable {
    pub servers: Vec<RankServer>,
}

#[derive(Deserialize)]
struct RawTable {
    #[serde(default)]
    server_list: Vec<RawServer>,
}
#[derive(Deserialize)]
struct RawServer {
    server_id: Value,
    #[serde(default)]
    host_ip: Option<Value>,
    #[serde(default)]
    device: Vec<RawDevice>,
}
#[derive(Deserialize)]
struct RawDevice {
    device_id: Value,
    #[serde(default)]
    device_ip: Option<Value>,
    rank_id: Value,
}

fn as_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn as_int<T: std::str::FromStr>(v: &Value, what: &str) -> Result<T, String> {
    as_string(v)
        .trim()
        .parse()
        .map_err(|_| format!("{what} {v} is not a number"))
}

impl RankTable {
    /// Parses the JSON (numbers may be strings, as HCCL writes them).
    pub fn parse(json: &str) -> Result<RankTable, String> {
        let raw: RawTable =
            serde_json::from_str(json).map_err(|e| format!("not a rank table: {e}"))?;
        let mut servers = Vec::new();
        for s in raw.server_list {
            let mut devices = Vec::new();
            for d in s.device {
                devices.push(RankDevice {
                    device_id: as_int(&d.device_id, "device_id")?,
                    device_ip: d.device_ip.as_ref().map(as_string),
                    rank_id: as_int(&d.rank_id, "rank_id")?,
                });
            }
            let server_id = as_string(&s.server_id);
            servers.push(RankServer {
                host_ip: s
                    .host_ip
                    .as_ref()
                    .map(as_string)
                    .unwrap_or_else(|| server_id.clone()),
                server_id,
                devices,
            });
        }
        let t = RankTable { servers };
        let mut ranks: Vec<u32> = t.all().map(|(_, d)| d.rank_id).collect();
        ranks.sort_unstable();
        if ranks.iter().enumerate().any(|(i, r)| *r as usize != i) {
            return Err(format!(
                "rank ids are not 0..{} without gaps or repeats",
                ranks.len()
            ));
        }
        Ok(t)
    }

    fn all(&self) -> impl Iterator<Item = (&RankServer, &RankDevice)> {
        self.servers
            .iter()
            .flat_map(|s| s.devices.iter().map(move |d| (s, d)))
    }

    /// Total ranks.
    pub fn world(&self) -> usize {
        self.all().count()
    }

    /// The server of this node: by name, else by data address.
    pub fn server_of(&self, node: &str, data_ip: Option<&str>) -> Option<&RankServer> {
        self.servers
            .iter()
            .find(|s| s.server_id == node)
            .or_else(|| {
                self.servers
                    .iter()
                    .find(|s| Some(s.host_ip.as_str()) == data_ip)
            })
    }

    /// The (rank, device) pairs of a member: the entries of its server whose device is one of
    /// `devices`, in rank order.
    pub fn member_ranks(&self, server: &RankServer, devices: &[i32]) -> Vec<(u32, i32)> {
        let mut v: Vec<(u32, i32)> = server
            .devices
            .iter()
            .filter(|d| devices.contains(&d.device_id))
            .map(|d| (d.rank_id, d.device_id))
            .collect();
        v.sort_unstable();
        v
    }

    /// The holder of `rank`.
    pub fn rank(&self, rank: u32) -> Option<(&RankServer, &RankDevice)> {
        self.all().find(|(_, d)| d.rank_id == rank)
    }
}

/// A member's place in the agent's control domain at one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlan {
    pub rank: usize,
    pub world: usize,
    /// The rendezvous root: rank 0's endpoint.
    pub root: SocketAddr,
    /// The port this member's endpoint listens on.
    pub own_port: u16,
    /// The devices of this member's ranks, in rank order (for the mapping check).
    pub devices_in_rank_order: Vec<i32>,
    /// Peer nodes (server id, host ip), without this member's own node.
    pub peers: Vec<(String, String)>,
}

/// Derives the control plan of the member holding `devices` on `node`.
pub fn plan(
    table: &RankTable,
    node: &str,
    data_ip: Option<&str>,
    devices: &[i32],
    comm_port_base: u16,
) -> Result<ControlPlan, String> {
    let dpm = devices.len().max(1);
    let server = table
        .server_of(node, data_ip)
        .ok_or_else(|| format!("node {node} is not in the rank table"))?;
    let mine = table.member_ranks(server, devices);
    let first = mine
        .first()
        .ok_or_else(|| format!("no rank of node {node} uses devices {devices:?}"))?;
    let (root_server, root_dev) = table.rank(0).ok_or("the rank table has no rank 0")?;
    let root_ip: IpAddr = root_server.host_ip.parse().map_err(|_| {
        format!(
            "rank 0's host_ip {:?} is not an IP address",
            root_server.host_ip
        )
    })?;
    let port = |dev: i32| -> Result<u16, String> {
        u16::try_from(i64::from(comm_port_base) + i64::from(dev))
            .map_err(|_| "port out of range".to_owned())
    };
    let min_dev = *devices.iter().min().unwrap_or(&0);
    let mut peers: Vec<(String, String)> = table
        .servers
        .iter()
        .filter(|s| s.server_id != server.server_id)
        .map(|s| (s.server_id.clone(), s.host_ip.clone()))
        .collect();
    peers.dedup();
    Ok(ControlPlan {
        rank: first.0 as usize / dpm,
        world: table.world() / dpm,
        root: SocketAddr::new(root_ip, port(root_dev.device_id)?),
        own_port: port(min_dev)?,
        devices_in_rank_order: mine.iter().map(|(_, d)| *d).collect(),
        peers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"{"version":"1.0","server_count":"2","status":"completed","server_list":[
      {"server_id":"host-0","host_ip":"198.18.0.10","device":[
        {"device_id":"0","device_ip":"10.0.0.1","rank_id":"0"},
        {"device_id":"1","device_ip":"10.0.0.2","rank_id":"1"},
        {"device_id":"2","rank_id":"2"},{"device_id":"3","rank_id":"3"}]},
      {"server_id":"host-1","host_ip":"198.18.0.11","device":[
        {"device_id":5,"rank_id":5},{"device_id":4,"rank_id":4}]}]}"#;

    #[test]
    fn string_and_number_fields_both_parse() {
        let t = RankTable::parse(TABLE).unwrap();
        assert_eq!(t.world(), 6);
        assert_eq!(t.servers[1].devices[0].device_id, 5);
        assert_eq!(
            t.servers[0].devices[0].device_ip.as_deref(),
            Some("10.0.0.1")
        );
    }

    #[test]
    fn gaps_or_repeated_ranks_are_refused() {
        let bad = r#"{"server_list":[{"server_id":"a","host_ip":"1.1.1.1","device":[
            {"device_id":"0","rank_id":"0"},{"device_id":"1","rank_id":"2"}]}]}"#;
        assert!(RankTable::parse(bad).unwrap_err().contains("gaps"));
        assert!(RankTable::parse("{").is_err());
    }

    #[test]
    fn a_second_member_on_a_node_gets_its_own_control_rank_and_port() {
        let t = RankTable::parse(TABLE).unwrap();
        let p = plan(&t, "host-0", None, &[2, 3], 29600).unwrap();
        assert_eq!((p.rank, p.world), (1, 3));
        assert_eq!(p.own_port, 29602);
        assert_eq!(p.root, "198.18.0.10:29600".parse().unwrap());
        assert_eq!(p.devices_in_rank_order, [2, 3]);
        assert_eq!(p.peers, [("host-1".to_owned(), "198.18.0.11".to_owned())]);
    }

    #[test]
    fn the_server_is_found_by_data_address_when_names_differ() {
        let t = RankTable::parse(TABLE).unwrap();
        let p = plan(&t, "other-name", Some("198.18.0.11"), &[4, 5], 29600).unwrap();
        assert_eq!(p.rank, 2);
        assert_eq!(p.devices_in_rank_order, [4, 5]);
    }

    #[test]
    fn a_member_missing_from_the_table_is_an_error_naming_it() {
        let t = RankTable::parse(TABLE).unwrap();
        assert!(
            plan(&t, "host-9", None, &[0], 1)
                .unwrap_err()
                .contains("host-9")
        );
        assert!(
            plan(&t, "host-1", None, &[7], 1)
                .unwrap_err()
                .contains("[7]")
        );
    }
}
