//! The HCCL rank table of one epoch (pure), built from what the device plugin really
//! allocated, in the v1.0 format of `hcomm_crds::rank_table`, which Ascend tools read
//! through `RANK_TABLE_FILE` and the agents read for their peers.
//!
//! A table is published only when every member in it has its allocation annotation
//! (`hcomm_crds::contract::ascend::DeviceAllocation`): `device_id` and `device_ip` come from
//! it, never from the operator's guess. One server entry per node, in order of its lowest
//! rank (the planner places members in topology order, so servers follow it); devices in
//! rank order, member `i`'s local rank `j` being rank `i × devicesPerMember + j` on the
//! `j`-th allocated device. `server_id` and `host_ip` are the node's data address (from
//! its `HcommNode`), else the host IP the device plugin recorded, else the node name.
//! `device_ip` is the device's own address when the plugin knew it for every device of the
//! table, else omitted for all (HCCL's all-or-none rule: a host address is no substitute).
//!
//! On Atlas A3 (super pods) the device plugin also records each Pod's `super_pod_id` and
//! each NPU's `super_device_id`; when every member's allocation has them the table is
//! HCCL's v1.2 instead ([`with_super_pods`]): `super_device_id` on every device and a
//! `super_pod_list` naming each super pod's servers.
//!
//! Two checks, both before anything is written ([`layout_checked`] before joiner Pods are
//! created, [`checked`] before the ConfigMap is): an invalid table is never published and
//! the group's conditions say why.
//! Size: half of it is the tests (HCCL's rules swept over 1–64 members × 1–16 devices,
//! one test per held-back case), kept beside the pure builder they pin down.

use std::collections::BTreeMap;

use hcomm_crds::Backend;
use hcomm_crds::contract::GroupReason;
use hcomm_crds::rank_table::{
    CONFIG_MAP_MAX_BYTES, RankTable, Status, ValidateError, ValidateOptions, v1, v12, validate,
};

pub use hcomm_crds::rank_table::{
    KEY_EPOCH as EPOCH_KEY, KEY_MEMBERS as MEMBERS_KEY, KEY_RANK_TABLE as RANK_TABLE_KEY,
    MOUNT_DIR, RANK_TABLE_FILE, config_map_name,
};

use crate::planner::{NodeInventory, PlannedMember};

/// Why an epoch's table is not published (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Held {
    /// Members in the table have no allocation annotation yet.
    #[error("waiting for the device plugin's allocation of {}", .0.join(", "))]
    WaitingForAllocation(Vec<String>),
    /// A member's allocation does not have `devicesPerMember` devices.
    #[error("{member} was allocated {got} device(s), the group needs {want}")]
    AllocationSize {
        /// The member.
        member: String,
        /// Devices allocated.
        got: usize,
        /// `devicesPerMember`.
        want: usize,
    },
    /// An allocated `device_id` is not a physical device number.
    #[error("{member}: {source}")]
    Allocation {
        /// The member.
        member: String,
        /// What is wrong.
        #[source]
        source: hcomm_crds::contract::ascend::AllocationError,
    },
    /// The table breaks a rule HCCL applies on load.
    #[error("the rank table breaks HCCL's rules: {0}")]
    Invalid(#[from] ValidateError),
    /// The table does not fit the rank-table ConfigMap, even as compact JSON.
    #[error(
        "the rank table of {ranks} ranks takes {bytes} bytes as compact JSON; with the member \
         list it exceeds the {limit}-byte limit of a ConfigMap (fewer members or fewer devices \
         per member fit)"
    )]
    TooLarge {
        /// Ranks in the table.
        ranks: usize,
        /// The compact table's size.
        bytes: usize,
        /// [`CONFIG_MAP_MAX_BYTES`].
        limit: usize,
    },
}

impl Held {
    /// The group reason for the conditions.
    pub fn reason(&self) -> GroupReason {
        match self {
            Self::WaitingForAllocation(_) => GroupReason::WaitingForAllocation,
            Self::AllocationSize { .. } | Self::Allocation { .. } => GroupReason::AllocationMissing,
            Self::Invalid(_) => GroupReason::InvalidRankTable,
            Self::TooLarge { .. } => GroupReason::RankTableTooLarge,
        }
    }
}

/// One device of the table: (device id, device ip, rank).
type Slot = (u32, Option<String>, u32);

/// Builds the table of `members` from their allocations.
pub fn build(
    members: &[PlannedMember],
    devices_per_member: i32,
    nodes: &[NodeInventory],
) -> Result<v1::RankTable, Held> {
    let waiting: Vec<String> = members
        .iter()
        .filter(|m| m.allocation.is_none())
        .map(|m| m.name.clone())
        .collect();
    if !waiting.is_empty() {
        return Err(Held::WaitingForAllocation(waiting));
    }
    let want = devices_per_member.max(0) as usize;
    let mut slots: Vec<(&PlannedMember, String, Vec<Slot>)> = Vec::new();
    for member in members {
        let Some(allocation) = &member.allocation else {
            continue;
        };
        if allocation.devices.len() != want {
            return Err(Held::AllocationSize {
                member: member.name.clone(),
                got: allocation.devices.len(),
                want,
            });
        }
        let first = member.index * devices_per_member;
        let mut devices = Vec::with_capacity(want);
        for (local, device) in allocation.devices.iter().enumerate() {
            let id = device.physical_id().map_err(|source| Held::Allocation {
                member: member.name.clone(),
                source,
            })?;
            let rank = non_negative(first + local as i32);
            devices.push((id, device.ip().map(|ip| ip.to_string()), rank));
        }
        let address = nodes
            .iter()
            .find(|n| n.name == member.node)
            .and_then(|n| n.data_address.clone())
            .or_else(|| Some(allocation.host_ip.clone()).filter(|h| !h.is_empty()))
            .unwrap_or_else(|| member.node.clone());
        slots.push((member, address, devices));
    }
    Ok(assemble(slots))
}

/// The table's shape before any allocation: the planned ranks per node, each rank standing
/// in for its device. It shows what the allocation cannot change — which ranks share a
/// server and in what order — so a plan HCCL would refuse creates no Pod.
pub fn layout(members: &[PlannedMember], devices_per_member: i32) -> v1::RankTable {
    let slots = members
        .iter()
        .map(|m| {
            let first = m.index * devices_per_member;
            let devices = (0..devices_per_member)
                .map(|j| (non_negative(first + j), None, non_negative(first + j)))
                .collect();
            (m, m.node.clone(), devices)
        })
        .collect();
    assemble(slots)
}

/// One server per node, keyed by the node's first rank; devices in rank order.
fn assemble(mut slots: Vec<(&PlannedMember, String, Vec<Slot>)>) -> v1::RankTable {
    slots.sort_by_key(|(m, _, _)| m.index);
    let mut per_node: BTreeMap<u32, (String, Vec<Slot>)> = BTreeMap::new();
    let mut first_rank_of_node: BTreeMap<&str, u32> = BTreeMap::new();
    for (member, address, devices) in slots {
        let Some(first) = devices.first().map(|d| d.2) else {
            continue;
        };
        let key = *first_rank_of_node
            .entry(member.node.as_str())
            .or_insert(first);
        per_node
            .entry(key)
            .or_insert_with(|| (address, Vec::new()))
            .1
            .extend(devices);
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
/// device-address requirement (the TCP engine connects host to host) and the rank-block
/// and dense-rank requirements (a replacement member goes where there is room, so a node
/// may hold non-adjacent ranks); see [`ValidateOptions`]. An empty plan (a group scaled to
/// zero or being deleted) publishes the empty table as the epoch's record: no worker loads
/// it, so HCCL's "at least one rank" rule does not apply.
pub fn checked(
    members: &[PlannedMember],
    devices_per_member: i32,
    nodes: &[NodeInventory],
    backend: Backend,
) -> Result<RankTable, Held> {
    let v1 = build(members, devices_per_member, nodes)?;
    let table = match with_super_pods(&v1, members) {
        Some(v12) => RankTable::V12(v12),
        None => RankTable::V1(v1),
    };
    if !members.is_empty() {
        validate(&table, ValidateOptions::for_backend(backend))?;
    }
    Ok(table)
}

/// The v1.2 (A3 super pod) form of `table`, when every member's allocation names its super
/// pod and every device's super-device id (the device plugin writes `-2` when it does not
/// know one: then the table stays v1.0). A server's super pod is that of its members.
pub fn with_super_pods(table: &v1::RankTable, members: &[PlannedMember]) -> Option<v12::RankTable> {
    // rank → (super pod, super device)
    let mut by_rank: BTreeMap<u32, (i64, u32)> = BTreeMap::new();
    for member in members {
        let allocation = member.allocation.as_ref()?;
        let super_pod = allocation.super_pod_id?;
        for (local, device) in allocation.devices.iter().enumerate() {
            let rank = non_negative(member.index * allocation.devices.len() as i32 + local as i32);
            by_rank.insert(rank, (super_pod, device.super_device()?));
        }
    }
    let mut super_pods: Vec<v12::SuperPod> = Vec::new();
    let mut server_list = Vec::with_capacity(table.server_list.len());
    for server in &table.server_list {
        let mut device = Vec::with_capacity(server.device.len());
        let mut pod = None;
        for d in &server.device {
            let (super_pod, super_device_id) = *by_rank.get(&d.rank_id)?;
            pod.get_or_insert(super_pod);
            device.push(v12::Device {
                device_id: d.device_id,
                device_ip: d.device_ip.clone(),
                super_device_id,
                backup_device_ip: None,
                backup_device_port: None,
                rank_id: d.rank_id,
            });
        }
        let id = pod?.to_string();
        let entry = v12::SuperPodServer {
            server_id: server.server_id.clone(),
        };
        match super_pods.iter_mut().find(|p| p.super_pod_id == id) {
            Some(p) => p.server_list.push(entry),
            None => super_pods.push(v12::SuperPod {
                super_pod_id: id,
                server_list: vec![entry],
            }),
        }
        server_list.push(v12::Server {
            server_id: server.server_id.clone(),
            host_ip: server.host_ip.clone(),
            device,
        });
    }
    Some(v12::RankTable {
        version: v12::VERSION.to_owned(),
        status: Status::Completed,
        server_count: Some(table.server_count),
        server_list,
        super_pod_list: super_pods,
    })
}

/// Room left in the ConfigMap for its metadata (names, labels, owner reference) and the
/// epoch key, beside the table and the member list.
const CONFIG_MAP_SLACK: usize = 4 * 1024;

/// The text of `table` as published beside `members` (the ConfigMap's member list): the
/// pretty form HCCL's own tools write when it fits the ConfigMap, else the compact form
/// (about half the bytes; same document), else [`Held::TooLarge`] — a table over the
/// limit is never written, the group's conditions say so. At 8 devices a member the
/// compact form fits 1,000 members; at 16 it does not (about 1.07 MB of table).
pub fn publishable_json(table: &RankTable, members: &[PlannedMember]) -> Result<String, Held> {
    let member_list: usize = members.iter().map(|m| m.name.len() + 1).sum();
    let budget = CONFIG_MAP_MAX_BYTES.saturating_sub(member_list + CONFIG_MAP_SLACK);
    let pretty = table.to_json();
    if pretty.len() <= budget {
        return Ok(pretty);
    }
    let compact = table.to_compact_json();
    if compact.len() <= budget {
        return Ok(compact);
    }
    Err(Held::TooLarge {
        ranks: table.world(),
        bytes: compact.len(),
        limit: CONFIG_MAP_MAX_BYTES,
    })
}

/// [`layout`] validated with `backend`'s rank rules (device addresses are not known yet,
/// so that rule waits for [`checked`]).
pub fn layout_checked(
    members: &[PlannedMember],
    devices_per_member: i32,
    backend: Backend,
) -> Result<(), Held> {
    if members.is_empty() {
        return Ok(());
    }
    let options = ValidateOptions {
        require_device_ips: false,
        ..ValidateOptions::for_backend(backend)
    };
    validate(&RankTable::V1(layout(members, devices_per_member)), options)?;
    Ok(())
}

/// Ranks are non-negative by construction (the planner's indices); a negative one would be
/// a planner bug, refused by validation as a repeated rank.
fn non_negative(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use hcomm_crds::contract::ascend::{AllocatedDevice, DeviceAllocation};

    use super::*;

    /// Member `index` on `node` allocated `devices` = (physical id, device ip).
    fn member(index: i32, node: &str, devices: &[(u32, &str)]) -> PlannedMember {
        PlannedMember {
            name: format!("g-{index}-e1"),
            index,
            node: node.into(),
            devices: devices.iter().map(|(d, _)| *d as i32).collect(),
            allocation: Some(DeviceAllocation {
                pod_name: format!("g-{index}-e1"),
                server_id: "uid".into(),
                // One address per node, as the plugin reports each node's own.
                host_ip: format!("10.9.0.{}", node.bytes().map(u32::from).sum::<u32>() % 250),
                super_pod_id: None,
                devices: devices
                    .iter()
                    .map(|(id, ip)| AllocatedDevice {
                        device_id: id.to_string(),
                        device_ip: (*ip).to_owned(),
                        super_device_id: None,
                    })
                    .collect(),
            }),
            joiner: false,
            standby: false,
        }
    }

    fn node(name: &str, address: &str) -> NodeInventory {
        NodeInventory {
            name: name.into(),
            topology: Default::default(),
            data_address: Some(address.into()),
            devices: Vec::new(),
            npus: 8,
        }
    }

    fn ip(node: u32, device: u32) -> String {
        format!("192.168.{node}.{device}")
    }

    #[test]
    fn the_rank_table_has_the_hccl_v1_shape_from_the_allocation() {
        let nodes = vec![node("n1", "10.1.0.1"), node("n2", "10.1.0.2")];
        let table = build(
            &[
                member(1, "n2", &[(6, "192.168.2.6"), (2, "192.168.2.2")]),
                member(0, "n1", &[(4, "192.168.1.4"), (5, "192.168.1.5")]),
            ],
            2,
            &nodes,
        )
        .unwrap();
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
                        {"device_id": "6", "device_ip": "192.168.2.6", "rank_id": "2"},
                        {"device_id": "2", "device_ip": "192.168.2.2", "rank_id": "3"}]}
                ],
                "status": "completed"
            })
        );
        assert_eq!(
            validate(&RankTable::V1(table), ValidateOptions::HCCL),
            Ok(())
        );
    }

    #[test]
    fn no_table_is_published_until_every_member_is_allocated() {
        let mut joiner = member(1, "n1", &[]);
        joiner.allocation = None;
        joiner.joiner = true;
        let members = [member(0, "n1", &[(0, "192.168.0.0")]), joiner];
        let held = checked(&members, 1, &[], Backend::Hccl).unwrap_err();
        assert_eq!(held, Held::WaitingForAllocation(vec!["g-1-e1".into()]));
        assert_eq!(held.reason(), GroupReason::WaitingForAllocation);
    }

    #[test]
    fn an_allocation_of_the_wrong_size_or_a_bad_device_id_is_refused_by_name() {
        let members = [member(0, "n1", &[(0, "192.168.0.0")])];
        assert!(matches!(
            checked(&members, 2, &[], Backend::Tcp),
            Err(Held::AllocationSize {
                got: 1,
                want: 2,
                ..
            })
        ));
        let mut bad = member(0, "n1", &[(0, "192.168.0.0")]);
        if let Some(a) = bad.allocation.as_mut() {
            a.devices[0].device_id = "x".into();
        }
        let held = checked(&[bad], 1, &[], Backend::Tcp).unwrap_err();
        assert_eq!(held.reason(), GroupReason::AllocationMissing);
    }

    #[test]
    fn device_ips_are_omitted_for_all_devices_when_the_plugin_missed_any() {
        let members = [
            member(0, "n1", &[(4, "192.168.1.4"), (5, "-1")]),
            member(1, "n2", &[(0, "192.168.2.0"), (1, "192.168.2.1")]),
        ];
        let table = build(&members, 2, &[]).unwrap();
        assert!(
            table
                .server_list
                .iter()
                .flat_map(|s| &s.device)
                .all(|d| d.device_ip.is_none())
        );
        assert_eq!(
            table.server_list[0].server_id, "10.9.0.159",
            "the plugin's host IP"
        );
        assert!(checked(&members, 2, &[], Backend::Tcp).is_ok());
        assert_eq!(
            checked(&members, 2, &[], Backend::Hccl),
            Err(Held::Invalid(ValidateError::DeviceIpsRequired {
                servers: 2
            }))
        );
    }

    #[test]
    fn two_devices_with_one_ip_are_never_published() {
        let members = [
            member(0, "n1", &[(0, "192.168.0.9")]),
            member(1, "n2", &[(0, "192.168.0.9")]),
        ];
        let held = checked(&members, 1, &[], Backend::Hccl).unwrap_err();
        assert!(matches!(held, Held::Invalid(_)), "{held}");
        assert_eq!(held.reason(), GroupReason::InvalidRankTable);
    }

    #[test]
    fn a_layout_with_interleaved_servers_is_refused_for_hccl_before_any_pod_exists() {
        // n1 would hold ranks 0 and 2, n2 rank 1.
        let mut members = vec![
            member(0, "n1", &[(0, "")]),
            member(1, "n2", &[(0, "")]),
            member(2, "n1", &[(1, "")]),
        ];
        for m in &mut members {
            m.allocation = None;
        }
        assert!(layout_checked(&members, 1, Backend::Tcp).is_ok());
        assert!(matches!(
            layout_checked(&members, 1, Backend::Hccl),
            Err(Held::Invalid(ValidateError::RanksNotContiguous { .. }))
        ));
        members.swap(1, 2);
        members[1].index = 1;
        members[2].index = 2;
        assert_eq!(layout_checked(&members, 1, Backend::Hccl), Ok(()));
    }

    #[test]
    fn ranks_left_after_a_scale_in_are_published_for_tcp_only() {
        let members = [
            member(0, "n1", &[(0, "192.168.1.0")]),
            member(2, "n2", &[(0, "192.168.2.0")]),
        ];
        assert!(checked(&members, 1, &[], Backend::Tcp).is_ok());
        assert!(matches!(
            checked(&members, 1, &[], Backend::Hccl),
            Err(Held::Invalid(ValidateError::RankOutOfRange {
                rank: 2,
                world: 2
            }))
        ));
    }

    #[test]
    fn an_empty_plan_publishes_the_empty_table() {
        let table = checked(&[], 2, &[], Backend::Hccl).unwrap();
        assert_eq!(table.world(), 0);
        assert!(table.to_json().contains(r#""server_count": "0""#));
    }

    /// Every table the operator publishes for a topology-ordered plan passes HCCL's rules:
    /// 1–64 members of 1–16 devices, members packed onto 8- or 16-NPU nodes in index order,
    /// each allocated distinct devices with distinct addresses.
    #[test]
    fn every_published_table_passes_hccls_rules_over_1_to_64_members_of_1_to_16_devices() {
        for dpm in [1, 2, 4, 8, 16] {
            let per_node = if dpm == 16 { 16 } else { 8 };
            for count in 1..=64 {
                let members: Vec<PlannedMember> = (0..count)
                    .map(|i| {
                        let first = i * dpm;
                        let node = (first / per_node) as u32;
                        let local = (first % per_node) as u32;
                        let devices: Vec<(u32, String)> = (0..dpm as u32)
                            .map(|j| (local + j, ip(node, local + j)))
                            .collect();
                        let refs: Vec<(u32, &str)> =
                            devices.iter().map(|(d, a)| (*d, a.as_str())).collect();
                        member(i, &format!("node-{node}"), &refs)
                    })
                    .collect();
                let nodes: Vec<NodeInventory> = (0..=(count * dpm / per_node))
                    .map(|n| {
                        node(
                            &format!("node-{n}"),
                            &format!("10.0.{}.{}", n / 250, n % 250 + 1),
                        )
                    })
                    .collect();
                layout_checked(&members, dpm, Backend::Hccl)
                    .unwrap_or_else(|e| panic!("layout {count}×{dpm}: {e}"));
                let table = checked(&members, dpm, &nodes, Backend::Hccl)
                    .unwrap_or_else(|e| panic!("{count}×{dpm}: {e}"));
                assert_eq!(table.world(), (count * dpm) as usize);
            }
        }
    }

    #[test]
    fn a3_allocations_with_super_pods_give_a_v1_2_table_and_without_them_v1_0() {
        let nodes = [node("n1", "10.1.0.1"), node("n2", "10.1.0.2")];
        let mut members = vec![
            member(0, "n1", &[(0, "192.168.1.0"), (1, "192.168.1.1")]),
            member(1, "n2", &[(0, "192.168.2.0"), (1, "192.168.2.1")]),
        ];
        assert!(matches!(
            checked(&members, 2, &nodes, Backend::Hccl).unwrap(),
            RankTable::V1(_)
        ));
        for (i, m) in members.iter_mut().enumerate() {
            let a = m.allocation.as_mut().unwrap();
            a.super_pod_id = Some(0);
            for (j, d) in a.devices.iter_mut().enumerate() {
                d.super_device_id = Some((100 + 10 * i + j).to_string());
            }
        }
        let table = checked(&members, 2, &nodes, Backend::Hccl).unwrap();
        let json: serde_json::Value = serde_json::from_str(&table.to_json()).unwrap();
        assert_eq!(json["version"], "1.2");
        assert_eq!(
            json["server_list"][1]["device"][1]["super_device_id"],
            "111"
        );
        assert_eq!(
            json["super_pod_list"],
            serde_json::json!([{"super_pod_id": "0", "server_list": [
                {"server_id": "10.1.0.1"}, {"server_id": "10.1.0.2"}]}])
        );
        // One unknown super-device id (`-2`) and the table stays v1.0.
        members[1].allocation.as_mut().unwrap().devices[0].super_device_id = Some("-2".into());
        assert!(matches!(
            checked(&members, 2, &nodes, Backend::Hccl).unwrap(),
            RankTable::V1(_)
        ));
    }

    /// `count` members of `dpm` devices, one node each (A2 nodes at 8, A3 at 16), named
    /// as the operator names them, with device IPs.
    fn big_group(count: i32, dpm: u32) -> (Vec<PlannedMember>, Vec<NodeInventory>) {
        let members = (0..count)
            .map(|i| {
                let devices: Vec<(u32, String)> = (0..dpm)
                    .map(|d| (d, format!("10.{}.{}.{}", 200 + i / 256, i % 256, d + 1)))
                    .collect();
                let devices: Vec<(u32, &str)> =
                    devices.iter().map(|(d, ip)| (*d, ip.as_str())).collect();
                let mut m = member(i, &format!("npu-node-{i:04}"), &devices);
                m.name = format!("decode-{i}-e12");
                m
            })
            .collect();
        let nodes = (0..count)
            .map(|i| {
                node(
                    &format!("npu-node-{i:04}"),
                    &format!("10.100.{}.{}", i / 256, i % 256),
                )
            })
            .collect();
        (members, nodes)
    }

    #[test]
    fn a_thousand_members_of_8_devices_fit_and_of_16_are_refused_by_size() {
        let (members, nodes) = big_group(1000, 8);
        let table = checked(&members, 8, &nodes, Backend::Hccl).unwrap();
        let text = publishable_json(&table, &members).unwrap();
        let member_list: usize = members.iter().map(|m| m.name.len() + 1).sum();
        assert!(
            text.len() + member_list + CONFIG_MAP_SLACK <= CONFIG_MAP_MAX_BYTES,
            "{} bytes",
            text.len()
        );
        assert_eq!(RankTable::parse(&text).unwrap().world(), 8000);

        let (members, nodes) = big_group(1000, 16);
        let table = checked(&members, 16, &nodes, Backend::Hccl).unwrap();
        let held = publishable_json(&table, &members).unwrap_err();
        assert!(
            matches!(held, Held::TooLarge { ranks: 16000, bytes, limit: CONFIG_MAP_MAX_BYTES } if bytes > 1_000_000),
            "{held:?}"
        );
        assert_eq!(held.reason(), GroupReason::RankTableTooLarge);
        assert!(
            held.to_string()
                .contains("1048576-byte limit of a ConfigMap"),
            "{held}"
        );
    }

    #[test]
    fn a_table_whose_pretty_form_is_too_large_is_published_compact() {
        let (members, nodes) = big_group(700, 16);
        let table = checked(&members, 16, &nodes, Backend::Hccl).unwrap();
        assert!(table.to_json().len() > CONFIG_MAP_MAX_BYTES);
        let text = publishable_json(&table, &members).unwrap();
        assert!(text == table.to_compact_json(), "the compact form");
        assert_eq!(RankTable::parse(&text).unwrap(), table);
    }

    #[test]
    fn small_tables_keep_the_pretty_form() {
        let (members, nodes) = big_group(64, 16);
        let table = checked(&members, 16, &nodes, Backend::Hccl).unwrap();
        assert_eq!(publishable_json(&table, &members).unwrap(), table.to_json());
    }

    #[test]
    fn members_on_one_node_share_one_server_entry() {
        let members = [
            member(0, "n", &[(0, "192.168.0.0")]),
            member(1, "n", &[(1, "192.168.0.1")]),
        ];
        let table = build(&members, 1, &[]).unwrap();
        assert_eq!(table.server_count, 1);
        assert_eq!(table.server_list[0].device.len(), 2);
    }
}
