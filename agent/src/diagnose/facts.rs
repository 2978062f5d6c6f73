//! The facts `diagnose` collects before any check runs. Checks are pure functions over
//! this struct, so tests inject faults by editing a healthy [`Facts`].

use std::net::IpAddr;

use crate::inventory::nics::Nic;
use crate::nic::probe::ProbeOutcome;
use crate::nic::verify::DeviceFacts;

/// Communicator counters read from the agent's `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommCounters {
    pub created: u64,
    pub destroyed: u64,
    pub open: u64,
}

/// One log line that matched a keyword, with its neighbours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogMatch {
    pub file: String,
    pub line_no: usize,
    pub keyword: &'static str,
    pub context: Vec<String>,
}

/// One hcomm condition of the member Pod, as the agent wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCondition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// What the API server said about the member and its group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberConditions {
    /// `namespace/name` of the Pod asked for (`--pod`), if any.
    pub pod: Option<String>,
    /// Whether that Pod exists.
    pub pod_found: bool,
    /// Its `hcomm.io/*` conditions that are set, in lifecycle order.
    pub conditions: Vec<PodCondition>,
    /// Its `hcomm.io/epoch` label.
    pub pod_epoch: Option<u64>,
    /// The group read (from `--group` or the Pod's label), if it exists.
    pub group: Option<String>,
    /// The group's `status.epoch`.
    pub group_epoch: Option<u64>,
    /// The rank-table ConfigMap's `epoch`.
    pub rank_table_epoch: Option<u64>,
    /// The rank-table ConfigMap's `rank_table.json`.
    pub rank_table_json: Option<String>,
}

/// Whether and how the cluster was read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClusterRead {
    /// Neither `--pod` nor `--group` was given.
    #[default]
    NotAsked,
    /// The API server could not be used; why.
    Unreachable(String),
    /// What it said.
    Read(MemberConditions),
}

/// Everything observed.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub nics: Vec<Nic>,
    pub socket_ifname: Option<String>,
    pub data_address: Option<IpAddr>,
    pub management: Option<String>,
    /// Probes from the chosen data NIC to every peer's agent.
    pub peer_probes: Vec<ProbeOutcome>,
    /// The node name of rank 0, if known.
    pub rank0_peer: Option<String>,
    /// Whether the communicator port range fits and the local port is free (Err: why not).
    pub port_check: Option<Result<(), String>>,
    pub devices: DeviceFacts,
    /// Device ids the driver reports unhealthy.
    pub unhealthy_devices: Vec<i32>,
    pub pod_epoch: Option<u64>,
    pub rank_table_epoch: Option<u64>,
    pub group_epoch: Option<u64>,
    /// `hcomm.io/weights-synced` of the member: None unknown.
    pub weights_synced: Option<bool>,
    pub comm: Option<CommCounters>,
    pub open_fds: Option<u64>,
    pub fd_limit: Option<u64>,
    /// NUMA nodes the comm threads may run on (from the CPU affinity), if known.
    pub process_numa: Vec<i32>,
    /// Typical message size of the workload, if the user told us.
    pub message_bytes: Option<u64>,
    pub log_matches: Vec<LogMatch>,
    /// The member's Pod, group and rank table as the API server has them.
    pub cluster: ClusterRead,
    /// The member's NPU allocation from every side (None: no NPU member Pod asked about).
    pub allocation: Option<super::allocation::AllocationSeen>,
}
