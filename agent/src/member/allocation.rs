//! Whether the NPUs a member Pod got agree everywhere (pure): the kubelet's record
//! (PodResources: the device ids the device plugin handed out for the Pod's NPU resource),
//! the device plugin's own allocation annotation on the Pod, and the devices the published
//! rank table gives the member. HCCL loads the rank table and checks each rank's
//! `device_id` against the device the process really runs on, so a disagreement found here
//! is a failure HCCL would otherwise report later, inside the worker, with no name.
//!
//! Only Pods that request an NPU resource are checked: a group on CPU nodes (the testbed's
//! TCP groups) requests none, and [`npu_request`] says so from the Pod's own resource
//! requests. The I/O (asking the kubelet, waiting for the answer) is
//! [`super::allocation_check`].

use std::collections::BTreeSet;

use hcomm_crds::contract::ascend::{
    DeviceAllocation, RESOURCE_ASCEND910, RESOURCE_NPU, configuration_annotation, physical_id_of,
};
use hcomm_crds::rank_table::ServerView;
use k8s_openapi::api::core::v1::Pod;

/// The NPU resource a Pod requests, and how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpuRequest {
    /// The extended resource (`huawei.com/Ascend910`, `huawei.com/npu`, …).
    pub resource: String,
    /// Whole devices requested, over all containers.
    pub count: u32,
}

/// Whether an extended resource is an Ascend NPU: `huawei.com/npu` or any
/// `huawei.com/Ascend…` (910, 310, 310P; virtual NPUs such as `Ascend910-4c` count too,
/// and then fail the check, since they are not whole devices HCCL can rank).
pub fn is_npu_resource(name: &str) -> bool {
    let domain = |r: &'static str| r.split_once('/').map_or("", |(d, _)| d);
    name == RESOURCE_NPU
        || name
            .split_once('/')
            .is_some_and(|(d, kind)| d == domain(RESOURCE_ASCEND910) && kind.starts_with("Ascend"))
}

/// The NPU resource the Pod's containers request (requests, else limits: for extended
/// resources the two must be equal and either implies the other); None when it requests
/// none, or a count that is not a positive whole number.
pub fn npu_request(pod: &Pod) -> Option<NpuRequest> {
    let containers = &pod.spec.as_ref()?.containers;
    let mut found: Option<NpuRequest> = None;
    for c in containers {
        let Some(res) = &c.resources else { continue };
        let names: BTreeSet<&String> = res
            .requests
            .iter()
            .chain(res.limits.iter())
            .flat_map(|m| m.keys())
            .filter(|k| is_npu_resource(k))
            .collect();
        for name in names {
            let q = res
                .requests
                .as_ref()
                .and_then(|m| m.get(name))
                .or_else(|| res.limits.as_ref().and_then(|m| m.get(name)))?;
            let n: u32 = q.0.trim().parse().ok()?;
            match &mut found {
                Some(f) if &f.resource == name => f.count += n,
                Some(_) => {}
                None => {
                    found = Some(NpuRequest {
                        resource: name.clone(),
                        count: n,
                    })
                }
            }
        }
    }
    found.filter(|f| f.count > 0)
}

/// The device plugin's allocation annotation for `resource`, as written on the Pod.
pub fn annotation_of<'p>(pod: &'p Pod, resource: &str) -> Option<&'p String> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(configuration_annotation(resource))
}

/// The member's (rank, physical device) entries in its server of the rank table: the ranks
/// `first_rank .. first_rank + count` (the operator gives a member consecutive ranks), or,
/// when the Pod carries no first rank, the entries on the devices it was allocated.
pub fn member_entries(
    server: Option<&ServerView<'_>>,
    first_rank: Option<u32>,
    count: u32,
    allocated: &[u32],
) -> Vec<(u32, u32)> {
    let Some(server) = server else {
        return Vec::new();
    };
    let mut v: Vec<(u32, u32)> = server
        .devices
        .iter()
        .map(|d| (d.rank_id, d.device_id))
        .filter(|(rank, dev)| match first_rank {
            Some(first) => (first..first.saturating_add(count)).contains(rank),
            None => allocated.contains(dev),
        })
        .collect();
    v.sort_unstable();
    v
}

/// What the check sees.
#[derive(Debug, Clone, Copy)]
pub struct AllocationFacts<'a> {
    pub request: &'a NpuRequest,
    /// The kubelet's device ids for the resource; None when it does not list the Pod.
    pub kubelet: Option<&'a [String]>,
    /// The device plugin's annotation, as written; None when absent.
    pub annotation: Option<&'a str>,
    /// The member's (rank, physical device) entries in the rank table, rank order.
    pub table: &'a [(u32, u32)],
}

/// The check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationOutcome {
    /// All three agree: the member's (rank, physical device) entries.
    Agreed(Vec<(u32, u32)>),
    /// Not known yet (the kubelet or the plugin has not recorded it): ask again until the
    /// deadline, then `AllocationUnknown`.
    Unknown(String),
    /// Known and contradictory: `AllocationMismatch`.
    Mismatch(String),
}

fn list(ids: &BTreeSet<u32>) -> String {
    let v: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("[{}]", v.join(","))
}

/// Decides.
pub fn decide(f: AllocationFacts<'_>) -> AllocationOutcome {
    use AllocationOutcome::{Agreed, Mismatch, Unknown};
    let resource = &f.request.resource;
    let kubelet_ids = match f.kubelet {
        None => {
            return Unknown(format!(
                "the kubelet does not list the Pod's {resource} devices yet"
            ));
        }
        Some([]) => {
            return Unknown(format!(
                "the kubelet lists the Pod without {resource} devices yet"
            ));
        }
        Some(ids) => ids,
    };
    let mut kubelet = BTreeSet::new();
    for id in kubelet_ids {
        match physical_id_of(id) {
            Some(p) => {
                kubelet.insert(p);
            }
            None => {
                return Mismatch(format!(
                    "the kubelet allocated device {id:?}, which is not a whole NPU (virtual NPUs cannot hold ranks)"
                ));
            }
        }
    }
    if kubelet.len() != kubelet_ids.len() || kubelet.len() != f.request.count as usize {
        return Mismatch(format!(
            "the Pod requests {} {resource} but the kubelet allocated {}",
            f.request.count,
            list(&kubelet)
        ));
    }
    let key = configuration_annotation(resource);
    let Some(text) = f.annotation else {
        return Unknown(format!(
            "the kubelet allocated {} but the device plugin has not written {key} yet",
            list(&kubelet)
        ));
    };
    let plugin: BTreeSet<u32> = match DeviceAllocation::parse(text).and_then(|a| a.physical_ids()) {
        Ok(ids) => ids.into_iter().collect(),
        Err(e) => return Mismatch(format!("{key}: {e}")),
    };
    if plugin != kubelet {
        return Mismatch(format!(
            "the kubelet allocated {} but the device plugin's {key} says {}",
            list(&kubelet),
            list(&plugin)
        ));
    }
    let table: BTreeSet<u32> = f.table.iter().map(|(_, d)| *d).collect();
    if table != kubelet || f.table.len() != kubelet.len() {
        let ranks: Vec<String> = f.table.iter().map(|(r, d)| format!("{r}:{d}")).collect();
        return Mismatch(format!(
            "the kubelet and the device plugin allocated {} but the rank table gives the member {} (rank:device [{}])",
            list(&kubelet),
            list(&table),
            ranks.join(",")
        ));
    }
    Agreed(f.table.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::ascend::kubelet_device_id;
    use serde_json::json;

    fn req(count: u32) -> NpuRequest {
        NpuRequest {
            resource: RESOURCE_ASCEND910.into(),
            count,
        }
    }

    fn ids(p: &[u32]) -> Vec<String> {
        p.iter()
            .map(|i| kubelet_device_id(RESOURCE_ASCEND910, *i))
            .collect()
    }

    fn annotation(p: &[u32]) -> String {
        let devices: Vec<_> = p
            .iter()
            .map(|i| json!({"device_id": i.to_string(), "device_ip": "-1"}))
            .collect();
        json!({"pod_name": "m", "devices": devices}).to_string()
    }

    fn decide_with(
        count: u32,
        kubelet: Option<&[u32]>,
        plugin: Option<&[u32]>,
        table: &[(u32, u32)],
    ) -> AllocationOutcome {
        let k = kubelet.map(ids);
        let a = plugin.map(annotation);
        decide(AllocationFacts {
            request: &req(count),
            kubelet: k.as_deref(),
            annotation: a.as_deref(),
            table,
        })
    }

    #[test]
    fn kubelet_plugin_and_table_agreeing_yield_the_members_entries() {
        assert_eq!(
            decide_with(2, Some(&[6, 4]), Some(&[4, 6]), &[(8, 4), (9, 6)]),
            AllocationOutcome::Agreed(vec![(8, 4), (9, 6)])
        );
    }

    #[test]
    fn no_kubelet_record_or_no_annotation_is_unknown_not_a_mismatch() {
        assert!(matches!(
            decide_with(2, None, Some(&[0, 1]), &[(0, 0), (1, 1)]),
            AllocationOutcome::Unknown(m) if m.contains("does not list")
        ));
        assert!(matches!(
            decide_with(2, Some(&[]), None, &[]),
            AllocationOutcome::Unknown(_)
        ));
        assert!(matches!(
            decide_with(2, Some(&[0, 1]), None, &[(0, 0), (1, 1)]),
            AllocationOutcome::Unknown(m) if m.contains("has not written")
        ));
    }

    #[test]
    fn the_plugin_disagreeing_with_the_kubelet_names_both_sides() {
        let AllocationOutcome::Mismatch(m) =
            decide_with(2, Some(&[0, 1]), Some(&[0, 2]), &[(0, 0), (1, 1)])
        else {
            panic!("expected a mismatch");
        };
        assert!(m.contains("[0,1]") && m.contains("[0,2]"), "{m}");
    }

    #[test]
    fn the_rank_table_disagreeing_names_the_ranks() {
        let AllocationOutcome::Mismatch(m) =
            decide_with(2, Some(&[0, 1]), Some(&[0, 1]), &[(0, 0), (1, 3)])
        else {
            panic!("expected a mismatch");
        };
        assert!(m.contains("[0,3]") && m.contains("1:3"), "{m}");
        assert!(matches!(
            decide_with(1, Some(&[0]), Some(&[0]), &[]),
            AllocationOutcome::Mismatch(_)
        ));
    }

    #[test]
    fn a_count_or_id_the_request_cannot_explain_is_a_mismatch() {
        assert!(matches!(
            decide_with(2, Some(&[0]), Some(&[0]), &[(0, 0)]),
            AllocationOutcome::Mismatch(m) if m.contains("requests 2")
        ));
        let virt = vec!["Ascend910-4c-100-0".to_string()];
        assert!(matches!(
            decide(AllocationFacts {
                request: &req(1),
                kubelet: Some(&virt),
                annotation: None,
                table: &[],
            }),
            AllocationOutcome::Mismatch(m) if m.contains("not a whole NPU")
        ));
        assert!(matches!(
            decide(AllocationFacts {
                request: &req(1),
                kubelet: Some(&ids(&[0])),
                annotation: Some("{"),
                table: &[(0, 0)],
            }),
            AllocationOutcome::Mismatch(m) if m.contains("JSON")
        ));
    }

    fn pod(resources: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "m"},
            "spec": {"containers": [
                {"name": "worker", "image": "w", "resources": resources},
                {"name": "side", "image": "s"}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn the_npu_request_comes_from_the_pods_resources() {
        let p = pod(json!({"limits": {(RESOURCE_ASCEND910): "2", "cpu": "4"}}));
        assert_eq!(npu_request(&p), Some(req(2)));
        let p = pod(json!({"requests": {(RESOURCE_NPU): "4"}, "limits": {(RESOURCE_NPU): "4"}}));
        assert_eq!(npu_request(&p).map(|r| r.count), Some(4));
        assert_eq!(
            npu_request(&pod(json!({"limits": {"cpu": "4"}}))),
            None,
            "a CPU group"
        );
        assert_eq!(npu_request(&pod(json!({}))), None);
        assert!(!is_npu_resource("example.com/gpu"));
        assert!(is_npu_resource(&format!("{RESOURCE_ASCEND910}-4c")));
    }

    #[test]
    fn member_entries_are_its_rank_range_on_its_server() {
        let t = hcomm_crds::rank_table::RankTable::parse(
            r#"{"version":"1.0","status":"completed","server_count":"1","server_list":[
            {"server_id":"n","host_ip":"10.0.0.1","device":[
            {"device_id":"0","rank_id":"0"},{"device_id":"1","rank_id":"1"},
            {"device_id":"4","rank_id":"2"},{"device_id":"6","rank_id":"3"}]}]}"#,
        )
        .unwrap();
        let servers = t.servers();
        assert_eq!(
            member_entries(servers.first(), Some(2), 2, &[]),
            vec![(2, 4), (3, 6)]
        );
        assert_eq!(
            member_entries(servers.first(), None, 2, &[1, 0]),
            vec![(0, 0), (1, 1)]
        );
        assert!(member_entries(None, Some(0), 2, &[]).is_empty());
    }
}
