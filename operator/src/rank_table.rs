//! The HCCL rank table (pure): the planned member set of one epoch in the rank-table v1.0
//! JSON format Ascend tools read through `RANK_TABLE_FILE`.
//!
//! One server entry per node, in order of its lowest rank; devices in rank order. All
//! numbers are strings, as Ascend tools write them. `server_id` and `host_ip` are the node's
//! data address (from its `HcommNode`), else the node name; `device_ip` is the device's own
//! address, else the node's data address.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::planner::{NodeInventory, PlannedMember};

/// File name of the rank table inside the ConfigMap and the mounted volume.
pub const RANK_TABLE_KEY: &str = "rank_table.json";
/// ConfigMap key holding the epoch of the rank table.
pub const EPOCH_KEY: &str = "epoch";
/// ConfigMap key holding the member (Pod) names of the epoch, one per line (the
/// operator's durable record of the planned set).
pub const MEMBERS_KEY: &str = "members";
/// Where the rank table is mounted in every worker container.
pub const MOUNT_DIR: &str = "/etc/hcomm/rank-table";
/// `RANK_TABLE_FILE` in the workers.
pub const RANK_TABLE_FILE: &str = "/etc/hcomm/rank-table/rank_table.json";

/// The ConfigMap holding a group's rank table.
pub fn config_map_name(group: &str) -> String {
    format!("{group}-rank-table")
}

/// HCCL rank table v1.0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankTable {
    /// Always `"1.0"`.
    pub version: String,
    /// Number of servers, as a string.
    pub server_count: String,
    /// One entry per node.
    pub server_list: Vec<Server>,
    /// Always `"completed"`.
    pub status: String,
}

/// One node of the rank table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    /// The node's data address, else its name.
    pub server_id: String,
    /// The node's data address, else its name.
    pub host_ip: String,
    /// The node's devices in the domain, by rank.
    pub device: Vec<RankDevice>,
}

/// One rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankDevice {
    /// Physical device id.
    pub device_id: String,
    /// The device's address.
    pub device_ip: String,
    /// The rank.
    pub rank_id: String,
}

/// Builds the rank table of `members` (the planned set).
pub fn build(
    members: &[PlannedMember],
    devices_per_member: i32,
    nodes: &[NodeInventory],
) -> RankTable {
    let mut per_node: BTreeMap<i32, (String, Vec<RankDevice>)> = BTreeMap::new();
    let mut first_rank_of_node: BTreeMap<&str, i32> = BTreeMap::new();
    let mut sorted: Vec<&PlannedMember> = members.iter().collect();
    sorted.sort_by_key(|m| m.index);
    for member in sorted {
        let inventory = nodes.iter().find(|n| n.name == member.node);
        let address = inventory
            .and_then(|n| n.data_address.clone())
            .unwrap_or_else(|| member.node.clone());
        let first = member.index * devices_per_member;
        let key = *first_rank_of_node
            .entry(member.node.as_str())
            .or_insert(first);
        let entry = per_node
            .entry(key)
            .or_insert_with(|| (address.clone(), Vec::new()));
        for (local, device) in member.devices.iter().enumerate() {
            let device_ip = inventory
                .and_then(|n| n.devices.iter().find(|d| d.id == *device))
                .and_then(|d| d.ip.clone())
                .unwrap_or_else(|| address.clone());
            entry.1.push(RankDevice {
                device_id: device.to_string(),
                device_ip,
                rank_id: (first + local as i32).to_string(),
            });
        }
    }
    let server_list: Vec<Server> = per_node
        .into_values()
        .map(|(address, device)| Server {
            server_id: address.clone(),
            host_ip: address,
            device,
        })
        .collect();
    RankTable {
        version: "1.0".into(),
        server_count: server_list.len().to_string(),
        server_list,
        status: "completed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Device;

    fn member(index: i32, node: &str, devices: &[i32]) -> PlannedMember {
        PlannedMember {
            name: format!("g-{index}-e1"),
            index,
            node: node.into(),
            devices: devices.to_vec(),
            joiner: false,
        }
    }

    #[test]
    fn the_rank_table_has_the_hccl_v1_shape_with_string_numbers() {
        let nodes = vec![NodeInventory {
            name: "n1".into(),
            topology: Default::default(),
            data_address: Some("10.1.0.1".into()),
            devices: vec![
                Device {
                    id: 4,
                    ip: Some("192.168.1.4".into()),
                    healthy: true,
                },
                Device {
                    id: 5,
                    ip: None,
                    healthy: true,
                },
            ],
        }];
        let table = build(
            &[member(1, "n2", &[0, 1]), member(0, "n1", &[4, 5])],
            2,
            &nodes,
        );
        let json = serde_json::to_value(&table).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "version": "1.0",
                "server_count": "2",
                "server_list": [
                    {"server_id": "10.1.0.1", "host_ip": "10.1.0.1", "device": [
                        {"device_id": "4", "device_ip": "192.168.1.4", "rank_id": "0"},
                        {"device_id": "5", "device_ip": "10.1.0.1", "rank_id": "1"}]},
                    {"server_id": "n2", "host_ip": "n2", "device": [
                        {"device_id": "0", "device_ip": "n2", "rank_id": "2"},
                        {"device_id": "1", "device_ip": "n2", "rank_id": "3"}]}
                ],
                "status": "completed"
            })
        );
    }

    #[test]
    fn members_on_one_node_share_one_server_entry() {
        let table = build(&[member(0, "n", &[0]), member(1, "n", &[1])], 1, &[]);
        assert_eq!(table.server_count, "1");
        assert_eq!(table.server_list[0].device.len(), 2);
    }
}
