//! What the operator writes on `HcommGroup.status.conditions` and in its Events: the
//! condition types and the reasons on them. The agent's health probe reuses the link
//! reasons for its own Events.

use super::names::string_enum;

string_enum! {
    /// The condition types of `HcommGroup.status.conditions`.
    pub enum GroupConditionType ("group condition type") {
        /// Every desired member is Ready.
        Ready => "Ready",
        /// Membership is changing (members joining or draining).
        Progressing => "Progressing",
        /// Something needs attention (a member failed, a drain timed out, a link is
        /// degraded).
        Degraded => "Degraded",
        /// Every link between the nodes of the group's members answered its agents' latest
        /// probe in time. Derived from `HcommNode.status.linkTests`; `Unknown` when a link
        /// has no recent probe result (a stale result proves nothing).
        LinksHealthy => "LinksHealthy",
        /// The group's Volcano PodGroup is in place with the current `minMember` (only on
        /// groups that set `spec.scheduling.podGroup`).
        PodGroupReady => "PodGroupReady",
    }
}

string_enum! {
    /// Reasons on group conditions and on the operator's (and health probe's) Events.
    pub enum GroupReason ("group condition or Event reason") {
        /// All desired members are Ready.
        AllMembersReady => "AllMembersReady",
        /// Members are joining the group.
        ScalingOut => "ScalingOut",
        /// Members are draining before removal.
        ScalingIn => "ScalingIn",
        /// The group matches its spec.
        Stable => "Stable",
        /// The spec cannot be planned (e.g. not enough devices); waits for an edit.
        InvalidSpec => "InvalidSpec",
        /// Not enough nodes or devices to place the desired members.
        InsufficientCapacity => "InsufficientCapacity",
        /// Members keep failing; new members wait out a growing delay (the failed
        /// members' messages and Events say why they failed).
        FailureBackoff => "FailureBackoff",
        /// A member failed verification (NIC, link, devices, versions, shared memory).
        VerificationFailed => "VerificationFailed",
        /// A drain did not finish within `drainTimeoutSeconds`; the member was removed
        /// anyway.
        DrainTimedOut => "DrainTimedOut",
        /// A member finished draining.
        Drained => "Drained",
        /// The health probe found a slow or dead link (agent Events); on the group, a link
        /// that answers but slower than the operator's threshold.
        LinkDegraded => "LinkDegraded",
        /// A link between two member nodes did not answer its latest recent probe.
        LinkDown => "LinkDown",
        /// Every link between member nodes answered its latest probe in time.
        AllLinksUp => "AllLinksUp",
        /// A link between member nodes has no probe result recent enough to judge it.
        NoRecentProbe => "NoRecentProbe",
        /// The links that were down or slow answer in time again (Event).
        LinksRecovered => "LinksRecovered",
        /// Nothing is wrong.
        Healthy => "Healthy",
        /// The group moved to a new epoch (Event).
        EpochChanged => "EpochChanged",
        /// A member Pod was created (Event).
        MemberCreated => "MemberCreated",
        /// A member was asked to drain (Event).
        DrainRequested => "DrainRequested",
        /// A member Pod was deleted (Event).
        MemberDeleted => "MemberDeleted",
        /// The scheduler cannot place a member Pod (`PodScheduled=False`, `Unschedulable`):
        /// no node with the chosen hostname has the NPUs free, a taint or quota refuses it.
        Unschedulable => "Unschedulable",
        /// The API server refused to create a member Pod (a full `ResourceQuota`, Pod
        /// Security admission, a policy webhook): `Degraded=True` with its message and a
        /// Warning Event; the create is tried again at a growing interval, at once after a
        /// spec edit. The name a ReplicaSet uses for the same thing.
        FailedCreate => "FailedCreate",
        /// The API server refused another of the operator's writes for the group (its
        /// PodDisruptionBudget, rank-table ConfigMap, ControllerRevision or a member's
        /// label: a quota, an admission webhook, missing RBAC): `Degraded=True` with its
        /// words and a Warning Event; the round is tried again every 30 s.
        RequestRefused => "RequestRefused",
        /// The epoch's rank table is held back: a member has no device-plugin allocation
        /// annotation yet.
        WaitingForAllocation => "WaitingForAllocation",
        /// A member's device-plugin allocation annotation did not come within the join
        /// deadline, or cannot be used (unreadable, wrong device count); it is replaced.
        AllocationMissing => "AllocationMissing",
        /// The rank table built from the allocations breaks a rule HCCL applies on load; it
        /// is not written.
        InvalidRankTable => "InvalidRankTable",
        /// The group's Volcano PodGroup was created or updated.
        PodGroupApplied => "PodGroupApplied",
        /// The cluster has no `scheduling.volcano.sh/v1beta1` PodGroup resource (Volcano
        /// is not installed); members are scheduled one by one.
        PodGroupCrdMissing => "PodGroupCrdMissing",
        /// Writing the group's Volcano PodGroup failed (e.g. RBAC); retried.
        PodGroupFailed => "PodGroupFailed",
        /// The epoch's rank table does not fit the rank-table ConfigMap (Kubernetes refuses a
        /// ConfigMap over 1 MiB; about 16,000 ranks with device IPs): it is not written.
        /// Fewer members or fewer devices per member fit.
        RankTableTooLarge => "RankTableTooLarge",
        /// Members of an older revision are being replaced by members of the new one
        /// (`Progressing=True`).
        RollingUpdate => "RollingUpdate",
        /// Members below `updateStrategy.rollingUpdate.partition` keep their older revision;
        /// every member at or above it runs the new one.
        PartitionPaused => "PartitionPaused",
        /// A member of the new revision was not Ready within
        /// `updateStrategy.progressDeadlineSeconds` (e.g. its image cannot be pulled): the
        /// rollout stopped (`Progressing=False`), the old members keep serving.
        ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
        /// A member of the new revision failed (e.g. its weights did not match the digest):
        /// the rollout stopped (`Progressing=False`), the old members keep serving.
        RevisionFailed => "RevisionFailed",
    }
}
