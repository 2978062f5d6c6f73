//! Member phase, derived from the member Pod alone (pure).
//!
//! The agent writes Pod conditions (`hcomm.io/verified`, `weights-synced`, `joined`,
//! `member-ready`, `drained`); the operator writes the drain-request annotation. This module
//! turns one Pod into an [`ObservedMember`], the planner's view of it. Nothing here does I/O.

use hcomm_crds::MemberPhase;
use hcomm_crds::contract::ascend::{DeviceAllocation, configuration_annotation};
use hcomm_crds::contract::{
    ANNOTATION_DRAIN_REQUESTED, ANNOTATION_WEIGHTS_DIGEST, GroupReason, LABEL_EPOCH,
    LABEL_MEMBER_INDEX, LABEL_STANDBY, POD_DRAINED, POD_JOINED, POD_MEMBER_READY, POD_VERIFIED,
    POD_WEIGHTS_SYNCED, PodReason, STANDBY_TRUE,
};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;

/// The planner's view of one member Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedMember {
    /// The Pod name.
    pub name: String,
    /// The member index (label `hcomm.io/member-index`).
    pub index: i32,
    /// The epoch the member was planned at (label `hcomm.io/epoch`).
    pub epoch: i64,
    /// The node: `spec.nodeName` once bound, else the node its required affinity names
    /// (where the planner put it).
    pub node: Option<String>,
    /// Physical device ids the device plugin allocated (its allocation annotation), in
    /// local-rank order; empty until the annotation is written.
    pub devices: Vec<i32>,
    /// The device plugin's allocation annotation: `None` until written, `Err` when it
    /// cannot be read.
    pub allocation: Option<Result<DeviceAllocation, String>>,
    /// Why the scheduler cannot place the Pod (`PodScheduled=False`, `Unschedulable`).
    pub unschedulable: Option<String>,
    /// Why the member is held back or was given up, as a group reason (allocation or
    /// scheduling); set by `crate::allocation`, not derived from the Pod.
    pub blocked: Option<GroupReason>,
    /// The derived phase.
    pub phase: MemberPhase,
    /// Verification or joining failed for good (the member must be replaced).
    pub failed: bool,
    /// Why, when the member is failed or stuck.
    pub message: Option<String>,
    /// When the operator asked the member to drain.
    pub drain_requested_at: Option<Timestamp>,
    /// The agent reported `hcomm.io/drained=True`.
    pub drained: bool,
    /// The readiness gate `hcomm.io/member-ready` is True.
    pub serving: bool,
    /// The operator labelled it a warm standby (`hcomm.io/standby`): the intent. Whether
    /// the agent holds it so is its phase ([`MemberPhase::Standby`]).
    pub standby: bool,
    /// The weights digest it was created for (annotation `hcomm.io/weights-digest`).
    pub weights_digest: Option<String>,
    /// The revision it was made from (label `hcomm.io/revision`; see the revision module).
    pub revision: Option<String>,
    /// Its node is lost to the data network (from the other members' link probes; set by
    /// the reconciler, not derived from the Pod).
    pub unreachable: bool,
    /// The Pod has a deletion timestamp.
    pub deleting: bool,
    /// The Pod phase is Running.
    pub running: bool,
    /// When the Pod was created.
    pub created_at: Option<Timestamp>,
}

impl ObservedMember {
    /// A Ready member `g-<index>` for tests: running, serving, no devices.
    #[cfg(test)]
    pub fn ready_for_test(index: i32) -> Self {
        Self {
            name: format!("g-{index}"),
            index,
            epoch: 1,
            node: Some("n".into()),
            devices: Vec::new(),
            allocation: None,
            unschedulable: None,
            blocked: None,
            phase: MemberPhase::Ready,
            failed: false,
            message: None,
            drain_requested_at: None,
            drained: false,
            serving: true,
            standby: false,
            weights_digest: None,
            revision: None,
            unreachable: false,
            deleting: false,
            running: true,
            created_at: Some(Timestamp::UNIX_EPOCH),
        }
    }

    /// Whether the member belongs to the planned member set (not on its way out).
    pub fn in_set(&self) -> bool {
        self.drain_requested_at.is_none() && !self.deleting
    }
}

/// Whether a reason on `hcomm.io/joined=False` means the member will never join
/// ([`PodReason::TERMINAL_JOIN`]); any `hcomm.io/verified=False` is terminal as well. A
/// reason this operator does not know (a newer agent) is not terminal: the member stays
/// Joining and the join deadline decides.
pub fn is_terminal_join_reason(reason: &str) -> bool {
    reason
        .parse::<PodReason>()
        .is_ok_and(|r| PodReason::TERMINAL_JOIN.contains(&r))
}

/// Reads a member Pod of a group whose members request `resource` (the allocation
/// annotation depends on it); `None` when it lacks the member-index label (not a member).
pub fn observe(pod: &Pod, resource: &str) -> Option<ObservedMember> {
    let meta = &pod.metadata;
    let labels = meta.labels.as_ref()?;
    let index = labels.get(LABEL_MEMBER_INDEX)?.parse().ok()?;
    let epoch = labels
        .get(LABEL_EPOCH)
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    let annotations = meta.annotations.clone().unwrap_or_default();
    let allocation = annotations
        .get(configuration_annotation(resource))
        .map(|text| DeviceAllocation::parse(text).map_err(|e| e.to_string()));
    let devices = match &allocation {
        Some(Ok(a)) => a
            .physical_ids()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|id| i32::try_from(id).ok())
            .collect(),
        _ => Vec::new(),
    };
    let drain_requested_at = annotations
        .get(ANNOTATION_DRAIN_REQUESTED)
        .map(|t| t.parse().unwrap_or(Timestamp::UNIX_EPOCH));
    let conditions: &[PodCondition] = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let pod_phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let running = pod_phase == Some("Running");
    let unschedulable = conditions
        .iter()
        .find(|c| {
            c.type_ == POD_SCHEDULED
                && c.status == "False"
                && c.reason.as_deref() == Some(UNSCHEDULABLE)
        })
        .map(|c| {
            c.message
                .clone()
                .unwrap_or_else(|| UNSCHEDULABLE.to_owned())
        });
    let (mut phase, mut failed, mut message) =
        derive_phase(conditions, running, drain_requested_at.is_some());
    // A Pod that terminated (evicted, crashed with restartPolicy Never) never comes back:
    // the member is failed and gets replaced.
    if let Some(ended @ ("Failed" | "Succeeded")) = pod_phase {
        failed = true;
        message.get_or_insert_with(|| format!("the Pod is {ended}"));
        if drain_requested_at.is_none() {
            phase = MemberPhase::Failed;
        }
    }
    Some(ObservedMember {
        name: meta.name.clone()?,
        index,
        epoch,
        node: pod.spec.as_ref().and_then(crate::affinity::node_of),
        devices,
        allocation,
        unschedulable,
        blocked: None,
        phase,
        failed,
        message,
        drain_requested_at,
        drained: status_of(conditions, POD_DRAINED) == Some("True"),
        serving: status_of(conditions, POD_MEMBER_READY) == Some("True"),
        standby: labels.get(LABEL_STANDBY).map(String::as_str) == Some(STANDBY_TRUE),
        weights_digest: annotations.get(ANNOTATION_WEIGHTS_DIGEST).cloned(),
        // Made from which revision (the revision module); `None` for a Pod made before
        // revisions existed.
        revision: pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(hcomm_crds::contract::LABEL_REVISION).cloned()),
        unreachable: false,
        deleting: meta.deletion_timestamp.is_some(),
        running,
        created_at: meta.creation_timestamp.as_ref().map(|t| t.0),
    })
}

/// The Pod condition the scheduler writes.
const POD_SCHEDULED: &str = hcomm_crds::contract::POD_SCHEDULED;
/// The kube-scheduler's reason on `PodScheduled=False` for a Pod no node can take (the
/// group reason of the same name is spelled after it on purpose).
const UNSCHEDULABLE: &str = hcomm_crds::contract::SCHEDULER_UNSCHEDULABLE;

/// The phase from the Pod conditions, whether the Pod runs, and whether a drain was
/// requested. Returns (phase, failed, message).
///
/// Order matters: a drain request wins (Draining → Leaving); then failure (verified False,
/// or joined False with a terminal reason); then the readiness gate (True: Ready; held
/// False by the agent for a warm standby: Standby); then the forward phases Pending →
/// Verifying → Syncing → Joining.
pub fn derive_phase(
    conditions: &[PodCondition],
    running: bool,
    drain_requested: bool,
) -> (MemberPhase, bool, Option<String>) {
    let verified = find(conditions, POD_VERIFIED);
    let joined = find(conditions, POD_JOINED);
    let failure = match (verified, joined) {
        (Some(v), _) if v.status == "False" => Some(v),
        (_, Some(j))
            if j.status == "False"
                && is_terminal_join_reason(j.reason.as_deref().unwrap_or_default()) =>
        {
            Some(j)
        }
        _ => None,
    };
    let failed = failure.is_some();
    let message = failure.map(describe);
    if drain_requested {
        let phase = if status_of(conditions, POD_DRAINED) == Some("True") {
            MemberPhase::Leaving
        } else {
            MemberPhase::Draining
        };
        return (phase, failed, message);
    }
    if failed {
        return (MemberPhase::Failed, true, message);
    }
    let member_ready = find(conditions, POD_MEMBER_READY);
    let phase = if member_ready.is_some_and(|c| c.status == "True") {
        MemberPhase::Ready
    } else if member_ready.is_some_and(|c| c.reason.as_deref() == Some(PodReason::Standby.as_str()))
        && running
    {
        MemberPhase::Standby
    } else if !running {
        MemberPhase::Pending
    } else if status_of(conditions, POD_VERIFIED) != Some("True") {
        MemberPhase::Verifying
    } else if status_of(conditions, POD_WEIGHTS_SYNCED) != Some("True") {
        MemberPhase::Syncing
    } else {
        MemberPhase::Joining
    };
    (phase, false, None)
}

fn find<'a>(conditions: &'a [PodCondition], type_: &str) -> Option<&'a PodCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn status_of<'a>(conditions: &'a [PodCondition], type_: &str) -> Option<&'a str> {
    find(conditions, type_).map(|c| c.status.as_str())
}

fn describe(condition: &PodCondition) -> String {
    format!(
        "{} is False ({}): {}",
        condition.type_,
        condition.reason.as_deref().unwrap_or("NoReason"),
        condition.message.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::ascend::{ANNOTATION_ASCEND_910_CONFIGURATION, RESOURCE_ASCEND910};

    fn cond(type_: &str, status: &str, reason: &str) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..PodCondition::default()
        }
    }

    #[test]
    fn a_pod_that_does_not_run_is_pending() {
        assert_eq!(derive_phase(&[], false, false).0, MemberPhase::Pending);
    }

    #[test]
    fn phases_follow_the_agent_conditions_forward() {
        let mut c = vec![];
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Verifying);
        c.push(cond(POD_VERIFIED, "True", PodReason::Verified.as_str()));
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Syncing);
        c.push(cond(POD_WEIGHTS_SYNCED, "True", "Synced"));
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Joining);
        c.push(cond(POD_JOINED, "True", PodReason::Joined.as_str()));
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Joining);
        c.push(cond(POD_MEMBER_READY, "True", "Ready"));
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Ready);
        assert_eq!(derive_phase(&c, true, true).0, MemberPhase::Draining);
        c.push(cond(POD_DRAINED, "True", "Drained"));
        assert_eq!(derive_phase(&c, true, true).0, MemberPhase::Leaving);
    }

    #[test]
    fn a_gate_the_agent_holds_for_a_standby_is_standby_and_opening_it_is_ready() {
        let mut c = vec![
            cond(POD_VERIFIED, "True", PodReason::Verified.as_str()),
            cond(POD_WEIGHTS_SYNCED, "True", "Synced"),
            cond(POD_JOINED, "True", PodReason::Joined.as_str()),
            cond(POD_MEMBER_READY, "False", PodReason::Standby.as_str()),
        ];
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Standby);
        // Held closed for another reason (the worker is not serving yet): still joining.
        c[3] = cond(POD_MEMBER_READY, "False", PodReason::NotReady.as_str());
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Joining);
        c[3] = cond(POD_MEMBER_READY, "True", PodReason::MemberReady.as_str());
        assert_eq!(derive_phase(&c, true, false).0, MemberPhase::Ready);
        // A drain request wins over standby, as over Ready.
        c[3] = cond(POD_MEMBER_READY, "False", PodReason::Standby.as_str());
        assert_eq!(derive_phase(&c, true, true).0, MemberPhase::Draining);
    }

    #[test]
    fn verified_false_is_failed_with_the_agent_reason_in_the_message() {
        let c = vec![cond(
            POD_VERIFIED,
            "False",
            PodReason::NicUnreachable.as_str(),
        )];
        let (phase, failed, message) = derive_phase(&c, true, false);
        assert_eq!(phase, MemberPhase::Failed);
        assert!(failed);
        assert!(
            message
                .unwrap()
                .contains(PodReason::NicUnreachable.as_str())
        );
    }

    #[test]
    fn joined_false_is_failed_only_for_terminal_reasons() {
        let verified = cond(POD_VERIFIED, "True", PodReason::Verified.as_str());
        let synced = cond(POD_WEIGHTS_SYNCED, "True", "Synced");
        let waiting = vec![
            verified.clone(),
            synced.clone(),
            cond(POD_JOINED, "False", "Joining"),
        ];
        assert_eq!(derive_phase(&waiting, true, false).0, MemberPhase::Joining);
        let broken = vec![
            verified,
            synced,
            cond(POD_JOINED, "False", PodReason::JoinFailed.as_str()),
        ];
        assert_eq!(derive_phase(&broken, true, false).0, MemberPhase::Failed);
    }

    #[test]
    fn terminal_join_reasons_come_from_the_contract_enum() {
        for reason in PodReason::TERMINAL_JOIN {
            assert!(is_terminal_join_reason(reason.as_str()), "{reason}");
        }
        assert!(!is_terminal_join_reason(PodReason::NotReady.as_str()));
        assert!(!is_terminal_join_reason("SomethingNewer"));
    }

    #[test]
    fn a_terminated_pod_is_a_failed_member() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-0-e1", "labels": {LABEL_MEMBER_INDEX: "0", LABEL_EPOCH: "1"}},
            "status": {"phase": "Failed"}
        }))
        .unwrap();
        let member = observe(&pod, RESOURCE_ASCEND910).unwrap();
        assert_eq!((member.phase, member.failed), (MemberPhase::Failed, true));
        assert_eq!(member.message.as_deref(), Some("the Pod is Failed"));
    }

    #[test]
    fn devices_come_from_the_device_plugins_allocation_in_its_order() {
        let allocation = r#"{"pod_name":"g-0-e1","server_id":"u","host_ip":"10.0.0.1",
            "devices":[{"device_id":"3","device_ip":"192.168.0.3"},{"device_id":"1","device_ip":"192.168.0.1"}]}"#;
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-0-e1", "labels": {LABEL_MEMBER_INDEX: "0"},
                         "annotations": {ANNOTATION_ASCEND_910_CONFIGURATION: allocation}},
            "spec": {"containers": [], "nodeName": "n1"}
        }))
        .unwrap();
        let member = observe(&pod, RESOURCE_ASCEND910).unwrap();
        assert_eq!(member.devices, vec![3, 1]);
        assert_eq!(member.node.as_deref(), Some("n1"));
        assert!(matches!(member.allocation, Some(Ok(_))));
        let broken: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-0-e1", "labels": {LABEL_MEMBER_INDEX: "0"},
                         "annotations": {ANNOTATION_ASCEND_910_CONFIGURATION: "{"}}
        }))
        .unwrap();
        let member = observe(&broken, RESOURCE_ASCEND910).unwrap();
        assert!(member.devices.is_empty());
        assert!(matches!(member.allocation, Some(Err(_))));
    }

    #[test]
    fn a_pod_the_scheduler_cannot_place_says_why_and_an_unbound_pod_has_its_planned_node() {
        let mut spec = k8s_openapi::api::core::v1::PodSpec::default();
        crate::affinity::require_node(&mut spec, "n7");
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-0-e1", "labels": {LABEL_MEMBER_INDEX: "0"}},
            "status": {"phase": "Pending", "conditions": [{"type": POD_SCHEDULED, "status": "False",
                "reason": UNSCHEDULABLE, "message": "0/3 nodes are available: 3 Insufficient huawei.com/Ascend910."}]}
        }))
        .unwrap();
        pod.spec = Some(spec);
        let member = observe(&pod, RESOURCE_ASCEND910).unwrap();
        assert_eq!(member.node.as_deref(), Some("n7"));
        assert!(member.unschedulable.unwrap().contains("Insufficient"));
        assert_eq!(member.phase, MemberPhase::Pending);
    }
}
