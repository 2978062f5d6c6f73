//! `diagnose`'s NPU allocation row: for the member Pod asked about (`--pod`), the devices
//! the kubelet allocated (PodResources, read from `--pod-resources-socket`), the device
//! plugin's allocation annotation and the rank table's devices for the member, and whether
//! they agree — the same judgement as the member's verification
//! ([`crate::member::allocation::decide`]), so the row and the Pod's `AllocationMismatch`
//! or `AllocationUnknown` never tell different stories. Reading is I/O under the API
//! deadline ([`read`]); the row is pure ([`check`]).

use std::path::Path;
use std::time::Duration;

use hcomm_kubelet::PodResourcesClient;

use super::checks::{Finding, Outcome};
use super::cluster::Objects;
use super::facts::Facts;
use crate::member::allocation::{
    AllocationFacts, AllocationOutcome, NpuRequest, decide, member_entries,
};
use crate::member::ranktable::{self, server_of};

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

/// Reads the allocation of the Pod in `objects`; None when there is no Pod or it requests
/// no NPU resource.
pub async fn read(objects: &Objects, socket: &Path, deadline: Duration) -> Option<AllocationSeen> {
    let spec = crate::member::spec::from_pod(objects.pod.as_ref()?)?;
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
    let json = objects
        .rank_table
        .as_ref()
        .and_then(|c| c.data.as_ref()?.get(hcomm_crds::rank_table::KEY_RANK_TABLE));
    let table = match json {
        None => Err("no rank-table ConfigMap".to_owned()),
        Some(j) => ranktable::parse(j).map(|t| {
            member_entries(
                server_of(&t, &spec.node, None).as_ref(),
                spec.first_rank,
                request.count,
                &allocated,
            )
        }),
    };
    Some(AllocationSeen {
        pod: spec.key(),
        request,
        kubelet,
        annotation: spec.device_allocation,
        table,
    })
}

/// The row (pure).
pub fn check(f: &Facts) -> Finding {
    let row = Finding {
        id: "npu-allocation",
        symptom: "errors on new members",
        cause: "the NPUs the kubelet allocated, the device plugin's annotation and the rank table disagree",
        checked: "kubelet PodResources vs the device plugin's annotation vs the rank table".into(),
        outcome: Outcome::Pass,
        detail: String::new(),
    };
    let with = |outcome, detail: String| Finding {
        outcome,
        detail,
        ..row.clone()
    };
    let Some(seen) = &f.allocation else {
        return with(
            Outcome::Skip,
            "no member Pod requesting an NPU resource (--pod)".into(),
        );
    };
    let kubelet = match &seen.kubelet {
        Ok(k) => k.as_deref(),
        Err(e) => return with(Outcome::Fail, format!("{}: {e}", seen.pod)),
    };
    let table = match &seen.table {
        Ok(t) => t.as_slice(),
        Err(e) => return with(Outcome::Skip, format!("{}: {e}", seen.pod)),
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
            with(
                Outcome::Pass,
                format!(
                    "{}: {} × {} agree, rank:device [{}]",
                    seen.pod,
                    seen.request.count,
                    seen.request.resource,
                    e.join(",")
                ),
            )
        }
        AllocationOutcome::Unknown(m) => with(Outcome::Warn, format!("{}: {m}", seen.pod)),
        AllocationOutcome::Mismatch(m) => with(Outcome::Fail, format!("{}: {m}", seen.pod)),
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

    fn row(a: Option<AllocationSeen>) -> Finding {
        check(&Facts {
            allocation: a,
            ..Facts::default()
        })
    }

    #[test]
    fn the_row_passes_when_all_agree_and_fails_naming_both_sides_otherwise() {
        let ok = row(Some(seen(&[2, 3], &[2, 3])));
        assert_eq!(ok.outcome, Outcome::Pass, "{}", ok.detail);
        assert!(ok.detail.contains("0:2,1:3"), "{}", ok.detail);
        let bad = row(Some(seen(&[2, 3], &[2, 4])));
        assert_eq!(bad.outcome, Outcome::Fail);
        assert!(bad.detail.contains("[2,3]") && bad.detail.contains("[2,4]"));
    }

    #[test]
    fn no_npu_pod_skips_and_an_unreadable_kubelet_fails() {
        assert_eq!(row(None).outcome, Outcome::Skip);
        let mut s = seen(&[2, 3], &[2, 3]);
        s.kubelet = Err("socket missing".into());
        let r = row(Some(s));
        assert_eq!(r.outcome, Outcome::Fail);
        assert!(r.detail.contains("socket missing"));
        let mut s = seen(&[2, 3], &[2, 3]);
        s.annotation = None;
        assert_eq!(row(Some(s)).outcome, Outcome::Warn);
    }
}
