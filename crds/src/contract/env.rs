//! The environment the operator gives every worker container (and the agent reads from
//! the member's Pod spec): names only, one place. The values are set in
//! `operator/src/pod_builder.rs`; the worker engine reads the HCCL-standard ones itself.

/// The group's name.
pub const GROUP: &str = "HCOMM_GROUP";
/// The member's index in the group.
pub const MEMBER_INDEX: &str = "HCOMM_MEMBER_INDEX";
/// The epoch the member was planned at.
pub const EPOCH: &str = "HCOMM_EPOCH";
/// The group's collective backend (`hccl` or `tcp`).
pub const BACKEND: &str = "HCOMM_BACKEND";
/// Where the member's verified weights are (set in the template by users who mount them).
pub const WEIGHTS_PATH: &str = "HCOMM_WEIGHTS_PATH";
/// The agent's local-API Unix socket, as the worker finds it.
pub const AGENT_SOCKET: &str = "HCOMM_AGENT_SOCKET";
/// The member's first rank (HCCL / TF adapter convention: equals the table's `rank_id`).
pub const RANK_ID: &str = "RANK_ID";
/// Ranks in the group.
pub const RANK_SIZE: &str = "RANK_SIZE";
/// Ranks per member (`devicesPerMember`).
pub const LOCAL_RANK_SIZE: &str = "LOCAL_RANK_SIZE";
/// The physical devices of the member, comma separated, in local-rank order.
pub const VISIBLE_DEVICES: &str = "ASCEND_VISIBLE_DEVICES";
/// The interface for collective traffic (`HCCL_SOCKET_IFNAME` syntax).
pub const SOCKET_IFNAME: &str = "HCCL_SOCKET_IFNAME";
/// The mounted rank table (see [`crate::rank_table::RANK_TABLE_FILE`] for the path).
pub const RANK_TABLE_FILE: &str = "RANK_TABLE_FILE";

/// Every name above.
pub const ALL: &[&str] = &[
    GROUP,
    MEMBER_INDEX,
    EPOCH,
    BACKEND,
    WEIGHTS_PATH,
    AGENT_SOCKET,
    RANK_ID,
    RANK_SIZE,
    LOCAL_RANK_SIZE,
    VISIBLE_DEVICES,
    SOCKET_IFNAME,
    RANK_TABLE_FILE,
];
