//! The Ascend device plugin's part, played by the process kubelet (e2e only, never
//! shipped): for each Pod bound to a simulated node that requests the NPU resource, pick
//! free physical devices on that node (first fit, per container; freed when the Pod
//! goes), and before any container starts write what the real plugin writes — the
//! allocation annotation (`ascend.kubectl.kubernetes.io/ascend-910-configuration`: device
//! ids, device IPs as the driver reports them — the NPU fabric's addressing, the
//! unfaulted `/etc/hccn.conf` — `server_id` = the Pod's UID,
//! `host_ip`) and `huawei.com/AscendReal` — and give each container
//! `ASCEND_VISIBLE_DEVICES` as the plugin's Allocate does.
//!
//! Faults, per node, as tests inject them ([`PluginFault`]): the annotation names another
//! device than the one really allocated (plugin and kubelet disagree), or lacks the
//! device IPs (`-1`, the plugin's "lookup failed").
//!
//! The kubelet's side is kept too: each node's allocations (and its allocatable
//! devices) in a [`SharedPodResources`], which the testbed serves as that host's
//! PodResources v1 socket — the kubelet's truth, even when the annotation lies.
//!
//! The bookkeeping and the annotation are pure ([`Allocator`], [`annotations`]); the
//! kubelet does the API call.
//!
//! Size: one stand-in (allocator, annotation, the kubelet's list, the shared handle)
//! whose unit tests are about a third of the file.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use hcomm_crds::contract::ascend::{
    ANNOTATION_ASCEND_REAL, AllocatedDevice, DeviceAllocation, configuration_annotation,
    kubelet_device_id,
};
use hcomm_kubelet::server::SharedPodResources;
use hcomm_kubelet::{ContainerDevices, ContainerResources, PodResources};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::hosts::hccn_conf::HccnConf;

/// A fault the stand-in plays on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PluginFault {
    /// Behaves as the real plugin.
    #[default]
    None,
    /// The annotation names another device than the one allocated (the kubelet's
    /// PodResources and the env say the truth).
    AnnotateOtherDevice,
    /// The annotation's device IPs are `-1` (the plugin could not look them up).
    MissingDeviceIp,
}

/// Why a Pod could not get its devices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// The node has fewer free devices than asked (a real kubelet rejects the Pod at
    /// admission with `UnexpectedAdmissionError`).
    #[error("node {node} has {free} free of {total} devices, the Pod asks for {asked}")]
    Insufficient {
        /// The node.
        node: String,
        /// Free devices.
        free: u32,
        /// All devices.
        total: u32,
        /// Devices asked for.
        asked: u32,
    },
    /// A node the stand-in does not serve.
    #[error("node {0} has no NPUs in the testbed")]
    UnknownNode(String),
}

/// One Pod's allocation: container → physical ids (ascending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAllocation {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub name: String,
    /// The node.
    pub node: String,
    /// Container name → physical device ids.
    pub containers: BTreeMap<String, Vec<u32>>,
}

impl PodAllocation {
    /// Every device of the Pod, ascending.
    pub fn devices(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.containers.values().flatten().copied().collect();
        all.sort_unstable();
        all
    }
}

/// NPUs asked for per container (`limits`, else `requests`, of `resource`); containers
/// asking for none are left out.
pub fn requested(pod: &Pod, resource: &str) -> Vec<(String, u32)> {
    let count = |q: Option<&Quantity>| q.and_then(|q| q.0.parse::<u32>().ok()).unwrap_or(0);
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| {
            let r = c.resources.as_ref()?;
            let n = match count(r.limits.as_ref().and_then(|l| l.get(resource))) {
                0 => count(r.requests.as_ref().and_then(|l| l.get(resource))),
                n => n,
            };
            (n > 0).then(|| (c.name.clone(), n))
        })
        .collect()
}

/// The devices of every node and who holds them (pure).
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    /// Node → its device count.
    total: BTreeMap<String, u32>,
    /// Pod UID → its allocation.
    pods: BTreeMap<String, PodAllocation>,
}

impl Allocator {
    /// Nodes and how many devices each has.
    pub fn new(total: BTreeMap<String, u32>) -> Allocator {
        Allocator {
            total,
            pods: BTreeMap::new(),
        }
    }

    fn used(&self, node: &str) -> BTreeSet<u32> {
        self.pods
            .values()
            .filter(|p| p.node == node)
            .flat_map(|p| p.devices())
            .collect()
    }

    /// The allocation of Pod `uid`, if it has one.
    pub fn get(&self, uid: &str) -> Option<&PodAllocation> {
        self.pods.get(uid)
    }

    /// Every allocation on `node`.
    pub fn on_node(&self, node: &str) -> Vec<PodAllocation> {
        self.pods
            .values()
            .filter(|p| p.node == node)
            .cloned()
            .collect()
    }

    /// Gives Pod `uid` on `node` the devices `asks` (container, count) lists: the lowest
    /// free ids first, container by container. Idempotent per UID.
    pub fn allocate(
        &mut self,
        uid: &str,
        namespace: &str,
        name: &str,
        node: &str,
        asks: &[(String, u32)],
    ) -> Result<PodAllocation, AllocateError> {
        if let Some(existing) = self.pods.get(uid) {
            return Ok(existing.clone());
        }
        let total = *self
            .total
            .get(node)
            .ok_or_else(|| AllocateError::UnknownNode(node.to_owned()))?;
        let used = self.used(node);
        let mut free = (0..total).filter(|d| !used.contains(d));
        let asked: u32 = asks.iter().map(|(_, n)| n).sum();
        if asked > total - used.len() as u32 {
            return Err(AllocateError::Insufficient {
                node: node.to_owned(),
                free: total - used.len() as u32,
                total,
                asked,
            });
        }
        let containers = asks
            .iter()
            .map(|(c, n)| (c.clone(), free.by_ref().take(*n as usize).collect()))
            .collect();
        let a = PodAllocation {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            node: node.to_owned(),
            containers,
        };
        self.pods.insert(uid.to_owned(), a.clone());
        Ok(a)
    }

    /// Frees Pod `uid`'s devices; returns what it held.
    pub fn free(&mut self, uid: &str) -> Option<PodAllocation> {
        self.pods.remove(uid)
    }
}

/// The Pod an annotation is written for.
#[derive(Debug, Clone, Copy)]
pub struct Admitted<'a> {
    /// Its name.
    pub pod_name: &'a str,
    /// Its UID (the annotation's `server_id`).
    pub uid: &'a str,
    /// Its node's IP.
    pub host_ip: &'a str,
}

/// The annotations the plugin writes for `allocation` of `pod`: devices sorted by
/// physical id, device IPs from `conf` (`-1` when missing), `fault` applied. `total` is
/// the node's device count (for the other-device fault).
pub fn annotations(
    resource: &str,
    pod: Admitted<'_>,
    allocation: &PodAllocation,
    total: u32,
    conf: &HccnConf,
    fault: PluginFault,
) -> BTreeMap<String, String> {
    let mut ids = allocation.devices();
    if fault == PluginFault::AnnotateOtherDevice
        && let Some(other) = (0..total).find(|d| !ids.contains(d))
        && let Some(first) = ids.first_mut()
    {
        *first = other;
        ids.sort_unstable();
    }
    let devices = ids
        .iter()
        .map(|id| AllocatedDevice {
            device_id: id.to_string(),
            device_ip: match (fault, conf.address(*id)) {
                (PluginFault::MissingDeviceIp, _) | (_, None) => "-1".to_owned(),
                (_, Some(ip)) => ip.to_string(),
            },
            super_device_id: None,
        })
        .collect();
    let config = DeviceAllocation {
        pod_name: pod.pod_name.to_owned(),
        server_id: pod.uid.to_owned(),
        host_ip: pod.host_ip.to_owned(),
        super_pod_id: None,
        devices,
    };
    let real: Vec<String> = ids
        .iter()
        .map(|d| kubelet_device_id(resource, *d))
        .collect();
    BTreeMap::from([
        (
            configuration_annotation(resource).to_owned(),
            serde_json::to_string(&config).expect("plain data serialises"),
        ),
        (ANNOTATION_ASCEND_REAL.to_owned(), real.join(",")),
    ])
}

/// `ASCEND_VISIBLE_DEVICES`' value for `ids`: the physical ids, comma separated.
pub fn visible_devices(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// The stand-in's shared state: the allocator and the faults per node. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DevicePlugin {
    resource: String,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    allocator: Allocator,
    faults: BTreeMap<String, PluginFault>,
    /// Node → what its kubelet's PodResources API answers.
    pod_resources: BTreeMap<String, SharedPodResources>,
}

/// What the kubelet's PodResources API lists for `allocation` (kubelet device ids).
pub fn pod_resources(resource: &str, allocation: &PodAllocation) -> PodResources {
    PodResources {
        name: allocation.name.clone(),
        namespace: allocation.namespace.clone(),
        containers: allocation
            .containers
            .iter()
            .map(|(name, ids)| ContainerResources {
                name: name.clone(),
                devices: vec![ContainerDevices {
                    resource_name: resource.to_owned(),
                    device_ids: ids
                        .iter()
                        .map(|d| kubelet_device_id(resource, *d))
                        .collect(),
                    topology: None,
                }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

impl DevicePlugin {
    /// A plugin for `resource` serving nodes with the given device counts.
    pub fn new(resource: &str, devices: BTreeMap<String, u32>) -> DevicePlugin {
        DevicePlugin {
            resource: resource.to_owned(),
            inner: Arc::new(Mutex::new(Inner {
                pod_resources: devices
                    .iter()
                    .map(|(node, n)| {
                        let shared = SharedPodResources::default();
                        shared.set_allocatable(vec![ContainerDevices {
                            resource_name: resource.to_owned(),
                            device_ids: (0..*n).map(|d| kubelet_device_id(resource, d)).collect(),
                            topology: None,
                        }]);
                        (node.clone(), shared)
                    })
                    .collect(),
                allocator: Allocator::new(devices),
                faults: BTreeMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The resource it serves.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Devices of `node` (0 for a node it does not serve).
    pub fn devices_of(&self, node: &str) -> u32 {
        self.lock().allocator.total.get(node).copied().unwrap_or(0)
    }

    /// Plays `fault` on `node` for Pods admitted from now on.
    pub fn inject(&self, node: &str, fault: PluginFault) {
        self.lock().faults.insert(node.to_owned(), fault);
    }

    /// The fault played on `node`.
    pub fn fault(&self, node: &str) -> PluginFault {
        self.lock().faults.get(node).copied().unwrap_or_default()
    }

    /// Every allocation on `node`.
    pub fn allocations(&self, node: &str) -> Vec<PodAllocation> {
        self.lock().allocator.on_node(node)
    }

    /// Pod `uid`'s allocation.
    pub fn allocation(&self, uid: &str) -> Option<PodAllocation> {
        self.lock().allocator.get(uid).cloned()
    }

    pub(crate) fn allocate(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
        node: &str,
        asks: &[(String, u32)],
    ) -> Result<PodAllocation, AllocateError> {
        let mut inner = self.lock();
        let a = inner.allocator.allocate(uid, namespace, name, node, asks)?;
        if let Some(shared) = inner.pod_resources.get(node) {
            shared.set_pod(pod_resources(&self.resource, &a));
        }
        Ok(a)
    }

    pub(crate) fn free(&self, uid: &str) -> Option<PodAllocation> {
        let mut inner = self.lock();
        let a = inner.allocator.free(uid)?;
        if let Some(shared) = inner.pod_resources.get(&a.node) {
            shared.remove_pod(&a.namespace, &a.name);
        }
        Some(a)
    }

    /// What node `node`'s kubelet PodResources API answers (serve it with
    /// `hcomm_kubelet::server::serve`).
    pub fn pod_resources_of(&self, node: &str) -> Option<SharedPodResources> {
        self.lock().pod_resources.get(node).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::ascend::RESOURCE_ASCEND910;

    fn asks(n: u32) -> Vec<(String, u32)> {
        vec![("worker".to_owned(), n)]
    }

    #[test]
    fn first_fit_per_node_freed_when_the_pod_goes() {
        let mut a = Allocator::new(BTreeMap::from([("n0".into(), 8), ("n1".into(), 8)]));
        let p1 = a.allocate("u1", "ns", "p1", "n0", &asks(4)).unwrap();
        assert_eq!(p1.devices(), vec![0, 1, 2, 3]);
        assert_eq!(
            a.allocate("u1", "ns", "p1", "n0", &asks(4)).unwrap(),
            p1,
            "idempotent"
        );
        let p2 = a.allocate("u2", "ns", "p2", "n0", &asks(4)).unwrap();
        assert_eq!(p2.devices(), vec![4, 5, 6, 7]);
        assert_eq!(
            a.allocate("u3", "ns", "p3", "n0", &asks(1)),
            Err(AllocateError::Insufficient {
                node: "n0".into(),
                free: 0,
                total: 8,
                asked: 1
            })
        );
        assert_eq!(
            a.allocate("u4", "ns", "p4", "n1", &asks(2))
                .unwrap()
                .devices(),
            vec![0, 1]
        );
        a.free("u1");
        let two = vec![("a".to_owned(), 1), ("b".to_owned(), 2)];
        let p5 = a.allocate("u5", "ns", "p5", "n0", &two).unwrap();
        assert_eq!(p5.containers["a"], vec![0]);
        assert_eq!(p5.containers["b"], vec![1, 2]);
        assert!(matches!(
            a.allocate("u6", "ns", "p6", "nx", &asks(1)),
            Err(AllocateError::UnknownNode(_))
        ));
    }

    fn alloc(ids: &[u32]) -> PodAllocation {
        PodAllocation {
            namespace: "ns".into(),
            name: "p".into(),
            node: "host-1".into(),
            containers: BTreeMap::from([("worker".to_owned(), ids.to_vec())]),
        }
    }

    #[test]
    fn the_annotation_is_the_plugins_with_ips_from_hccn_conf() {
        let conf = crate::hosts::npu::hccn_conf_for(1, 2, 8);
        let a = annotations(
            RESOURCE_ASCEND910,
            Admitted {
                pod_name: "p",
                uid: "uid-1",
                host_ip: "198.18.0.11",
            },
            &alloc(&[3, 2]),
            8,
            &conf,
            PluginFault::None,
        );
        let parsed =
            DeviceAllocation::parse(&a[configuration_annotation(RESOURCE_ASCEND910)]).unwrap();
        assert_eq!(
            parsed.physical_ids().unwrap(),
            vec![2, 3],
            "sorted by physical id"
        );
        assert_eq!(parsed.server_id, "uid-1");
        assert_eq!(parsed.host_ip, "198.18.0.11");
        assert_eq!(parsed.devices[0].device_ip, "192.168.1.12");
        assert_eq!(a[ANNOTATION_ASCEND_REAL], "Ascend910-2,Ascend910-3");
        assert_eq!(visible_devices(&[2, 3]), "2,3");
        let listed = pod_resources(RESOURCE_ASCEND910, &alloc(&[2, 3]));
        assert_eq!(listed.containers[0].name, "worker");
        assert_eq!(
            listed.containers[0].devices[0].device_ids,
            vec!["Ascend910-2", "Ascend910-3"]
        );
    }

    #[test]
    fn the_kubelets_list_follows_allocations() {
        let dp = DevicePlugin::new(RESOURCE_ASCEND910, BTreeMap::from([("n0".into(), 8)]));
        let shared = dp.pod_resources_of("n0").unwrap();
        dp.allocate("u1", "ns", "p1", "n0", &asks(2)).unwrap();
        assert_eq!(shared.pods().len(), 1);
        assert_eq!(shared.pods()[0].name, "p1");
        dp.free("u1");
        assert!(shared.pods().is_empty());
        assert!(dp.pod_resources_of("nx").is_none());
    }

    const POD: Admitted<'static> = Admitted {
        pod_name: "p",
        uid: "u",
        host_ip: "h",
    };

    #[test]
    fn faults_change_only_what_they_name() {
        let conf = crate::hosts::npu::hccn_conf_for(0, 1, 8);
        let key = configuration_annotation(RESOURCE_ASCEND910);
        let other = annotations(
            RESOURCE_ASCEND910,
            POD,
            &alloc(&[0, 1]),
            8,
            &conf,
            PluginFault::AnnotateOtherDevice,
        );
        let parsed = DeviceAllocation::parse(&other[key]).unwrap();
        assert_eq!(
            parsed.physical_ids().unwrap(),
            vec![1, 2],
            "device 0 reported as 2"
        );
        assert_eq!(other[ANNOTATION_ASCEND_REAL], "Ascend910-1,Ascend910-2");
        let no_ip = annotations(
            RESOURCE_ASCEND910,
            POD,
            &alloc(&[0]),
            8,
            &conf,
            PluginFault::MissingDeviceIp,
        );
        let parsed = DeviceAllocation::parse(&no_ip[key]).unwrap();
        assert_eq!(parsed.devices[0].device_ip, "-1");
        assert_eq!(parsed.devices[0].ip(), None);
        let unlisted = annotations(
            RESOURCE_ASCEND910,
            POD,
            &alloc(&[0]),
            8,
            &HccnConf::default(),
            PluginFault::None,
        );
        assert!(
            unlisted[key].contains(r#""device_ip":"-1""#),
            "no hccn.conf entry → -1"
        );
    }
}
