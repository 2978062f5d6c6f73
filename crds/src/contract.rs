//! Names shared by the operator, the agent and the worker: labels, annotations, Pod
//! condition types, group condition types and their reasons.
//!
//! One writer per field keeps the two controllers from racing: the operator writes the
//! labels, annotations and the group status; the agent writes the Pod conditions below
//! and `HcommNode`. Reasons are fixed CamelCase words, so people can search for them in
//! Events and dashboards can group by them.

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

/// Pod condition (agent): the data NIC, links, device mapping, versions and shared memory
/// were verified.
pub const POD_VERIFIED: &str = "hcomm.io/verified";
/// Pod condition (agent): the model weights are in place and verified.
pub const POD_WEIGHTS_SYNCED: &str = "hcomm.io/weights-synced";
/// Pod condition (agent): the member is part of the group's communication domain.
pub const POD_JOINED: &str = "hcomm.io/joined";
/// Pod condition (agent) and readiness gate: the member may receive traffic.
pub const POD_MEMBER_READY: &str = "hcomm.io/member-ready";
/// Pod condition (agent): no requests are in flight and the member has left the domain.
pub const POD_DRAINED: &str = "hcomm.io/drained";

/// The member Pod's readiness gate; the Pod turns Ready only when the agent sets it True.
pub const READINESS_GATE: &str = POD_MEMBER_READY;

/// Group condition: every desired member is Ready.
pub const CONDITION_READY: &str = "Ready";
/// Group condition: membership is changing (members joining or draining).
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Group condition: something needs attention (a member failed, a drain timed out, a
/// link is degraded).
pub const CONDITION_DEGRADED: &str = "Degraded";
/// Group condition: every link between the nodes of the group's members answered its
/// agents' latest probe in time. The operator derives it from `HcommNode.status.linkTests`;
/// `Unknown` when a link has no recent probe result (a stale result proves nothing).
pub const CONDITION_LINKS_HEALTHY: &str = "LinksHealthy";

/// Reasons used on group conditions and Events.
pub mod reasons {
    /// All desired members are Ready.
    pub const ALL_MEMBERS_READY: &str = "AllMembersReady";
    /// Members are joining the group.
    pub const SCALING_OUT: &str = "ScalingOut";
    /// Members are draining before removal.
    pub const SCALING_IN: &str = "ScalingIn";
    /// The group matches its spec.
    pub const STABLE: &str = "Stable";
    /// The spec cannot be planned (e.g. not enough devices); waits for an edit.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Not enough nodes or devices to place the desired members.
    pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
    /// A member failed verification (NIC, link, devices, versions, shared memory).
    pub const VERIFICATION_FAILED: &str = "VerificationFailed";
    /// A drain did not finish within `drainTimeoutSeconds`; the member was removed anyway.
    pub const DRAIN_TIMED_OUT: &str = "DrainTimedOut";
    /// A member finished draining.
    pub const DRAINED: &str = "Drained";
    /// The health probe found a slow or dead link (agent Events); on the group, a link
    /// that answers but slower than the operator's threshold.
    pub const LINK_DEGRADED: &str = "LinkDegraded";
    /// A link between two member nodes did not answer its latest recent probe.
    pub const LINK_DOWN: &str = "LinkDown";
    /// Every link between member nodes answered its latest probe in time.
    pub const ALL_LINKS_UP: &str = "AllLinksUp";
    /// A link between member nodes has no probe result recent enough to judge it.
    pub const NO_RECENT_PROBE: &str = "NoRecentProbe";
    /// The links that were down or slow answer in time again (Event).
    pub const LINKS_RECOVERED: &str = "LinksRecovered";
    /// Nothing is wrong.
    pub const HEALTHY: &str = "Healthy";
}
