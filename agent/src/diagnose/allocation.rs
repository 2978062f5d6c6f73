//! `diagnose`'s NPU allocation row: for the member Pod asked about (`--pod`), the devices
//! the kubelet allocated (PodResources, read from `--pod-resources-socket`), the device
//! plugin's allocation annotation and the rank table's devices for the member, and whether
//! they agree — the same judgement as the member's verification
//! ([`crate::member::allocation::decide`]), so the row and the Pod's `AllocationMismatch`
//! or `AllocationUnknown` never tell different stories. Reading is I/O under the API
//! deadline ([`read`]); the judgement is pure ([`judge`]; `checks` makes it a row).

use std::path::Path;
use std::time::Duration;

use hcomm_kubelet::PodResourcesClient;

use crate::member::allocation::{
    AllocationFacts, AllocationOutcome, NpuRequest, decide, member_entries,
};
use crate::member::ranktable;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

/// The row's likely cause.
pub const CAUSE: &str =
    "the NPUs the kubelet allocated, the device plugin's annotation and the rank table disagree";
/// What the row compares.
pub const CHECKED: &str =
    "kubelet PodResources vs the device plugin's annotation vs the rank table";

/// What was seen of one member's allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationSeen {
    /// `namespace/name`.
    pub pod: String,
    pub request: NpuRequest,
    /// The kubelet's device ids (None: it does not list the Pod), or why it was not asked.
    pub kubelet: Result<Option<Vec<String>>, String>,
    /// The device plugin's annotation, as written.
    pub annotation: Option<String>,
    /// The member's (rank, physical device) entries in the rank table; Err: no usable table.
    pub table: Result<Vec<(u32, u32)>, String>,
}

/// Reads the allocation of the member Pod `pod` (with its group's rank-table ConfigMap);
/// None when there is no Pod or it requests no NPU resource.
pub async fn read(
    pod: Option<&Pod>,
    rank_table: Option<&ConfigMap>,
    socket: &Path,
    deadline: Duration,
) -> Option<AllocationSeen> {
    let spec = crate::member::spec::from_pod(pod?)?;
    let request = spec.npu.clone()?;
    let kubelet = PodResourcesClient::new(socket, deadline)
        .list()
        .await
        .map(|pods| {
            pods.into_iter()
                .find(|p| p.namespace == spec.namespace && p.name == spec.pod)
                .map(|p| p.device_ids(&request.resource))
        })
        .map_err(|e| e.to_string());
    let allocated: Vec<u32> = kubelet
        .iter()
        .flatten()
        .flatten()
        .filter_map(|id| hcomm_crds::contract::ascend::physical_id_of(id))
        .collect();
    let json =
        rank_table.and_then(|c| c.data.as_ref()?.get(hcomm_crds::rank_table::KEY_RANK_TABLE));
    let table = match json {
        None => Err("no rank-table ConfigMap".to_owned()),
        Some(j) => ranktable::parse(j)
            .map(|t| member_entries(&t, &spec.node, spec.first_rank, request.count, &allocated)),
    };
    Some(AllocationSeen {
        pod: spec.key(),
        request,
        kubelet,
        annotation: spec.device_allocation,
        table,
    })
}

/// How the three records compare (pure; `checks` turns it into the table's row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// They agree; the member's rank:device entries.
    Agree(String),
    /// The kubelet or the device plugin has not recorded the allocation.
    NotYet(String),
    /// They contradict each other, or the kubelet could not be asked.
    Disagree(String),
    /// No usable rank table to compare with.
    NoTable(String),
}

/// Judges what was seen, as the member's verification would.
pub fn judge(seen: &AllocationSeen) -> Judgement {
    let pod = &seen.pod;
    let kubelet = match &seen.kubelet {
        Ok(k) => k.as_deref(),
        Err(e) => return Judgement::Disagree(format!("{pod}: {e}")),
    };
    let table = match &seen.table {
        Ok(t) => t.as_slice(),
        Err(e) => return Judgement::NoTable(format!("{pod}: {e}")),
    };
    let outcome = decide(AllocationFacts {
        request: &seen.request,
        kubelet,
        annotation: seen.annotation.as_deref(),
        table,
    });
    match outcome {
        AllocationOutcome::Agreed(entries) => {
            let e: Vec<String> = entries.iter().map(|(r, d)| format!("{r}:{d}")).collect();
            Judgement::Agree(format!(
                "{pod}: {} × {} agree, rank:device [{}]",
                seen.request.count,
                seen.request.resource,
                e.join(",")
            ))
        }
        AllocationOutcome::Unknown(m) => Judgement::NotYet(format!("{pod}: {m}")),
        AllocationOutcome::Mismatch(m) => Judgement::Disagree(format!("{pod}: {m}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::ascend::{RESOURCE_ASCEND910, kubelet_device_id};

    fn seen(kubelet: &[u32], plugin: &[u32]) -> AllocationSeen {
        let devices: Vec<String> = plugin
            .iter()
            .map(|i| format!(r#"{{"device_id":"{i}"}}"#))
            .collect();
        AllocationSeen {
            pod: "ns/m-0".into(),
            request: NpuRequest {
                resource: RESOURCE_ASCEND910.into(),
                count: 2,
            },
            kubelet: Ok(Some(
                kubelet
                    .iter()
                    .map(|i| kubelet_device_id(RESOURCE_ASCEND910, *i))
                    .collect(),
            )),
            annotation: Some(format!(r#"{{"devices":[{}]}}"#, devices.join(","))),
            table: Ok(vec![(0, 2), (1, 3)]),
        }
    }

    #[test]
    fn agreement_names_the_entries_and_a_contradiction_names_both_sides() {
        let Judgement::Agree(ok) = judge(&seen(&[2, 3], &[2, 3])) else {
            panic!("expected agreement");
        };
        assert!(ok.contains("0:2,1:3"), "{ok}");
        let Judgement::Disagree(bad) = judge(&seen(&[2, 3], &[2, 4])) else {
            panic!("expected a contradiction");
        };
        assert!(bad.contains("[2,3]") && bad.contains("[2,4]"), "{bad}");
    }

    #[test]
    fn an_unreadable_kubelet_disagrees_and_a_missing_annotation_is_not_yet() {
        let mut s = seen(&[2, 3], &[2, 3]);
        s.kubelet = Err("socket missing".into());
        assert!(matches!(judge(&s), Judgement::Disagree(m) if m.contains("socket missing")));
        let mut s = seen(&[2, 3], &[2, 3]);
        s.annotation = None;
        assert!(matches!(judge(&s), Judgement::NotYet(_)));
        let mut s = seen(&[2, 3], &[2, 3]);
        s.table = Err("no rank-table ConfigMap".into());
        assert!(matches!(judge(&s), Judgement::NoTable(_)));
    }
}
