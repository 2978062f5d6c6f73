//! The HCCL rank table of one epoch (pure): the planned member set in the v1.0 format of
//! `hcomm_crds::rank_table`, which Ascend tools read through `RANK_TABLE_FILE`.
//!
//! One server entry per node, in order of its lowest rank; devices in rank order.
//! `server_id` and `host_ip` are the node's data address (from its `HcommNode`), else the
//! node name. `device_ip` is the device's own address when the inventory knows it for
//! every device of the table, else omitted for all (HCCL's all-or-none rule: a host
//! address is no substitute for a device address). The table is validated before it is
//! published ([`checked`]); an invalid table is never written.

use std::collections::BTreeMap;

use hcomm_crds::Backend;
use hcomm_crds::rank_table::{RankTable, ValidateError, ValidateOptions, v1, validate};

pub use hcomm_crds::rank_table::{
    KEY_EPOCH as EPOCH_KEY, KEY_MEMBERS as MEMBERS_KEY, KEY_RANK_TABLE as RANK_TABLE_KEY,
    MOUNT_DIR, RANK_TABLE_FILE, config_map_name,
};

use crate::planner::{NodeInventory, PlannedMember};

/// Builds the rank table of `members` (the planned set).
pub fn build(
    members: &[PlannedMember],
    devices_per_member: i32,
    nodes: &[NodeInventory],
) -> v1::RankTable {
    // (server address, [(device id, device ip, rank)]) keyed by the node's first rank.
    type Entry = (String, Vec<(u32, Option<String>, u32)>);
    let mut per_node: BTreeMap<i32, Entry> = BTreeMap::new();
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
                .and_then(|d| d.ip.clone());
            let rank = first + local as i32;
            entry
                .1
                .push((non_negative(*device), device_ip, non_negative(rank)));
        }
    }
    let all_known = per_node
        .values()
        .all(|(_, devices)| devices.iter().all(|(_, ip, _)| ip.is_some()));
    let server_list = per_node
        .into_values()
        .map(|(address, devices)| v1::Server {
            server_id: address.clone(),
            host_ip: Some(address),
            device: devices
                .into_iter()
                .map(|(device_id, device_ip, rank_id)| v1::Device {
                    device_id,
                    device_ip: device_ip.filter(|_| all_known),
                    rank_id,
                })
                .collect(),
        })
        .collect();
    v1::RankTable::completed(server_list)
}

/// The table of [`build`], validated with the rules `backend` can meet.
///
/// `backend: hccl` gets every rule HCCL applies on load; `backend: tcp` is spared the
/// device-address requirement (the TCP engine connects host to host and the operator does
/// not know device addresses yet on nodes that do not report them) and the rank-block
/// requirement (a replacement member goes where there is room, so a node may hold
/// non-adjacent ranks); see [`ValidateOptions`]. An empty
/// plan (a group scaled to zero or being deleted) publishes the empty table as the
/// epoch's record: no worker loads it, so HCCL's "at least one rank" rule does not apply.
pub fn checked(
    members: &[PlannedMember],
    devices_per_member: i32,
    nodes: &[NodeInventory],
    backend: Backend,
) -> Result<RankTable, ValidateError> {
    let table = RankTable::V1(build(members, devices_per_member, nodes));
    if !members.is_empty() {
        validate(&table, ValidateOptions::for_backend(backend))?;
    }
    Ok(table)
}

/// Device ids and ranks are non-negative by construction (the planner's inventory and
/// indices); a negative one would be a planner bug, refused by validation as rank 0 twice.
fn non_negative(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
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

    fn node(name: &str, address: &str, devices: &[(i32, Option<&str>)]) -> NodeInventory {
        NodeInventory {
            name: name.into(),
            topology: Default::default(),
            data_address: Some(address.into()),
            devices: devices
                .iter()
                .map(|(id, ip)| Device {
                    id: *id,
                    ip: ip.map(Into::into),
                    healthy: true,
                })
                .collect(),
        }
    }

    #[test]
    fn the_rank_table_has_the_hccl_v1_shape_with_string_numbers() {
        let nodes = vec![
            node(
                "n1",
                "10.1.0.1",
                &[(4, Some("192.168.1.4")), (5, Some("192.168.1.5"))],
            ),
            node(
                "n2",
                "10.1.0.2",
                &[(0, Some("192.168.2.0")), (1, Some("192.168.2.1"))],
            ),
        ];
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
                        {"device_id": "5", "device_ip": "192.168.1.5", "rank_id": "1"}]},
                    {"server_id": "10.1.0.2", "host_ip": "10.1.0.2", "device": [
                        {"device_id": "0", "device_ip": "192.168.2.0", "rank_id": "2"},
                        {"device_id": "1", "device_ip": "192.168.2.1", "rank_id": "3"}]}
                ],
                "status": "completed"
            })
        );
        let table = RankTable::V1(table);
        assert_eq!(validate(&table, ValidateOptions::HCCL), Ok(()));
    }

    #[test]
    fn device_ips_are_omitted_for_all_devices_when_any_is_unknown() {
        let nodes = vec![node(
            "n1",
            "10.1.0.1",
            &[(4, Some("192.168.1.4")), (5, None)],
        )];
        let table = build(
            &[member(1, "n2", &[0, 1]), member(0, "n1", &[4, 5])],
            2,
            &nodes,
        );
        let json = serde_json::to_value(&table).unwrap();
        assert_eq!(
            json["server_list"],
            serde_json::json!([
                {"server_id": "10.1.0.1", "host_ip": "10.1.0.1", "device": [
                    {"device_id": "4", "rank_id": "0"},
                    {"device_id": "5", "rank_id": "1"}]},
                {"server_id": "n2", "host_ip": "n2", "device": [
                    {"device_id": "0", "rank_id": "2"},
                    {"device_id": "1", "rank_id": "3"}]}
            ])
        );
    }

    #[test]
    fn a_multi_node_table_without_device_ips_is_published_for_tcp_and_refused_for_hccl() {
        let members = [member(0, "n1", &[0]), member(1, "n2", &[0])];
        let table = checked(&members, 1, &[], Backend::Tcp).unwrap();
        assert_eq!(table.world(), 2);
        assert_eq!(
            checked(&members, 1, &[], Backend::Hccl),
            Err(ValidateError::DeviceIpsRequired { servers: 2 })
        );
    }

    #[test]
    fn a_plan_that_puts_one_device_on_two_ranks_is_never_published() {
        let members = [member(0, "n", &[0]), member(1, "n", &[0])];
        assert_eq!(
            checked(&members, 1, &[], Backend::Tcp),
            Err(ValidateError::DuplicateDeviceId {
                server_id: "n".into(),
                device_id: 0
            })
        );
    }

    #[test]
    fn a_replacement_on_a_node_with_other_ranks_is_published_for_tcp() {
        // n1 holds ranks 0 and 2, n2 rank 1: what elastic placement leaves after a
        // replacement went where there was room.
        let members = [
            member(0, "n1", &[0]),
            member(1, "n2", &[0]),
            member(2, "n1", &[1]),
        ];
        let table = checked(&members, 1, &[], Backend::Tcp).unwrap();
        assert_eq!(table.world(), 3);
        assert!(matches!(
            checked(&members, 1, &[], Backend::Hccl),
            Err(ValidateError::RanksNotContiguous { .. })
        ));
    }

    #[test]
    fn ranks_left_after_a_scale_in_are_published_for_tcp() {
        // Member 1 left; member 2 keeps its ranks (stable ranks, make-before-break).
        let members = [member(0, "n1", &[0]), member(2, "n2", &[0])];
        assert!(checked(&members, 1, &[], Backend::Tcp).is_ok());
        assert!(matches!(
            checked(&members, 1, &[], Backend::Hccl),
            Err(ValidateError::RankOutOfRange { rank: 2, world: 2 })
        ));
    }

    #[test]
    fn an_empty_plan_publishes_the_empty_table() {
        let table = checked(&[], 2, &[], Backend::Hccl).unwrap();
        assert_eq!(table.world(), 0);
        assert!(table.to_json().contains(r#""server_count": "0""#));
    }

    #[test]
    fn members_on_one_node_share_one_server_entry() {
        let table = build(&[member(0, "n", &[0]), member(1, "n", &[1])], 1, &[]);
        assert_eq!(table.server_count, 1);
        assert_eq!(table.server_list[0].device.len(), 2);
    }
}
