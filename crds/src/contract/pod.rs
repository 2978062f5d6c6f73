//! What the agent writes on member Pods: its condition types (one of them the readiness
//! gate) and the reasons on them, which are also the reasons of the agent's Events.
//! The operator reads them back to derive each member's phase.

use super::names::string_enum;

string_enum! {
    /// The Pod condition types the agent owns.
    pub enum PodConditionType ("Pod condition type") {
        /// The data NIC, links, device mapping, versions and shared memory were verified.
        Verified => "hcomm.io/verified",
        /// The model weights are in place and verified.
        WeightsSynced => "hcomm.io/weights-synced",
        /// The member is part of the group's communication domain.
        Joined => "hcomm.io/joined",
        /// The readiness gate: the member may receive traffic.
        MemberReady => "hcomm.io/member-ready",
        /// No requests are in flight and the member has left the domain.
        Drained => "hcomm.io/drained",
    }
}

string_enum! {
    /// Reasons the agent writes on its Pod conditions and Events. Fixed CamelCase words, so
    /// people can search for them and the operator can tell a terminal failure from a
    /// transient one.
    pub enum PodReason ("Pod condition reason") {
        /// Verification passed.
        Verified => "Verified",
        /// The data NIC cannot reach a peer.
        NicUnreachable => "NicUnreachable",
        /// No interface matches the data network.
        NoDataNic => "NoDataNic",
        /// The devices the member sees differ from its assignment.
        DeviceMismatch => "DeviceMismatch",
        /// Driver, firmware or CANN versions differ from the group's (written by agents
        /// before the `hccl` version rules; today's agents write `NpuVersionMismatch`).
        VersionMismatch => "VersionMismatch",
        /// `/dev/shm` is smaller than the member needs.
        ShmTooSmall => "ShmTooSmall",
        /// The group has not published a rank table yet.
        NoRankTable => "NoRankTable",
        /// Verification did not finish within its deadline.
        VerificationTimedOut => "VerificationTimedOut",
        /// A device of the member has no NPU address (`/etc/hccn.conf` `address_N` or
        /// `hccn_tool -i N -ip -g` has none).
        NpuIpMissing => "NpuIpMissing",
        /// A device's NPU address differs between `/etc/hccn.conf`, `hccn_tool` and the
        /// rank table's `device_ip`.
        NpuIpMismatch => "NpuIpMismatch",
        /// Two devices of the node carry the same NPU address.
        NpuIpDuplicate => "NpuIpDuplicate",
        /// A device's RoCE link is down (`hccn_tool -i N -link -g`).
        NpuLinkDown => "NpuLinkDown",
        /// A device's network health is not `Success` (`hccn_tool -i N -net_health -g`).
        NpuUnhealthy => "NpuUnhealthy",
        /// The devices' TLS switch differs within the group (HCCL refuses to connect).
        NpuTlsMismatch => "NpuTlsMismatch",
        /// A device cannot ping a peer's NPU address (`hccn_tool -i N -ping -g address X`).
        NpuPingFailed => "NpuPingFailed",
        /// `hccn_tool` could not be run, timed out, or printed what its documented format
        /// does not allow.
        NpuToolFailed => "NpuToolFailed",
        /// An `hccl` group's nodes run different NPU driver or CANN versions (their
        /// `HcommNode`s say which; HCCL needs one of each across the group).
        NpuVersionMismatch => "NpuVersionMismatch",
        /// An `hccl` group's driver version is known on some of its nodes and unknown on
        /// others (an agent cannot read the driver's `version.info`), so agreement cannot
        /// be shown.
        NpuVersionUnknown => "NpuVersionUnknown",
        /// An `hccl` group's nodes differ where HCCL tolerates it (firmware), or a CANN
        /// version is unknown on some node (Warning Event only; the member is verified).
        NpuVersionWarning => "NpuVersionWarning",
        /// Verification failed (the Event that carries the failing check's reason).
        VerificationFailed => "VerificationFailed",
        /// The group's `comm.backend` is `hccl` and the HCCL runtime cannot be loaded on
        /// the node.
        HcclRuntimeUnavailable => "HcclRuntimeUnavailable",
        /// The NPUs the kubelet allocated to the Pod, the device plugin's allocation
        /// annotation and the rank table's devices for the member disagree.
        AllocationMismatch => "AllocationMismatch",
        /// The Pod requests NPUs but which ones it got (kubelet PodResources, device
        /// plugin annotation) was not known within the verification deadline.
        AllocationUnknown => "AllocationUnknown",
        /// The rank table names a peer the agent will not connect to: a loopback,
        /// link-local, unspecified or multicast address, or a device id whose port leaves
        /// the comm port range or is one of the node's service ports (a forged table).
        PeerRefused => "PeerRefused",
        /// The weights are in place and verified.
        WeightsSynced => "WeightsSynced",
        /// Syncing the weights failed.
        SyncFailed => "SyncFailed",
        /// The weights do not match `spec.weights.digest`.
        DigestMismatch => "DigestMismatch",
        /// No member holds the weights and the group names no source.
        NoWeightsSource => "NoWeightsSource",
        /// Fetching the weights from peers failed.
        PeerFetchFailed => "PeerFetchFailed",
        /// `spec.weights` cannot be used as written.
        InvalidWeightsSpec => "InvalidWeightsSpec",
        /// A peer sent a chunk that failed its check (Event).
        CorruptWeightsChunk => "CorruptWeightsChunk",
        /// A peer serving the weights went away mid-transfer (Event).
        WeightsSourceLost => "WeightsSourceLost",
        /// The declared local weights source is not allowed on this node: outside the
        /// agent's `--weights-source-root`s (none = peers only), or a `..`, a symlink, a
        /// device, FIFO or socket on the way or inside; nothing of it was read.
        WeightsSourceRefused => "WeightsSourceRefused",
        /// The group's Secret (`hcomm_crds::contract::secrets`) cannot be read: the
        /// operator has not made it yet, or this agent may not read it. Without it the
        /// member cannot authenticate to its group's domain or fetch its weights.
        GroupSecretMissing => "GroupSecretMissing",
        /// The member joined the domain.
        Joined => "Joined",
        /// The member could not join the domain.
        JoinFailed => "JoinFailed",
        /// The member could not move to a new epoch.
        RejoinFailed => "RejoinFailed",
        /// The member left the domain.
        Left => "Left",
        /// The member may receive traffic.
        MemberReady => "MemberReady",
        /// The member may not receive traffic yet.
        NotReady => "NotReady",
        /// The member is a warm standby: joined to the domain, out of traffic until the
        /// operator promotes it.
        Standby => "Standby",
        /// The member is finishing its requests in flight.
        Draining => "Draining",
        /// The member finished draining.
        Drained => "Drained",
        /// The drain did not finish in time; the member left anyway.
        DrainTimedOut => "DrainTimedOut",
    }
}

impl PodReason {
    /// Reasons on `hcomm.io/joined=False` that mean the member will never join (it must be
    /// replaced); any `hcomm.io/verified=False` is terminal as well.
    pub const TERMINAL_JOIN: &'static [PodReason] = &[
        PodReason::JoinFailed,
        PodReason::NicUnreachable,
        PodReason::DeviceMismatch,
        PodReason::VersionMismatch,
        PodReason::ShmTooSmall,
    ];
}
