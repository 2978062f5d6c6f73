//! What hcomm reads from the Ascend software stack on a node: the device plugin's resource
//! and Pod annotations, the node labels it sets, and the kubelet's PodResources socket.
//!
//! These names are not ours: they are written by Huawei's Ascend device plugin (MindCluster
//! `ascend-device-plugin`) and the kubelet. They live here so the operator, the agent and
//! the testbed's device-plugin stand-in spell them once. Source: the device plugin's
//! `pkg/device/ascendcommon.go` (`AddPodAnnotation`) in Ascend/mind-cluster.
//!
//! hcomm never allocates NPUs itself: member Pods request [`RESOURCE_ASCEND910`] (or the
//! group's configured resource), the scheduler places them, the device plugin picks the
//! devices at admission and records its choice in [`ANNOTATION_ASCEND_910_CONFIGURATION`];
//! the agent cross-checks that choice against the kubelet's PodResources answer.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The extended resource of 910 / 910B / 910C (A3) NPUs.
pub const RESOURCE_ASCEND910: &str = "huawei.com/Ascend910";
/// The extended resource of Atlas 350/850/950 NPUs.
pub const RESOURCE_NPU: &str = "huawei.com/npu";

/// Pod annotation the device plugin writes at allocation (910 family): a JSON
/// [`DeviceAllocation`].
pub const ANNOTATION_ASCEND_910_CONFIGURATION: &str =
    "ascend.kubectl.kubernetes.io/ascend-910-configuration";
/// The same annotation for the `huawei.com/npu` resource (A5).
pub const ANNOTATION_ASCEND_NPU_CONFIGURATION: &str =
    "ascend.kubectl.kubernetes.io/ascend-npu-configuration";
/// Pod annotation the device plugin writes: the kubelet device ids it really allocated,
/// comma separated (`Ascend910-0,Ascend910-1`).
pub const ANNOTATION_ASCEND_REAL: &str = "huawei.com/AscendReal";

/// The kubelet's PodResources v1 socket (mount its directory: the kubelet recreates the
/// socket when it restarts).
pub const POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Env the device plugin's Allocate sets for the Ascend Docker runtime: physical device
/// ids (`0-3,5` syntax). hcomm reads it, never writes it.
pub const ENV_ASCEND_VISIBLE_DEVICES: &str = "ASCEND_VISIBLE_DEVICES";

/// Node label the device plugin sets on NPU nodes.
pub const LABEL_ACCELERATOR: &str = "accelerator";
/// [`LABEL_ACCELERATOR`] on 910 / 910B / 910C nodes.
pub const ACCELERATOR_ASCEND910: &str = "huawei-Ascend910";
/// Node label: the chip name (`910B3`, `910C`, …).
pub const LABEL_CHIP_NAME: &str = "node.kubernetes.io/npu.chip.name";
/// Node label: the A3 super pod the node belongs to.
pub const LABEL_TOPOTREE_SUPER_POD: &str = "huawei.com/topotree.superpodid";

/// Which annotation carries the allocation for a resource name.
pub fn configuration_annotation(resource: &str) -> &'static str {
    if resource == RESOURCE_NPU {
        ANNOTATION_ASCEND_NPU_CONFIGURATION
    } else {
        ANNOTATION_ASCEND_910_CONFIGURATION
    }
}

/// The kubelet device id the device plugin registers for a physical NPU: `Ascend910-3`
/// for resource `huawei.com/Ascend910`, physical id 3.
pub fn kubelet_device_id(resource: &str, physical_id: u32) -> String {
    let kind = resource.rsplit('/').next().unwrap_or(resource);
    format!("{kind}-{physical_id}")
}

/// The physical id in a kubelet device id (`Ascend910-3` → 3); `None` for other shapes
/// (virtual NPUs such as `Ascend910-4c-100-0` are not whole devices).
pub fn physical_id_of(kubelet_device_id: &str) -> Option<u32> {
    let (kind, id) = kubelet_device_id.rsplit_once('-')?;
    if kind.is_empty() || kind.contains('-') {
        return None;
    }
    id.parse().ok()
}

/// The device plugin's allocation annotation, as it writes it. Numbers that HCCL wants as
/// strings are strings here too; fields the plugin adds later are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAllocation {
    /// The Pod's name.
    #[serde(default)]
    pub pod_name: String,
    /// The plugin writes the Pod's UID here (the rank table's `server_id` in its jobs).
    #[serde(default)]
    pub server_id: String,
    /// The node's IP.
    #[serde(default)]
    pub host_ip: String,
    /// The A3 super pod, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_pod_id: Option<i64>,
    /// The devices, sorted by physical id.
    pub devices: Vec<AllocatedDevice>,
}

/// One allocated NPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatedDevice {
    /// Physical device id, as a string.
    pub device_id: String,
    /// The NPU's own RoCE address, `-1` when the plugin could not look it up.
    #[serde(default)]
    pub device_ip: String,
    /// The A3 super-device id, `-2` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_device_id: Option<String>,
}

/// Why an allocation annotation cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// Not the plugin's JSON.
    #[error("the device plugin's allocation annotation is not valid JSON: {0}")]
    Json(String),
    /// A `device_id` that is not a number.
    #[error("allocated device_id {0:?} is not a physical device number")]
    DeviceId(String),
    /// The same device listed twice.
    #[error("device {0} is listed twice in the allocation")]
    DuplicateDevice(u32),
}

impl DeviceAllocation {
    /// Parses the annotation's value.
    pub fn parse(text: &str) -> Result<Self, AllocationError> {
        let a: Self =
            serde_json::from_str(text).map_err(|e| AllocationError::Json(e.to_string()))?;
        let mut seen = std::collections::BTreeSet::new();
        for d in &a.devices {
            let id = d.physical_id()?;
            if !seen.insert(id) {
                return Err(AllocationError::DuplicateDevice(id));
            }
        }
        Ok(a)
    }

    /// The physical ids, in the annotation's order.
    pub fn physical_ids(&self) -> Result<Vec<u32>, AllocationError> {
        self.devices
            .iter()
            .map(AllocatedDevice::physical_id)
            .collect()
    }
}

impl AllocatedDevice {
    /// The physical id as a number.
    pub fn physical_id(&self) -> Result<u32, AllocationError> {
        self.device_id
            .parse()
            .map_err(|_| AllocationError::DeviceId(self.device_id.clone()))
    }

    /// The device IP, `None` when the plugin could not look it up (`-1`) or left it empty.
    pub fn ip(&self) -> Option<IpAddr> {
        self.device_ip.parse().ok()
    }

    /// The super-device id, `None` when absent or unknown (`-2`).
    pub fn super_device(&self) -> Option<u32> {
        self.super_device_id.as_deref()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugins_annotation_parses_as_it_writes_it() {
        let text = r#"{"pod_name":"p","server_id":"0b1c","host_ip":"10.0.0.2","super_pod_id":0,
            "devices":[{"device_id":"0","device_ip":"192.168.1.8","super_device_id":"37748736"},
                       {"device_id":"1","device_ip":"-1","super_device_id":"-2"}],
            "rack_id":0,"server_index":"0","server_ip":"10.0.0.2"}"#;
        let a = DeviceAllocation::parse(text).unwrap();
        assert_eq!(a.physical_ids().unwrap(), vec![0, 1]);
        assert_eq!(a.devices[0].ip(), Some("192.168.1.8".parse().unwrap()));
        assert_eq!(a.devices[1].ip(), None, "-1 means the lookup failed");
        assert_eq!(a.devices[0].super_device(), Some(37748736));
        assert_eq!(a.devices[1].super_device(), None, "-2 means unknown");
    }

    #[test]
    fn a_broken_annotation_is_a_named_error() {
        assert!(matches!(
            DeviceAllocation::parse("{"),
            Err(AllocationError::Json(_))
        ));
        assert_eq!(
            DeviceAllocation::parse(r#"{"devices":[{"device_id":"x"}]}"#),
            Err(AllocationError::DeviceId("x".into()))
        );
        assert_eq!(
            DeviceAllocation::parse(r#"{"devices":[{"device_id":"2"},{"device_id":"2"}]}"#),
            Err(AllocationError::DuplicateDevice(2))
        );
    }

    #[test]
    fn kubelet_device_ids_round_trip() {
        assert_eq!(kubelet_device_id(RESOURCE_ASCEND910, 3), "Ascend910-3");
        assert_eq!(physical_id_of("Ascend910-3"), Some(3));
        assert_eq!(physical_id_of("npu-12"), Some(12));
        assert_eq!(physical_id_of("Ascend910-4c-100-0"), None);
        assert_eq!(physical_id_of("3"), None);
        assert_eq!(
            configuration_annotation(RESOURCE_NPU),
            ANNOTATION_ASCEND_NPU_CONFIGURATION
        );
    }
}
