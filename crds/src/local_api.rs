//! The local worker API's wire types (see `agent/README.md`, "Local worker API"): what the
//! inference worker and the agent on its node exchange over the agent's Unix socket, one
//! JSON object per line in each direction. The agent serves them; workers (the reference
//! worker in `examples/pool`, third-party engines) speak them.
//!
//! Requests carry `op` and `pod` (the worker's Pod name, from the downward API; `namespace`
//! is optional when the name is unique on the node). Responses carry `ok` and either the
//! result or `error`. `watch` turns the connection into a stream of `{"event": ...}` lines.
//!
//! Where the sockets are (see `docs/security.md`, "Local API"): the agent serves one socket
//! per member Pod, and every worker finds its own Pod's socket at [`MOUNT_SOCKET`] and no
//! other. The operator gives each member Pod the directory holding it in one of two ways:
//! - a CSI ephemeral inline volume of the agent's driver [`CSI_DRIVER`] (the default): the
//!   kubelet asks the agent to publish the volume for that Pod, and the agent serves the
//!   Pod's socket inside the volume's own directory. No hostPath, so member Pods pass Pod
//!   Security `baseline` (and `restricted`'s volume rule);
//! - a hostPath of `<`[`POD_SOCKETS_DIR`]`>/<pod uid>/`[`SOCKET_FILE`] narrowed to the Pod by
//!   `subPathExpr`, for clusters that cannot register a CSI driver.
//!
//! Either way the mount is read-only at [`MOUNT_DIR`]. A request on a Pod's socket acts on
//! that Pod only; `pod`/`namespace` must name it. The node socket ([`NODE_SOCKET`]) is
//! mounted into no Pod: node tools (and tests) use it, and it refuses callers inside a Pod.

use serde::{Deserialize, Serialize};

/// Longest request line accepted (bytes).
pub const MAX_LINE: usize = 16 << 10;

/// The host directory holding one directory per member Pod (named by the Pod's UID), each
/// with that Pod's socket: the agent's `--pod-sockets-dir` default and the hostPath the
/// operator mounts (one Pod's subdirectory of it, by `subPathExpr`).
pub const POD_SOCKETS_DIR: &str = "/run/hcomm/pods";
/// The socket's file name, in a Pod's directory and in the container.
pub const SOCKET_FILE: &str = "agent.sock";
/// Where a member's containers see their Pod's directory.
pub const MOUNT_DIR: &str = "/run/hcomm";
/// The Pod's own socket as its containers see it (`HCOMM_AGENT_SOCKET`, and the reference
/// worker's default).
pub const MOUNT_SOCKET: &str = "/run/hcomm/agent.sock";
/// The node socket on the host (the agent's `--socket` default): for node tools, never
/// mounted into a Pod.
pub const NODE_SOCKET: &str = "/run/hcomm/agent.sock";

/// The name of the member Pods' local-API volume.
pub const VOLUME: &str = "hcomm-agent-api";
/// The agent's CSI driver: the `CSIDriver` object the chart installs and the `driver` of the
/// member Pods' local-API volume. Ephemeral inline volumes only, with `podInfoOnMount`.
pub const CSI_DRIVER: &str = "local-api.hcomm.io";
/// The kubelet's root directory (the agent's `--kubelet-root-dir` default): CSI target
/// paths must lie below its `pods/` directory.
pub const KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";

/// A request from the worker.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The member's assignment.
    Assignment {
        pod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
    /// The worker's count of requests in flight.
    ReportInflight {
        pod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        n: u64,
    },
    /// Whether the weights are in place (and where).
    WeightsReady {
        pod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
    /// Stream of events for the member until the connection closes.
    Watch {
        pod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
    /// The worker has loaded its weights and takes traffic: with the Pod annotation
    /// `hcomm.io/worker-readiness: local-api` the agent holds the readiness gate until then.
    Serving {
        pod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
    /// The worker's load and drain progress (the worker library's report; a superset of
    /// `report_inflight`, whose count `in_flight` also sets): requests in flight, requests
    /// queued, and whether the worker is draining (takes no new work; SIGTERM or a
    /// `drain_requested` notice).
    ReportLoad {
        pod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        #[serde(flatten)]
        load: WorkerLoad,
    },
    /// The worker cannot serve: what it needs before traffic (its communicator, say)
    /// failed for good. While the agent waits for `serving` the member's join fails at
    /// once with `reason` (at most [`CANNOT_SERVE_REASON_MAX`] bytes kept), so the
    /// operator replaces it instead of waiting out the worker-ready timeout. Ignored once
    /// the member serves: a serving member ends only through a drain.
    CannotServe {
        pod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        reason: String,
    },
}

/// How much of a `cannot_serve` reason the agent keeps (it lands in a Pod condition).
pub const CANNOT_SERVE_REASON_MAX: usize = 512;

/// A worker's load as it reports it (`report_load`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
pub struct WorkerLoad {
    /// Requests being processed.
    pub in_flight: u64,
    /// Requests accepted and waiting for a slot.
    #[serde(default)]
    pub queue_depth: u64,
    /// The worker takes no new work and is finishing what it has.
    #[serde(default)]
    pub draining: bool,
}

impl Request {
    /// The request's `op` value, for logs and errors.
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Assignment { .. } => "assignment",
            Request::ReportInflight { .. } => "report_inflight",
            Request::WeightsReady { .. } => "weights_ready",
            Request::Watch { .. } => "watch",
            Request::Serving { .. } => "serving",
            Request::ReportLoad { .. } => "report_load",
            Request::CannotServe { .. } => "cannot_serve",
        }
    }

    /// (pod, namespace) of any request.
    pub fn target(&self) -> (&str, Option<&str>) {
        match self {
            Request::Assignment { pod, namespace }
            | Request::ReportInflight { pod, namespace, .. }
            | Request::WeightsReady { pod, namespace }
            | Request::Watch { pod, namespace }
            | Request::Serving { pod, namespace }
            | Request::ReportLoad { pod, namespace, .. }
            | Request::CannotServe { pod, namespace, .. } => (pod, namespace.as_deref()),
        }
    }
}

/// A member's assignment, as the worker sees it. Missing fields default and unknown ones
/// are ignored when parsing, so a newer agent does not break an older worker.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(default)]
pub struct Assignment {
    /// The group's name.
    pub group: String,
    /// The member's first rank.
    pub rank: u32,
    /// Ranks in the group.
    pub world: u32,
    /// Ranks of this member (devices per member).
    pub local_ranks: u32,
    /// The mounted rank table (`RANK_TABLE_FILE`), if any.
    pub rank_table_path: Option<String>,
    /// The data interface the agent resolved and verified.
    pub interface: Option<String>,
    /// Physical device ids, in local-rank order.
    pub devices: Vec<i32>,
    /// Where verified weights are (only meaningful once `weights_ready`).
    pub weights_path: Option<String>,
    /// The epoch of the member's communicator.
    pub epoch: u64,
    /// One entry per local process (one per rank of this member), in local-rank order:
    /// what each process exports as `RANK_ID` / `DEVICE_ID`. Empty from an agent that
    /// predates it.
    pub processes: Vec<ProcessAssignment>,
    /// How the worker builds this epoch's communicator (see [`WorkerComm`]); `None` until
    /// the member has joined its group's domain, and from an agent that predates it.
    pub comm: Option<WorkerComm>,
    /// The group's data-path backend (`spec.comm.backend`), known from the first
    /// assignment on, before `comm`: a worker that must build an HCCL communicator before
    /// it takes traffic knows it before it reports `serving`.
    pub backend: WorkerBackend,
}

/// The collective backend of a worker's communicator (`spec.comm.backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WorkerBackend {
    /// hcomm's TCP engine.
    #[default]
    Tcp,
    /// HCCL: the data path runs on the NPUs; the TCP communicator of the same epoch
    /// carries the HCCL root info from rank 0 to the others (HCCL's own model:
    /// `HcclGetRootInfo` on the root, the blob broadcast out of band by the caller).
    Hccl,
}

/// What a worker needs to build its communicator of one epoch, per member (one rank per
/// member: the member's control rank). The agent derives it from the epoch's rank table,
/// the way it builds its own control domain, so no exchange between nodes is needed: the
/// root is rank 0's worker endpoint at a known port and the rendezvous session id is
/// derived from the group's secret and the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(default)]
pub struct WorkerComm {
    /// The epoch this is for.
    pub epoch: u64,
    /// The member's rank in the workers' communicator.
    pub rank: u32,
    /// Members in the epoch.
    pub world: u32,
    /// The TCP engine's root info (`hcomm-root-v1@<id>@<ip:port>`).
    pub root_info: String,
    /// Where this worker's endpoint listens (`ip:port`); rank 0's is the root address.
    pub bind: String,
    /// The key the workers' connections authenticate with (hex), derived from the group's
    /// secret: it opens the workers' communicators only, never the agents' domain.
    pub key_hex: String,
    /// The backend of the data path.
    pub backend: WorkerBackend,
    /// `spec.comm.connectTimeoutSeconds` in ms: the bound of a communicator's init
    /// (HCCL_CONNECT_TIMEOUT for the HCCL backend).
    pub connect_timeout_ms: u64,
    /// `spec.comm.opTimeoutSeconds` in ms: the bound of one collective on the TCP engine
    /// (and of one stream synchronisation on HCCL).
    pub op_timeout_ms: u64,
    /// `spec.comm.execTimeoutSeconds` in ms: HCCL_EXEC_TIMEOUT for the HCCL backend.
    pub exec_timeout_ms: u64,
}

/// What one local process of a member is: its global rank and its device, both as the
/// rank table and the device plugin name them and as the process addresses it.
///
/// Device numbering: the Ascend container runtime makes only the allocated NPUs visible
/// (`ASCEND_VISIBLE_DEVICES` = physical ids) and the CANN runtime inside the container
/// numbers the visible devices from 0 in ascending physical order. So `device_id` (what
/// `torch.npu.set_device`, `ASCEND_DEVICE_ID` and `DEVICE_ID` take) is the physical id's
/// position among the member's allocated devices, while `physical_device_id` is what the
/// rank table's `device_id`, `hccn_tool -i` and `/etc/hccn.conf` use. Example: a member
/// given physical NPUs 4 and 6 runs rank r on `device_id` 0 (physical 4) and rank r+1 on
/// `device_id` 1 (physical 6).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(default)]
pub struct ProcessAssignment {
    /// The process's index inside the member (`LOCAL_RANK`), 0-based.
    pub local_rank: u32,
    /// The global rank: the rank table's `rank_id` (`RANK_ID`, torch's global rank).
    pub rank_id: u32,
    /// The logical device inside the container (`DEVICE_ID` / `ASCEND_DEVICE_ID`).
    pub device_id: u32,
    /// The physical device id (the rank table's `device_id`).
    pub physical_device_id: u32,
}

impl ProcessAssignment {
    /// The processes of a member from its (rank, physical device) entries in the rank
    /// table: local ranks follow rank order, logical devices follow ascending physical
    /// order (the container runtime's renumbering).
    pub fn from_entries(entries: &[(u32, u32)]) -> Vec<ProcessAssignment> {
        let mut by_rank = entries.to_vec();
        by_rank.sort_unstable();
        let mut physical: Vec<u32> = by_rank.iter().map(|(_, d)| *d).collect();
        physical.sort_unstable();
        physical.dedup();
        by_rank
            .iter()
            .enumerate()
            .map(|(i, (rank, dev))| ProcessAssignment {
                local_rank: i as u32,
                rank_id: *rank,
                device_id: physical.iter().position(|p| p == dev).unwrap_or(i) as u32,
                physical_device_id: *dev,
            })
            .collect()
    }
}

/// An event on a `watch` stream.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Notice {
    /// The weights are in place at `path` (`None`: the group has no weights).
    WeightsReady { path: Option<String> },
    /// Stop taking new work; `deadline` is the RFC 3339 request time.
    DrainRequested { deadline: Option<String> },
    /// The member's communicator moved to a new epoch.
    EpochChanged { epoch: u64 },
    /// An event this reader does not know (sent by a newer agent); the agent never sends
    /// it, a worker ignores it.
    #[serde(other)]
    Unknown,
}

/// A response line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Response {
    Assignment {
        ok: bool,
        /// Boxed: the assignment is far larger than the other answers.
        assignment: Box<Assignment>,
    },
    Weights {
        ok: bool,
        ready: bool,
        path: Option<String>,
    },
    /// Before `Ok`: untagged variants are tried in order, and `Ok` would swallow an
    /// error line (dropping its message) when read back.
    Error {
        ok: bool,
        error: String,
    },
    Ok {
        ok: bool,
    },
}

impl Response {
    /// A refusal (`ok: false`) carrying `e`.
    pub fn error(e: impl Into<String>) -> Response {
        Response::Error {
            ok: false,
            error: e.into(),
        }
    }
}

/// Parses one request line (without the newline).
pub fn parse_request(line: &str) -> Result<Request, String> {
    if line.len() > MAX_LINE {
        return Err(format!("request longer than {MAX_LINE} bytes"));
    }
    serde_json::from_str(line.trim()).map_err(|e| {
        format!("bad request ({e}); expected e.g. {{\"op\":\"assignment\",\"pod\":\"<name>\"}}")
    })
}

#[cfg(test)]
#[path = "local_api_fuzz.rs"]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_from_their_documented_form() {
        assert_eq!(
            parse_request(r#"{"op":"report_inflight","pod":"w-0","n":3}"#).unwrap(),
            Request::ReportInflight {
                pod: "w-0".into(),
                namespace: None,
                n: 3
            }
        );
        assert_eq!(
            parse_request(r#"{"op":"watch","pod":"w-0","namespace":"ns"}"#)
                .unwrap()
                .target(),
            ("w-0", Some("ns"))
        );
        assert!(
            parse_request(r#"{"op":"explode","pod":"w"}"#)
                .unwrap_err()
                .contains("expected")
        );
        assert!(
            parse_request(r#"{"op":"report_inflight","pod":"w"}"#).is_err(),
            "n is required"
        );
    }

    #[test]
    fn responses_and_notices_serialise_to_the_documented_lines() {
        let r = serde_json::to_string(&Response::Ok { ok: true }).unwrap();
        assert_eq!(r, r#"{"ok":true}"#);
        let n = serde_json::to_string(&Notice::EpochChanged { epoch: 4 }).unwrap();
        assert_eq!(n, r#"{"event":"epoch_changed","epoch":4}"#);
        let e = serde_json::to_string(&Response::error("no such member")).unwrap();
        assert_eq!(e, r#"{"ok":false,"error":"no such member"}"#);
    }

    #[test]
    fn requests_serialise_to_the_documented_lines() {
        let op = Request::ReportInflight {
            pod: "w-0".into(),
            namespace: None,
            n: 3,
        };
        assert_eq!(
            serde_json::to_string(&op).unwrap(),
            r#"{"op":"report_inflight","pod":"w-0","n":3}"#
        );
        let op = Request::Watch {
            pod: "w-0".into(),
            namespace: Some("ns".into()),
        };
        assert_eq!(
            serde_json::to_string(&op).unwrap(),
            r#"{"op":"watch","pod":"w-0","namespace":"ns"}"#
        );
        assert_eq!(op.op_name(), "watch");
    }

    #[test]
    fn events_parse_and_unknown_ones_are_tolerated() {
        let e: Notice =
            serde_json::from_str(r#"{"event":"weights_ready","path":"/w/current"}"#).unwrap();
        assert_eq!(
            e,
            Notice::WeightsReady {
                path: Some("/w/current".into())
            }
        );
        let e: Notice =
            serde_json::from_str(r#"{"event":"drain_requested","deadline":null}"#).unwrap();
        assert_eq!(e, Notice::DrainRequested { deadline: None });
        let e: Notice = serde_json::from_str(r#"{"event":"resized","n":1}"#).unwrap();
        assert_eq!(e, Notice::Unknown);
        let a: Assignment =
            serde_json::from_str(r#"{"group":"g","rank":2,"world":4,"epoch":7,"new":1}"#).unwrap();
        assert_eq!((a.rank, a.epoch, a.weights_path), (2, 7, None));
        assert!(
            a.processes.is_empty(),
            "an older agent's assignment still parses"
        );
    }

    #[test]
    fn a_load_report_is_one_flat_line_and_its_extras_default() {
        let op = Request::ReportLoad {
            pod: "w-0".into(),
            namespace: None,
            load: WorkerLoad {
                in_flight: 3,
                queue_depth: 5,
                draining: true,
            },
        };
        let line = serde_json::to_string(&op).unwrap();
        assert_eq!(
            line,
            r#"{"op":"report_load","pod":"w-0","in_flight":3,"queue_depth":5,"draining":true}"#
        );
        assert_eq!(parse_request(&line).unwrap(), op);
        let short = parse_request(r#"{"op":"report_load","pod":"w-0","in_flight":2}"#).unwrap();
        let Request::ReportLoad { load, .. } = short else {
            panic!("not a load report: {short:?}")
        };
        assert_eq!(
            (load.in_flight, load.queue_depth, load.draining),
            (2, 0, false)
        );
        assert!(parse_request(r#"{"op":"report_load","pod":"w-0"}"#).is_err());
    }

    #[test]
    fn an_assignment_carries_the_epochs_worker_comm_and_older_ones_parse_without() {
        let a: Assignment = serde_json::from_str(
            r#"{"group":"g","epoch":3,"comm":{"epoch":3,"rank":1,"world":2,"backend":"hccl","root_info":"r","bind":"10.0.0.2:29665"}}"#,
        )
        .unwrap();
        let c = a.comm.unwrap();
        assert_eq!(
            (c.epoch, c.rank, c.world, c.backend),
            (3, 1, 2, WorkerBackend::Hccl)
        );
        assert_eq!(c.connect_timeout_ms, 0, "missing fields default");
        let old: Assignment = serde_json::from_str(r#"{"group":"g","epoch":3}"#).unwrap();
        assert!(old.comm.is_none());
    }

    #[test]
    fn processes_follow_rank_order_and_devices_are_renumbered_from_zero() {
        // Ranks 9 and 8 on physical 6 and 4, listed out of order.
        let p = ProcessAssignment::from_entries(&[(9, 4), (8, 6)]);
        let got: Vec<(u32, u32, u32, u32)> = p
            .iter()
            .map(|p| (p.local_rank, p.rank_id, p.device_id, p.physical_device_id))
            .collect();
        assert_eq!(got, vec![(0, 8, 1, 6), (1, 9, 0, 4)]);
        let line = serde_json::to_string(&p[0]).unwrap();
        assert_eq!(
            line,
            r#"{"local_rank":0,"rank_id":8,"device_id":1,"physical_device_id":6}"#
        );
    }
}
