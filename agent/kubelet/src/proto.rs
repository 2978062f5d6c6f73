//! The kubelet's PodResources v1 messages, written by hand as prost structs.
//!
//! Why by hand: the proto is small and stable (fields are only ever added), and writing it
//! out keeps protoc and a build script off every build and CI machine. Every field number
//! below is the one in kubernetes `staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/
//! api.proto` (package `v1`, service `PodResourcesLister`); a wrong number would decode as
//! an empty field, so the crate's tests check the wire bytes of a known message too.

/// `AllocatableResourcesRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AllocatableResourcesRequest {}

/// Everything the kubelet knows it can hand out on this node.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AllocatableResourcesResponse {
    /// Devices by resource name (device plugins).
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
    /// Allocatable CPU ids (CPU manager).
    #[prost(int64, repeated, tag = "2")]
    pub cpu_ids: Vec<i64>,
    /// Allocatable memory blocks (memory manager).
    #[prost(message, repeated, tag = "3")]
    pub memory: Vec<ContainerMemory>,
}

/// `ListPodResourcesRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesRequest {}

/// Every Pod on the node with what it was given.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesResponse {
    /// One entry per Pod.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// The resources assigned to one Pod.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodResources {
    /// The Pod's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The Pod's namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Per container.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
    /// Exclusive CPUs at Pod level (newer kubelets).
    #[prost(int64, repeated, tag = "4")]
    pub cpu_ids: Vec<i64>,
    /// Memory blocks at Pod level (newer kubelets).
    #[prost(message, repeated, tag = "5")]
    pub memory: Vec<ContainerMemory>,
}

/// The resources assigned to one container.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerResources {
    /// The container's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Device-plugin devices, by resource name.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Exclusive CPU ids.
    #[prost(int64, repeated, tag = "3")]
    pub cpu_ids: Vec<i64>,
    /// Memory and hugepages.
    #[prost(message, repeated, tag = "4")]
    pub memory: Vec<ContainerMemory>,
    /// Devices from dynamic resource allocation.
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// Memory or hugepages assigned to a container.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerMemory {
    /// `memory`, `hugepages-2Mi`, …
    #[prost(string, tag = "1")]
    pub memory_type: String,
    /// Bytes.
    #[prost(uint64, tag = "2")]
    pub size: u64,
    /// NUMA placement.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// The devices of one resource assigned to a container.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerDevices {
    /// The extended resource, e.g. `huawei.com/Ascend910`.
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// The device plugin's device ids, e.g. `Ascend910-3`.
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    /// NUMA placement.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// Hardware topology of a resource.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TopologyInfo {
    /// NUMA nodes.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// One NUMA node (`NUMANode` in the proto).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NumaNode {
    /// The proto's `ID`.
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// Devices assigned through dynamic resource allocation (tag 1 is a tombstone).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DynamicResource {
    /// The ResourceClaim's name.
    #[prost(string, tag = "2")]
    pub claim_name: String,
    /// The ResourceClaim's namespace.
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    /// What the claim resolved to.
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// One DRA device.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ClaimResource {
    /// CDI devices it maps to.
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    /// The DRA driver.
    #[prost(string, tag = "2")]
    pub driver_name: String,
    /// The driver's pool.
    #[prost(string, tag = "3")]
    pub pool_name: String,
    /// The device in the pool.
    #[prost(string, tag = "4")]
    pub device_name: String,
    /// Share id when the device is shared.
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

/// A fully qualified CDI device name (`vendor.com/gpu=gpudevice1`).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CdiDevice {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `Get` asks for one Pod.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GetPodResourcesRequest {
    /// The Pod's name.
    #[prost(string, tag = "1")]
    pub pod_name: String,
    /// The Pod's namespace.
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

/// `Get`'s answer.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GetPodResourcesResponse {
    /// The Pod, when the kubelet knows it.
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

/// The gRPC method paths (`/<package>.<service>/<method>`).
pub mod path {
    /// `List`.
    pub const LIST: &str = "/v1.PodResourcesLister/List";
    /// `GetAllocatableResources`.
    pub const GET_ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
    /// `Get`.
    pub const GET: &str = "/v1.PodResourcesLister/Get";
}

impl PodResources {
    /// The device ids the kubelet allocated to this Pod for one resource, over all its
    /// containers, in container order.
    pub fn device_ids(&self, resource: &str) -> Vec<String> {
        self.containers
            .iter()
            .flat_map(|c| c.devices.iter())
            .filter(|d| d.resource_name == resource)
            .flat_map(|d| d.device_ids.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes of `PodResources{name:"p", namespace:"n", containers:[{name:"c",
    /// devices:[{resource_name:"r", device_ids:["d"]}]}]}` as protoc encodes them, so a
    /// wrong tag here cannot go unnoticed.
    #[test]
    fn wire_bytes_match_the_proto_field_numbers() {
        let pod = PodResources {
            name: "p".into(),
            namespace: "n".into(),
            containers: vec![ContainerResources {
                name: "c".into(),
                devices: vec![ContainerDevices {
                    resource_name: "r".into(),
                    device_ids: vec!["d".into()],
                    topology: None,
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let bytes = pod.encode_to_vec();
        let expected: &[u8] = &[
            0x0a, 1, b'p', // 1: name
            0x12, 1, b'n', // 2: namespace
            0x1a, 11, // 3: containers
            0x0a, 1, b'c', // 1: name
            0x12, 6, // 2: devices
            0x0a, 1, b'r', // 1: resource_name
            0x12, 1, b'd', // 2: device_ids
        ];
        assert_eq!(bytes, expected);
        assert_eq!(PodResources::decode(expected).unwrap(), pod);
        let get = GetPodResourcesRequest {
            pod_name: "a".into(),
            pod_namespace: "b".into(),
        };
        assert_eq!(get.encode_to_vec(), [0x0a, 1, b'a', 0x12, 1, b'b']);
        let claim = DynamicResource {
            claim_name: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            claim.encode_to_vec(),
            [0x12, 1, b'x'],
            "tag 1 is a tombstone"
        );
    }

    #[test]
    fn device_ids_gather_one_resource_over_containers() {
        let devs = |r: &str, ids: &[&str]| ContainerDevices {
            resource_name: r.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: None,
        };
        let pod = PodResources {
            containers: vec![
                ContainerResources {
                    devices: vec![devs("a/x", &["x-1"]), devs("a/y", &["y-0"])],
                    ..Default::default()
                },
                ContainerResources {
                    devices: vec![devs("a/x", &["x-4"])],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(pod.device_ids("a/x"), vec!["x-1", "x-4"]);
        assert!(pod.device_ids("a/z").is_empty());
    }
}
