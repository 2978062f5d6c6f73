//! The kubelet's device plugin API v1beta1, written by hand as prost structs: the
//! messages a plugin that advertises whole devices and hands them out by environment
//! needs. Field numbers are those of kubernetes `staging/src/k8s.io/kubelet/pkg/apis/
//! deviceplugin/v1beta1/api.proto` (package `v1beta1`).

use std::collections::HashMap;

/// `Empty {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Empty {}

/// What the plugin asks of the kubelet beyond Allocate.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DevicePluginOptions {
    /// Call PreStartContainer before each container starts.
    #[prost(bool, tag = "1")]
    pub pre_start_required: bool,
    /// Call GetPreferredAllocation before choosing devices.
    #[prost(bool, tag = "2")]
    pub get_preferred_allocation_available: bool,
}

/// The plugin introduces itself on the kubelet's socket.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RegisterRequest {
    /// The API version ([`VERSION`]).
    #[prost(string, tag = "1")]
    pub version: String,
    /// The plugin's socket, relative to the kubelet's device-plugin folder.
    #[prost(string, tag = "2")]
    pub endpoint: String,
    /// The extended resource it serves (`huawei.com/Ascend910`).
    #[prost(string, tag = "3")]
    pub resource_name: String,
    /// Its options.
    #[prost(message, optional, tag = "4")]
    pub options: Option<DevicePluginOptions>,
}

/// Each message of the ListAndWatch stream: every device and its health.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListAndWatchResponse {
    /// The devices.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
}

/// One device.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Device {
    /// Its id (`Ascend910-3`).
    #[prost(string, tag = "1")]
    pub id: String,
    /// [`HEALTHY`] or [`UNHEALTHY`].
    #[prost(string, tag = "2")]
    pub health: String,
}

/// Which devices, among those free, the plugin would hand out.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PreferredAllocationRequest {
    /// One per container.
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerPreferredAllocationRequest>,
}

/// One container's choice.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerPreferredAllocationRequest {
    /// The free devices.
    #[prost(string, repeated, tag = "1")]
    pub available_device_ids: Vec<String>,
    /// Devices that must be among the answer.
    #[prost(string, repeated, tag = "2")]
    pub must_include_device_ids: Vec<String>,
    /// How many.
    #[prost(int32, tag = "3")]
    pub allocation_size: i32,
}

/// The plugin's preference.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PreferredAllocationResponse {
    /// One per container, in the request's order.
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerPreferredAllocationResponse>,
}

/// One container's preferred devices.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerPreferredAllocationResponse {
    /// The devices.
    #[prost(string, repeated, tag = "1")]
    pub device_ids: Vec<String>,
}

/// The devices the kubelet chose, per container.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AllocateRequest {
    /// One per container.
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerAllocateRequest>,
}

/// One container's devices.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerAllocateRequest {
    /// Their ids.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

/// What each container gets for its devices.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AllocateResponse {
    /// One per container, in the request's order.
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerAllocateResponse>,
}

/// One container's environment (and, unused here, mounts, device nodes, annotations).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerAllocateResponse {
    /// Environment variables.
    #[prost(map = "string, string", tag = "1")]
    pub envs: HashMap<String, String>,
}

/// `PreStartContainerRequest` (never asked for: no option requires it).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PreStartContainerRequest {
    /// The container's devices.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

/// `PreStartContainerResponse {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PreStartContainerResponse {}

/// The API version a plugin registers with.
pub const VERSION: &str = "v1beta1";
/// A device the kubelet may hand out.
pub const HEALTHY: &str = "Healthy";
/// A device the kubelet takes out of allocatable.
pub const UNHEALTHY: &str = "Unhealthy";
/// The kubelet's registration socket, in its device-plugin folder (the kubelet uses this
/// path whatever its `--root-dir`).
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// The gRPC method paths.
pub mod path {
    /// `Registration.Register` (the kubelet's).
    pub const REGISTER: &str = "/v1beta1.Registration/Register";
    /// `DevicePlugin.GetDevicePluginOptions`.
    pub const GET_OPTIONS: &str = "/v1beta1.DevicePlugin/GetDevicePluginOptions";
    /// `DevicePlugin.ListAndWatch` (server streaming).
    pub const LIST_AND_WATCH: &str = "/v1beta1.DevicePlugin/ListAndWatch";
    /// `DevicePlugin.GetPreferredAllocation`.
    pub const GET_PREFERRED_ALLOCATION: &str = "/v1beta1.DevicePlugin/GetPreferredAllocation";
    /// `DevicePlugin.Allocate`.
    pub const ALLOCATE: &str = "/v1beta1.DevicePlugin/Allocate";
    /// `DevicePlugin.PreStartContainer`.
    pub const PRE_START_CONTAINER: &str = "/v1beta1.DevicePlugin/PreStartContainer";
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn wire_bytes_match_the_proto_field_numbers() {
        let r = RegisterRequest {
            version: "v".into(),
            endpoint: "e".into(),
            resource_name: "r".into(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        };
        let expected: &[u8] = &[
            0x0a, 1, b'v', // 1: version
            0x12, 1, b'e', // 2: endpoint
            0x1a, 1, b'r', // 3: resource_name
            0x22, 2, 0x10, 1, // 4: options { 2: true }
        ];
        assert_eq!(r.encode_to_vec(), expected);
        let p = ContainerPreferredAllocationRequest {
            available_device_ids: vec!["a".into()],
            must_include_device_ids: vec!["m".into()],
            allocation_size: 2,
        };
        assert_eq!(p.encode_to_vec(), [0x0a, 1, b'a', 0x12, 1, b'm', 0x18, 2]);
        let d = Device {
            id: "i".into(),
            health: "h".into(),
        };
        assert_eq!(d.encode_to_vec(), [0x0a, 1, b'i', 0x12, 1, b'h']);
    }
}
