//! The node's inventory: devices (with the NPUs' own network, [`npu_net`]), NICs,
//! topology, software versions, `/dev/shm`.
//!
//! [`collect`] gathers facts (I/O, never fails: unknowns stay unknown); [`to_status`] turns
//! them into the `HcommNode` status (pure); [`publish`] writes it with server-side apply.

pub mod devices;
pub mod nics;
pub mod npu_net;
pub mod publish;
pub mod shm;
pub mod versions;

use std::collections::BTreeMap;
use std::path::PathBuf;

use hcomm_crds::{
    DeviceInventory, HcommNodeStatus, LinkTestResult, NicInventory, NicRole, SoftwareVersions,
    TopologyLabels,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::nic::{Chosen, NicRule, select_data_nic};
use nics::Nic;

/// Node labels the agent reads topology from when no flag sets it.
pub mod labels {
    pub use hcomm_crds::contract::{
        LABEL_RACK as RACK, LABEL_SUPER_POD as SUPER_POD, LABEL_SWITCH as SWITCH,
    };
}

/// Where and how to look.
#[derive(Debug, Clone)]
pub struct InventorySources {
    pub cpu_devices: Option<u32>,
    pub dev_dir: PathBuf,
    pub sysfs_net: PathBuf,
    pub ascend_root: PathBuf,
    /// `/etc/ascend_install.info`: where the driver was installed (`Driver_Install_Path_Param`).
    pub install_info: PathBuf,
    /// The `hccn_tool` binary (`--hccn-tool`).
    pub hccn_tool: PathBuf,
    /// The NPUs' network configuration (`--hccn-conf`).
    pub hccn_conf: PathBuf,
    pub shm_path: PathBuf,
}

impl InventorySources {
    /// The `hccn_tool` runner for these sources.
    pub fn hccn(&self) -> crate::ascend::hccn::runner::HccnTool {
        crate::ascend::hccn::runner::HccnTool::new(&self.hccn_tool, HCCN_CALL_TIMEOUT)
    }
}

/// The longest one `hccn_tool` call may take (a 3-packet ping answers within a few
/// seconds; the other queries at once).
pub const HCCN_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for InventorySources {
    fn default() -> Self {
        InventorySources {
            cpu_devices: None,
            dev_dir: "/dev".into(),
            sysfs_net: "/sys/class/net".into(),
            ascend_root: "/usr/local/Ascend".into(),
            install_info: "/etc/ascend_install.info".into(),
            hccn_tool: crate::ascend::hccn::runner::DEFAULT_TOOL.into(),
            hccn_conf: "/etc/hccn.conf".into(),
            shm_path: "/dev/shm".into(),
        }
    }
}

/// Everything observed about the node.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub devices: Vec<DeviceInventory>,
    pub nics: Vec<Nic>,
    pub versions: SoftwareVersions,
    pub shm_bytes: Option<u64>,
    pub topology: TopologyLabels,
}

impl Inventory {
    /// The node's data NIC by the default rule (no group's `socketIfname`).
    pub fn data_nic(&self, rule: &NicRule) -> Option<Chosen> {
        select_data_nic(&self.nics, rule).ok()
    }
}

/// Observes the node.
pub async fn collect(src: &InventorySources, topology: TopologyLabels) -> Inventory {
    let mut devices = devices::collect(src.cpu_devices, &src.dev_dir).await;
    npu_net::fill(&mut devices, &src.hccn(), &src.hccn_conf).await;
    Inventory {
        devices,
        nics: nics::collect(&src.sysfs_net).await,
        versions: versions::collect(&src.ascend_root, &src.install_info),
        shm_bytes: shm::size_of(&src.shm_path).await,
        topology,
    }
}

/// Topology: explicit flags win, then the Node's labels.
pub fn topology_from(
    flags: &TopologyLabels,
    node_labels: &BTreeMap<String, String>,
) -> TopologyLabels {
    let pick =
        |flag: &Option<String>, key: &str| flag.clone().or_else(|| node_labels.get(key).cloned());
    TopologyLabels {
        super_pod: pick(&flags.super_pod, labels::SUPER_POD),
        rack: pick(&flags.rack, labels::RACK),
        switch: pick(&flags.switch, labels::SWITCH),
    }
}

/// The `HcommNode` status for this inventory (pure).
pub fn to_status(
    inv: &Inventory,
    rule: &NicRule,
    link_tests: Vec<LinkTestResult>,
    now: Time,
) -> HcommNodeStatus {
    let chosen = inv.data_nic(rule);
    let nics = inv
        .nics
        .iter()
        .map(|n| NicInventory {
            name: n.name.clone(),
            addresses: n
                .addrs
                .iter()
                .map(|a| format!("{}/{}", a.ip, a.prefix))
                .collect(),
            speed_mbps: n.speed_mbps,
            numa_node: n.numa_node,
            up: n.up,
            role: if chosen.as_ref().is_some_and(|c| c.name == n.name) {
                NicRole::Data
            } else if rule.management.as_deref() == Some(n.name.as_str()) {
                NicRole::Management
            } else {
                NicRole::Other
            },
        })
        .collect();
    HcommNodeStatus {
        devices: inv.devices.clone(),
        nics,
        data_address: chosen.map(|c| c.ip.to_string()),
        topology: inv.topology.clone(),
        software: inv.versions.clone(),
        shm_bytes: inv.shm_bytes.and_then(|b| i64::try_from(b).ok()),
        link_tests,
        last_updated: Some(now),
        conditions: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_marks_the_data_and_management_nics_and_sets_the_data_address() {
        let inv = Inventory {
            nics: vec![
                Nic::fixture("data0", "198.18.0.10"),
                Nic::fixture("mgmt0", "198.19.0.10"),
            ],
            devices: devices::cpu_devices(2),
            shm_bytes: Some(1 << 20),
            ..Default::default()
        };
        let rule = NicRule {
            management: Some("mgmt0".into()),
            ..Default::default()
        };
        let s = to_status(
            &inv,
            &rule,
            vec![],
            Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(s.data_address.as_deref(), Some("198.18.0.10"));
        assert_eq!(s.nics[0].role, NicRole::Data);
        assert_eq!(s.nics[1].role, NicRole::Management);
        assert_eq!(s.nics[0].addresses, ["198.18.0.10/24"]);
        assert_eq!(s.devices.len(), 2);
        assert_eq!(s.shm_bytes, Some(1 << 20));
    }

    #[test]
    fn topology_flags_win_over_node_labels() {
        let labels: BTreeMap<String, String> = [
            (labels::RACK.to_owned(), "r1".to_owned()),
            (labels::SWITCH.to_owned(), "sw1".to_owned()),
        ]
        .into();
        let flags = TopologyLabels {
            rack: Some("r9".into()),
            ..Default::default()
        };
        let t = topology_from(&flags, &labels);
        assert_eq!(t.rack.as_deref(), Some("r9"));
        assert_eq!(t.switch.as_deref(), Some("sw1"));
        assert_eq!(t.super_pod, None);
    }
}
