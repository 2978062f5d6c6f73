//! The allocation check of a member's verification (I/O around the pure
//! [`super::allocation::decide`]): asks the kubelet through the [`super::ports::Allocations`]
//! port which NPUs the Pod got, reads the device plugin's annotation from the Pod as the
//! watch last delivered it, takes the member's entries from the rank table, and repeats
//! while either record is missing — the plugin writes its annotation right after
//! admission, so the first look can be early — until the verification deadline. A Pod
//! that requests no NPU resource (CPU nodes) is not checked.
//!
//! It also hands the per-process (rank, device) pairs to the worker's assignment
//! (`Run::processes`).

use std::time::Duration;

use hcomm_crds::contract::PodReason;
use hcomm_crds::contract::ascend::physical_id_of;
use hcomm_crds::local_api::ProcessAssignment;
use tokio::time::Instant;

use super::allocation::{AllocationFacts, AllocationOutcome, decide, member_entries};
use super::ranktable::{RankTable, member_ranks, server_of};
use super::state::Event;
use super::task::Run;

/// How often the kubelet is asked again while the allocation is not known.
pub const ASK_AGAIN: Duration = Duration::from_millis(250);

fn failed(reason: PodReason, message: String) -> Event {
    Event::Verified {
        ok: false,
        reason,
        message,
    }
}

impl Run {
    /// Checks the member's NPU allocation against `table` within `deadline`: None when it
    /// agrees (or the Pod requests no NPUs), else the failed verification.
    pub(super) async fn check_allocation(
        &mut self,
        table: &RankTable,
        deadline: Duration,
    ) -> Option<Event> {
        self.npu_entries = None;
        let until = Instant::now() + deadline;
        loop {
            // The plugin's annotation arrives as a Pod update: use the latest Pod.
            if let Some(s) = self.spec_rx.borrow().clone() {
                self.spec = s;
            }
            let request = self.spec.npu.clone()?;
            let asked = tokio::time::timeout_at(
                until,
                self.ports.allocations.kubelet_devices(
                    &self.spec.namespace,
                    &self.spec.pod,
                    &request.resource,
                ),
            )
            .await;
            let (kubelet, trouble) = match asked {
                Ok(Ok(ids)) => (ids, None),
                Ok(Err(e)) => (None, Some(e.to_string())),
                Err(_) => (None, Some("the kubelet did not answer".to_owned())),
            };
            let allocated: Vec<u32> = kubelet
                .iter()
                .flatten()
                .filter_map(|id| physical_id_of(id))
                .collect();
            let entries = member_entries(
                table,
                &self.cfg.node_name,
                self.spec.first_rank,
                request.count,
                &allocated,
            );
            let outcome = decide(AllocationFacts {
                request: &request,
                kubelet: kubelet.as_deref(),
                annotation: self.spec.device_allocation.as_deref(),
                table: &entries,
            });
            let message = match outcome {
                AllocationOutcome::Agreed(entries) => {
                    self.npu_entries = Some(entries);
                    return None;
                }
                AllocationOutcome::Mismatch(m) => {
                    return Some(self.allocation_failed(PodReason::AllocationMismatch, m));
                }
                AllocationOutcome::Unknown(m) => match trouble {
                    Some(t) => format!("{m}: {t}"),
                    None => m,
                },
            };
            let now = Instant::now();
            if now >= until {
                return Some(self.allocation_failed(
                    PodReason::AllocationUnknown,
                    format!("{message} (asked for {deadline:?})"),
                ));
            }
            tokio::time::sleep(ASK_AGAIN.min(until - now)).await;
        }
    }

    fn allocation_failed(&self, reason: PodReason, message: String) -> Event {
        self.metrics
            .verifications
            .with_label_values(&[reason.as_str()])
            .inc();
        tracing::info!(reason = reason.as_str(), %message, "allocation check");
        failed(reason, message)
    }

    /// The member's local processes for its assignment: from the checked NPU allocation,
    /// else (CPU nodes) from the rank table's entries on the planned devices.
    pub(super) fn processes(&self) -> Vec<ProcessAssignment> {
        if let Some(entries) = &self.npu_entries {
            return ProcessAssignment::from_entries(entries);
        }
        let (Some((table, _)), Some(plan)) = (&self.table, &self.plan) else {
            return Vec::new();
        };
        let ip = self.chosen.as_ref().map(|c| c.ip.to_string());
        let Some(server) = server_of(table, &self.cfg.node_name, ip.as_deref()) else {
            return Vec::new();
        };
        let entries: Vec<(u32, u32)> = member_ranks(&server, &plan.devices_in_rank_order)
            .into_iter()
            .filter_map(|(rank, dev)| Some((rank, u32::try_from(dev).ok()?)))
            .collect();
        ProcessAssignment::from_entries(&entries)
    }
}
