//! Names shared by the operator, the agent and the worker: labels, annotations, Pod
//! condition types, group condition types and their reasons ([`pod`], [`group`], as
//! enums), and the workers' environment ([`env`](mod@env)).
//!
//! One writer per field keeps the two controllers from racing: the operator writes the
//! labels, annotations and the group status; the agent writes the Pod conditions below
//! and `HcommNode`. Reasons are fixed CamelCase words, so people can search for them in
//! Events and dashboards can group by them.

pub mod ascend;
pub mod env;
pub mod group;
mod names;
pub mod pod;
pub mod secrets;
pub mod volcano;

pub use group::{GroupConditionType, GroupReason};
pub use names::UnknownName;
pub use pod::{PodConditionType, PodReason};

/// Label on every member Pod: the name of the `HcommGroup` it belongs to.
pub const LABEL_GROUP: &str = "hcomm.io/group";
/// Label on every member Pod: the member's index in the group (its first rank is
/// `index × devicesPerMember`).
pub const LABEL_MEMBER_INDEX: &str = "hcomm.io/member-index";
/// Label on every member Pod: the member's first rank.
pub const LABEL_RANK: &str = "hcomm.io/rank";
/// Label on every member Pod: the group's role (prefill, decode, generic).
pub const LABEL_ROLE: &str = "hcomm.io/role";
/// Label on every member Pod: the epoch at which the member was planned.
pub const LABEL_EPOCH: &str = "hcomm.io/epoch";
/// Label on every member Pod: the revision (hash of the group's template and weights) it
/// was made from; also the suffix of the group's ControllerRevision of that revision.
pub const LABEL_REVISION: &str = "hcomm.io/revision";
/// Label on a member Pod (operator-written) that keeps it a warm standby: verified,
/// weights-synced and joined to every epoch like any member, but its readiness gate held
/// False, so it takes no traffic (`spec.scaling.standby`). The operator removes it to
/// promote the member (the agent then opens the gate at once) and sets it to move a
/// serving member back to standby on a scale-in.
pub const LABEL_STANDBY: &str = "hcomm.io/standby";
/// The value of [`LABEL_STANDBY`] on a standby member.
pub const STANDBY_TRUE: &str = "true";
/// Node label the agent reads the node's super pod from (when no flag sets it).
pub const LABEL_SUPER_POD: &str = "hcomm.io/super-pod";
/// Node label the agent reads the node's rack from.
pub const LABEL_RACK: &str = "hcomm.io/rack";
/// Node label the agent reads the node's top-of-rack switch from.
pub const LABEL_SWITCH: &str = "hcomm.io/switch";
/// The finalizer (operator) that makes a group's deletion drain its members first.
pub const FINALIZER: &str = "hcomm.io/cleanup";
/// Annotation on the `HcommGroup` (operator-written): nodes where members failed recently,
/// comma separated, newest last; replacements avoid them when they can.
pub const ANNOTATION_AVOID_NODES: &str = "hcomm.io/avoid-nodes";

/// Label on objects the operator manages, per Kubernetes recommended labels.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGER_NAME: &str = "hcomm-operator";

/// Annotation the operator sets on a member Pod to ask its agent to drain it. The value
/// is the RFC 3339 time of the request; the drain deadline counts from it.
pub const ANNOTATION_DRAIN_REQUESTED: &str = "hcomm.io/drain-requested";
/// Annotation on a member Pod: the physical device ids assigned to it, comma separated,
/// in local-rank order (the agent verifies the devices it sees against it).
pub const ANNOTATION_DEVICES: &str = "hcomm.io/devices";
/// Annotation on a member Pod: the `spec.weights.digest` it was created for. A member whose
/// digest differs from the group's is replaced by a rolling update.
pub const ANNOTATION_WEIGHTS_DIGEST: &str = "hcomm.io/weights-digest";
/// Annotation on a member Pod (set it in the group's template): `local-api` makes the agent
/// hold the readiness gate until the worker says over the local API that it serves (its
/// weights are loaded) — the role a container readiness probe plays with a kubelet.
pub const ANNOTATION_WORKER_READINESS: &str = "hcomm.io/worker-readiness";
/// The value of [`ANNOTATION_WORKER_READINESS`] that makes the agent wait.
pub const WORKER_READINESS_LOCAL_API: &str = "local-api";

/// The kube-scheduler's Pod condition type (Kubernetes' own `v1.PodScheduled`).
pub const POD_SCHEDULED: &str = "PodScheduled";
/// The kube-scheduler's reason on [`POD_SCHEDULED`]`=False` for a Pod no node can take
/// (Kubernetes' `v1.PodReasonUnschedulable`); the group reports it under the same word,
/// [`GroupReason::Unschedulable`].
pub const SCHEDULER_UNSCHEDULABLE: &str = GroupReason::Unschedulable.as_str();

/// Pod condition (agent): [`PodConditionType::Verified`].
pub const POD_VERIFIED: &str = PodConditionType::Verified.as_str();
/// Pod condition (agent): [`PodConditionType::WeightsSynced`].
pub const POD_WEIGHTS_SYNCED: &str = PodConditionType::WeightsSynced.as_str();
/// Pod condition (agent): [`PodConditionType::Joined`].
pub const POD_JOINED: &str = PodConditionType::Joined.as_str();
/// Pod condition (agent) and readiness gate: [`PodConditionType::MemberReady`].
pub const POD_MEMBER_READY: &str = PodConditionType::MemberReady.as_str();
/// Pod condition (agent): [`PodConditionType::Drained`].
pub const POD_DRAINED: &str = PodConditionType::Drained.as_str();

/// The member Pod's readiness gate; the Pod turns Ready only when the agent sets it True.
pub const READINESS_GATE: &str = POD_MEMBER_READY;

/// Group condition: [`GroupConditionType::Ready`].
pub const CONDITION_READY: &str = GroupConditionType::Ready.as_str();
/// Group condition: [`GroupConditionType::Progressing`].
pub const CONDITION_PROGRESSING: &str = GroupConditionType::Progressing.as_str();
/// Group condition: [`GroupConditionType::Degraded`].
pub const CONDITION_DEGRADED: &str = GroupConditionType::Degraded.as_str();
/// Group condition: [`GroupConditionType::LinksHealthy`].
pub const CONDITION_LINKS_HEALTHY: &str = GroupConditionType::LinksHealthy.as_str();

/// Reasons used on group conditions and Events, as `&str` for call sites that take
/// strings; each is the [`GroupReason`] variant's `as_str()`.
pub mod reasons {
    use super::GroupReason;

    /// [`GroupReason::AllMembersReady`].
    pub const ALL_MEMBERS_READY: &str = GroupReason::AllMembersReady.as_str();
    /// [`GroupReason::ScalingOut`].
    pub const SCALING_OUT: &str = GroupReason::ScalingOut.as_str();
    /// [`GroupReason::ScalingIn`].
    pub const SCALING_IN: &str = GroupReason::ScalingIn.as_str();
    /// [`GroupReason::Stable`].
    pub const STABLE: &str = GroupReason::Stable.as_str();
    /// [`GroupReason::InvalidSpec`].
    pub const INVALID_SPEC: &str = GroupReason::InvalidSpec.as_str();
    /// [`GroupReason::InsufficientCapacity`].
    pub const INSUFFICIENT_CAPACITY: &str = GroupReason::InsufficientCapacity.as_str();
    /// [`GroupReason::VerificationFailed`].
    pub const VERIFICATION_FAILED: &str = GroupReason::VerificationFailed.as_str();
    /// [`GroupReason::DrainTimedOut`].
    pub const DRAIN_TIMED_OUT: &str = GroupReason::DrainTimedOut.as_str();
    /// [`GroupReason::Drained`].
    pub const DRAINED: &str = GroupReason::Drained.as_str();
    /// [`GroupReason::LinkDegraded`].
    pub const LINK_DEGRADED: &str = GroupReason::LinkDegraded.as_str();
    /// [`GroupReason::LinkDown`].
    pub const LINK_DOWN: &str = GroupReason::LinkDown.as_str();
    /// [`GroupReason::AllLinksUp`].
    pub const ALL_LINKS_UP: &str = GroupReason::AllLinksUp.as_str();
    /// [`GroupReason::NoRecentProbe`].
    pub const NO_RECENT_PROBE: &str = GroupReason::NoRecentProbe.as_str();
    /// [`GroupReason::LinksRecovered`].
    pub const LINKS_RECOVERED: &str = GroupReason::LinksRecovered.as_str();
    /// [`GroupReason::Healthy`].
    pub const HEALTHY: &str = GroupReason::Healthy.as_str();
}

#[cfg(test)]
mod tests;
