//! The environment the operator gives every worker container (and the agent reads from
//! the member's Pod spec): names only, one place. The values are set in
//! `operator/src/pod_builder.rs`; `docs/manual.md` (section "Worker environment") has one
//! table of every variable, its value and who reads it.
//!
//! Per-process values: a member of `d` devices runs `d` processes (one per NPU). The Pod
//! environment is shared by all of them, so it carries the member's first rank
//! ([`FIRST_RANK`]) and size ([`LOCAL_RANK_SIZE`]); process `j` (0 ≤ j < d) has
//! `RANK_ID = HCOMM_FIRST_RANK + j` and `DEVICE_ID = j` (the `j`-th NPU the device plugin
//! allocated, as the container sees it), handed out by the agent over the local API.
//! Only a member of one device gets [`RANK_ID`] and [`DEVICE_ID`] in its Pod environment.

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
/// The agent's local-API Unix socket, as the worker finds it (the operator sets it to
/// [`crate::local_api::MOUNT_SOCKET`], the Pod's own socket; see `docs/security.md`).
pub const AGENT_SOCKET: &str = "HCOMM_AGENT_SOCKET";
/// The Pod's UID (downward API `metadata.uid`): the `subPathExpr` that mounts the Pod's
/// own local-API directory, and nothing else, into its containers.
pub const POD_UID: &str = "HCOMM_POD_UID";
/// The member's first rank (`index × devicesPerMember`): process `j` of the member has
/// rank `HCOMM_FIRST_RANK + j`.
pub const FIRST_RANK: &str = "HCOMM_FIRST_RANK";
/// A process's rank (HCCL / TF adapter convention: equals the table's `rank_id`). Per
/// process; in the Pod environment only for members of one device.
pub const RANK_ID: &str = "RANK_ID";
/// A process's NPU, as the container sees it (logical id, `0 … d−1`). Per process; in the
/// Pod environment only for members of one device (then `0`).
pub const DEVICE_ID: &str = "DEVICE_ID";
/// Ranks in the group.
pub const RANK_SIZE: &str = "RANK_SIZE";
/// Ranks per member (`devicesPerMember`).
pub const LOCAL_RANK_SIZE: &str = "LOCAL_RANK_SIZE";
/// The physical devices of the member, comma separated: set by the Ascend device plugin
/// at allocation (see `contract::ascend`), never by the operator; the agent reads it.
pub const VISIBLE_DEVICES: &str = "ASCEND_VISIBLE_DEVICES";
/// The interface for collective traffic (`HCCL_SOCKET_IFNAME` syntax).
pub const SOCKET_IFNAME: &str = "HCCL_SOCKET_IFNAME";
/// HCCL's connection deadline in seconds (120–7200), from `comm.connectTimeoutSeconds`.
pub const HCCL_CONNECT_TIMEOUT: &str = "HCCL_CONNECT_TIMEOUT";
/// HCCL's per-collective deadline in seconds, from `comm.execTimeoutSeconds`.
pub const HCCL_EXEC_TIMEOUT: &str = "HCCL_EXEC_TIMEOUT";
/// HCCL's buffer per communicator in MB, from `comm.bufferSizeMb`.
pub const HCCL_BUFFSIZE: &str = "HCCL_BUFFSIZE";
/// The mounted rank table (see [`crate::rank_table::RANK_TABLE_FILE`] for the path); set
/// only with `comm.bootstrap: RankTable`.
pub const RANK_TABLE_FILE: &str = "RANK_TABLE_FILE";

/// Every name above.
pub const ALL: &[&str] = &[
    GROUP,
    MEMBER_INDEX,
    EPOCH,
    BACKEND,
    WEIGHTS_PATH,
    AGENT_SOCKET,
    POD_UID,
    FIRST_RANK,
    RANK_ID,
    DEVICE_ID,
    RANK_SIZE,
    LOCAL_RANK_SIZE,
    VISIBLE_DEVICES,
    SOCKET_IFNAME,
    HCCL_CONNECT_TIMEOUT,
    HCCL_EXEC_TIMEOUT,
    HCCL_BUFFSIZE,
    RANK_TABLE_FILE,
];
