//! The desired state of an `HcommGroup`, as users write it.
//!
//! Every `///` comment on a field becomes its description in the CRD, so it is what
//! `kubectl explain hcommgroup.spec` shows: it is written for the people who run clusters.
//! Bad input is refused by the API server itself, through the schema (types, enums, ranges)
//! and CEL rules whose messages name the field and the rule.
//! Size: mostly field documentation, which is the CRD's user manual; the top-level spec
//! and its update strategy are kept beside each other because the CEL rules tie them.

// kube's `printcolumn(...)` repeats `type_ = ...`; clippy mistakes that for a duplicate.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::HcommGroupStatus;

/// An elastic pool of inference workers (members) that share one collective-communication
/// domain. hcomm places members on nodes, gives them ranks and devices, verifies their
/// network, syncs their weights, and grows or shrinks the domain without stopping the
/// members that serve.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "hcomm.io",
    version = "v1alpha1",
    kind = "HcommGroup",
    // Without `doc`, kube's derive describes the resource as "Auto-generated derived type
    // for HcommGroupSpec via `CustomResource`"; this is what `kubectl explain` shows first.
    doc = "An elastic pool of inference workers (members) that share one collective-communication domain. hcomm places members on nodes, gives them ranks and devices, verifies their network, syncs their weights, and grows or shrinks the domain without stopping the members that serve.",
    plural = "hcommgroups",
    shortname = "hcg",
    category = "hcomm",
    namespaced,
    status = "HcommGroupStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role"),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Standby", type_ = "integer", json_path = ".status.standbyReplicas"),
    printcolumn(name = "Epoch", type_ = "integer", json_path = ".status.epoch"),
    printcolumn(
        name = "Revision",
        type_ = "string",
        json_path = ".status.updateRevision"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.updatedReplicas"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.maxReplicas) || self.maxReplicas >= self.replicas").message("maxReplicas must be greater than or equal to replicas").field_path(".maxReplicas"))]
#[x_kube(validation = Rule::new("has(self.template.spec) && size(self.template.spec.containers) > 0").message("template.spec.containers must list at least one container (the inference worker)").field_path(".template"))]
#[serde(rename_all = "camelCase")]
pub struct HcommGroupSpec {
    /// Number of members (worker Pods) the group should have. Each member holds
    /// `devicesPerMember` ranks. `kubectl scale`, a HorizontalPodAutoscaler or KEDA change
    /// this field through the scale subresource. Zero is allowed and parks the group.
    #[schemars(range(min = 0))]
    pub replicas: i32,

    /// Upper bound for `replicas`; an autoscaler asking for more is refused. Unset means no
    /// bound beyond the cluster's capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_replicas: Option<i32>,

    /// What the pool does in disaggregated serving: `prefill`, `decode` or `generic`. It is
    /// copied to the `hcomm.io/role` label of every member so routers can select on it.
    #[serde(default)]
    pub role: Role,

    /// NPUs (or CPU ranks) per member: 1, 2, 4, 8 or 16. Member `i` holds ranks
    /// `i × devicesPerMember … (i+1) × devicesPerMember − 1`, as in HCCL rank tables.
    #[serde(default = "default_devices_per_member")]
    #[x_kube(validation = Rule::new("self in [1, 2, 4, 8, 16]").message("devicesPerMember must be one of 1, 2, 4, 8, 16"))]
    pub devices_per_member: i32,

    /// The worker Pod template. hcomm adds labels, the `hcomm.io/member-ready` readiness
    /// gate, the rank-table volume, the NPU resource request (`npu.resourceName` ×
    /// `devicesPerMember` on every container that does not set it), a required node
    /// affinity for the node hcomm chose, and the rank and HCCL environment (`RANK_SIZE`,
    /// `HCOMM_FIRST_RANK`, `LOCAL_RANK_SIZE`, `HCCL_*`, and `RANK_TABLE_FILE` in
    /// `RankTable` bootstrap; see the manual). `spec.schedulerName` (e.g. `volcano`) is kept
    /// as written. hcomm never sets `nodeName` or `ASCEND_VISIBLE_DEVICES`: the scheduler
    /// binds the Pod and the device plugin picks its NPUs.
    pub template: PodTemplateSpec,

    /// Which NPUs members request from the device plugin.
    #[serde(default)]
    pub npu: NpuSpec,

    /// How members talk to each other.
    #[serde(default)]
    pub comm: CommSpec,

    /// The model weights every member must hold before it receives traffic. New members
    /// get them from members that already hold them, verified chunk by chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsSpec>,

    /// How membership changes.
    #[serde(default)]
    pub scaling: ScalingSpec,

    /// How the scheduler places members beyond the NPU request and the node affinity.
    /// Unset: each member Pod is scheduled on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<SchedulingSpec>,

    /// How members are replaced when `template` or `weights` change: each change makes a
    /// new revision (a hash of the two, the `hcomm.io/revision` label of the members made
    /// from it), and members of older revisions are replaced by a rolling update.
    #[serde(default)]
    pub update_strategy: UpdateStrategy,

    /// How many old revisions the group keeps as ControllerRevisions (owned by the group,
    /// named `<group>-<revision>`), for `kubectl rollout history`-style inspection and so a
    /// rollback (applying an old template again) reuses its revision. Default 10.
    #[serde(default = "default_revision_history_limit")]
    #[schemars(range(min = 0, max = 1000))]
    pub revision_history_limit: i32,
}

fn default_revision_history_limit() -> i32 {
    10
}

/// How a new revision replaces the members of older ones.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// The rolling update's pace and its canary partition.
    #[serde(default)]
    pub rolling_update: RollingUpdate,

    /// How long (seconds, 1–86400) a member of the new revision may take to become Ready
    /// (verified, synced, joined, serving) before the rollout stops with `Progressing=False`,
    /// reason `ProgressDeadlineExceeded`. A member of the new revision that fails (e.g. a
    /// weights digest mismatch) stops it at once, reason `RevisionFailed`. A stopped rollout
    /// drains no further old member; it resumes only with a new revision (a fixed template,
    /// or the old one applied again to roll back).
    #[serde(default = "default_progress_deadline_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub progress_deadline_seconds: i32,
}

impl Default for UpdateStrategy {
    fn default() -> Self {
        Self {
            rolling_update: RollingUpdate::default(),
            progress_deadline_seconds: default_progress_deadline_seconds(),
        }
    }
}

fn default_progress_deadline_seconds() -> i32 {
    600
}

/// The pace of a rolling update, in members (whole numbers, not percentages).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.maxSurge + self.maxUnavailable >= 1").message("rollingUpdate: maxSurge and maxUnavailable must not both be 0 (no member could ever be replaced)"))]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// How many members of the new revision may exist above `replicas` during a rollout
    /// (0–1024; default 1): a new member joins and serves before an old one drains, so
    /// serving capacity never drops. Needs one member's worth of free NPUs. With
    /// `comm.backend: hccl` the rollout is in place instead (as with 0), because HCCL ranks
    /// must stay `0..n-1` and a member's ranks are fixed when it is created.
    #[serde(default = "default_max_surge")]
    #[schemars(range(min = 0, max = 1024))]
    pub max_surge: i32,

    /// How many members may be not serving at once during a rollout (0–1024; default 0).
    /// Above 0, old members drain before their replacements are Ready, faster but with
    /// less capacity.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1024))]
    pub max_unavailable: i32,

    /// Members with an index below `partition` keep their revision (a canary: set it to
    /// `replicas - 1` to roll one member, then lower it). Members at or above it are
    /// replaced. A member below the partition that fails is replaced with the new revision
    /// too: hcomm builds Pods only from the current template. Default 0 (roll everything).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub partition: i32,
}

impl Default for RollingUpdate {
    fn default() -> Self {
        Self {
            max_surge: default_max_surge(),
            max_unavailable: 0,
            partition: 0,
        }
    }
}

fn default_max_surge() -> i32 {
    1
}

/// Scheduler settings of a group.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// Gang scheduling by Volcano: hcomm keeps one `scheduling.volcano.sh/v1beta1`
    /// PodGroup per group (named after the group, owned by it) and annotates each member
    /// Pod with `scheduling.k8s.io/group-name`, so Volcano binds the Pods of a scale-out
    /// all together or none of them. The PodGroup's `minMember` is the number of members
    /// of the epoch being built (serving members and joiners): what the next
    /// communicator needs at once. Set the template's `schedulerName: volcano` too. When
    /// the cluster has no PodGroup CRD, the group's `PodGroupReady` condition says so and
    /// members are scheduled one by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group: Option<PodGroupSpec>,
}

/// What hcomm copies into the group's Volcano PodGroup.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// The Volcano queue the PodGroup is submitted to; unset: Volcano's `default` queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub queue: Option<String>,
    /// The PriorityClass Volcano orders and preempts PodGroups by; unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
}

fn default_devices_per_member() -> i32 {
    1
}

/// The role of a pool in disaggregated (prefill/decode) serving.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Processes prompts and produces the KV cache.
    Prefill,
    /// Generates tokens from a KV cache.
    Decode,
    /// Does both, or something else.
    #[default]
    Generic,
}

impl Role {
    /// The label value for this role.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prefill => "prefill",
            Self::Decode => "decode",
            Self::Generic => "generic",
        }
    }
}

/// The communication settings of the group's domain.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.backend != 'hccl' || (self.connectTimeoutSeconds >= 120 && self.connectTimeoutSeconds <= 7200)").message("connectTimeoutSeconds must be between 120 and 7200 with backend hccl (it is HCCL_CONNECT_TIMEOUT, and HCCL refuses other values)").field_path(".connectTimeoutSeconds"))]
#[x_kube(validation = Rule::new("self.backend != 'tcp' || self.connectTimeoutSeconds <= 600").message("connectTimeoutSeconds must be between 1 and 600 with backend tcp").field_path(".connectTimeoutSeconds"))]
#[serde(rename_all = "camelCase")]
pub struct CommSpec {
    /// The collective backend: `hccl` on Ascend NPUs, `tcp` on CPU nodes and in tests.
    #[serde(default)]
    pub backend: Backend,

    /// Which network interface carries collective traffic, in the syntax of
    /// `HCCL_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`: a comma-separated list of interface name
    /// prefixes (`eth,ens`), `=` before the list for exact names (`=eth0`), `^` to exclude
    /// (`^lo,docker`). Unset: the agent picks the interface that holds the node's data
    /// address (see the manual), never a loopback or container bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    #[x_kube(validation = Rule::new(r"self.matches('^\\^?=?[A-Za-z0-9_.@-]{1,15}(,[A-Za-z0-9_.@-]{1,15})*$')").message("socketIfname must be a comma-separated list of interface names or prefixes (each 1-15 of A-Z a-z 0-9 _ . @ -), optionally starting with ^ to exclude and/or = for exact names, e.g. 'eth0', '^lo,docker', '=ens3f0'"))]
    pub socket_ifname: Option<String>,

    /// How long to wait for a connection to a peer before the member is reported
    /// unreachable (seconds). With `backend: hccl` it is also `HCCL_CONNECT_TIMEOUT` and
    /// must lie in HCCL's range, 120–7200; with `backend: tcp` (hcomm's own engine) 1–600.
    #[serde(default = "default_connect_timeout_seconds")]
    #[schemars(range(min = 1, max = 7200))]
    pub connect_timeout_seconds: i32,

    /// How long HCCL lets one collective run before it reports a timeout
    /// (`HCCL_EXEC_TIMEOUT`, seconds; 0 means never; HCCL's default 1836). Only for
    /// `backend: hccl`; hcomm's TCP engine uses `opTimeoutSeconds`.
    #[serde(default = "default_exec_timeout_seconds")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub exec_timeout_seconds: i32,

    /// HCCL's buffer per communicator, in MB (`HCCL_BUFFSIZE`, at least 1; HCCL's default
    /// 200). HCCL allocates twice this per communicator on every NPU.
    #[serde(default = "default_buffer_size_mb")]
    #[schemars(range(min = 1, max = 65536))]
    pub buffer_size_mb: i32,

    /// How workers build their HCCL communicator. `RootInfo` (default): from the root's
    /// `HcclGetRootInfo` blob, as torch_npu does without a rank table; hcomm sets no
    /// `RANK_TABLE_FILE`. `RankTable`: from the rank table hcomm publishes (the mounted
    /// file `RANK_TABLE_FILE` points to), as MindIE and rank-table torch_npu jobs do.
    #[serde(default)]
    pub bootstrap: Bootstrap,

    /// How long one collective may take before it fails with a timeout naming the peer it
    /// waited for (seconds, 1–3600).
    #[serde(default = "default_op_timeout_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub op_timeout_seconds: i32,

    /// The all-reduce algorithm: `auto` picks by message size and group size; `ring` is
    /// bandwidth-optimal for large messages; `tree` (recursive doubling) is latency-optimal
    /// for small ones; `halving-doubling` (Rabenseifner: recursive-halving reduce-scatter,
    /// recursive-doubling all-gather) sits between them for mid-size messages.
    #[serde(default)]
    pub algorithm: Algorithm,
}

impl Default for CommSpec {
    fn default() -> Self {
        Self {
            backend: Backend::default(),
            socket_ifname: None,
            connect_timeout_seconds: default_connect_timeout_seconds(),
            op_timeout_seconds: default_op_timeout_seconds(),
            exec_timeout_seconds: default_exec_timeout_seconds(),
            buffer_size_mb: default_buffer_size_mb(),
            bootstrap: Bootstrap::default(),
            algorithm: Algorithm::default(),
        }
    }
}

/// HCCL's own default and lowest allowed `HCCL_CONNECT_TIMEOUT`: valid for both backends.
fn default_connect_timeout_seconds() -> i32 {
    120
}

/// HCCL's default `HCCL_EXEC_TIMEOUT` on A2/A3.
fn default_exec_timeout_seconds() -> i32 {
    1836
}

/// HCCL's default `HCCL_BUFFSIZE`.
fn default_buffer_size_mb() -> i32 {
    200
}

/// How workers build their HCCL communicator.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Bootstrap {
    /// From the root rank's `HcclGetRootInfo` blob (`HcclCommInitRootInfo`); no
    /// `RANK_TABLE_FILE` is set.
    #[default]
    RootInfo,
    /// From the published rank table (`HcclCommInitClusterInfo`); `RANK_TABLE_FILE` is set.
    RankTable,
}

/// Which NPUs members request from the device plugin.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NpuSpec {
    /// The extended resource the Ascend device plugin advertises: `huawei.com/Ascend910`
    /// (910, 910B, 910C/A3; default), `huawei.com/Ascend310P`, `huawei.com/npu`
    /// (Atlas 350/850/950). Each member requests `devicesPerMember` of it; the scheduler
    /// counts it and the device plugin picks the NPUs.
    #[serde(default = "default_resource_name")]
    #[schemars(length(min = 3, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')").message("npu.resourceName must be an extended resource name 'domain/name', e.g. 'huawei.com/Ascend910'"))]
    pub resource_name: String,
}

impl Default for NpuSpec {
    fn default() -> Self {
        Self {
            resource_name: default_resource_name(),
        }
    }
}

fn default_resource_name() -> String {
    crate::contract::ascend::RESOURCE_ASCEND910.to_owned()
}

fn default_op_timeout_seconds() -> i32 {
    120
}

/// The collective-communication backend.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Huawei HCCL on Ascend NPUs (needs the CANN runtime on the node).
    #[default]
    Hccl,
    /// hcomm's portable TCP engine (CPU nodes, tests).
    Tcp,
}

/// The all-reduce algorithm.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Chosen per call from the message size and the group size.
    #[default]
    Auto,
    /// Ring: reduce-scatter then all-gather; best for large messages.
    Ring,
    /// Tree: recursive doubling (log₂ n rounds of whole-message exchanges); best for small
    /// messages.
    Tree,
    /// Halving-doubling (Rabenseifner): reduce-scatter by recursive halving, all-gather by
    /// recursive doubling; for mid-size messages.
    #[serde(rename = "halving-doubling")]
    HalvingDoubling,
}

/// The model weights the members serve.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WeightsSpec {
    /// Where the first members load the weights from: an absolute directory path on the
    /// node (`/models/x`, or `file:///models/x`). Empty: members get the weights only from
    /// peers that already hold them (a member that finds no peer holding them fails its
    /// sync with `NoWeightsSource`). Later members copy them from members that hold them.
    /// `http(s)://` sources are not supported yet and are refused.
    #[schemars(length(max = 4096))]
    #[x_kube(validation = Rule::new("self == '' || self.startsWith('/') || self.startsWith('file:///')").message("weights.source must be an absolute path on the node or empty (peers only); http(s) sources are not supported yet"))]
    pub source: String,

    /// A human version label (e.g. `llama3-70b-2026-10`). Changing it rolls the group to the
    /// new weights, one member at a time.
    #[schemars(length(min = 1, max = 253))]
    pub version: String,

    /// The digest of the weights manifest, `sha256:` followed by 64 lowercase hex digits.
    /// Every chunk a member receives is checked against this manifest.
    #[x_kube(validation = Rule::new("self.matches('^sha256:[0-9a-f]{64}$')").message("digest must be 'sha256:' followed by 64 lowercase hex digits"))]
    #[schemars(length(max = 71))]
    pub digest: String,
}

/// How membership changes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingSpec {
    /// `Incremental` (default): members join and leave at a new epoch while the others keep
    /// serving. `Rebuild`: tear the whole domain down and build it again (the classic way;
    /// every member stops serving during the change).
    #[serde(default)]
    pub strategy: ScalingStrategy,

    /// How long a draining member may take to finish its requests in flight before it is
    /// removed anyway (seconds, 1–86400). A timed-out drain is recorded as an Event and on
    /// the `Degraded` condition.
    #[serde(default = "default_drain_timeout_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub drain_timeout_seconds: i32,

    /// How many members may be joining (verifying, syncing weights, joining) at once.
    #[serde(default = "default_max_joining")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_joining: i32,

    /// How many members may be draining or otherwise not serving at once during a scale-in
    /// or a rolling change.
    #[serde(default = "default_max_unavailable")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_unavailable: i32,

    /// Warm standby members kept beside `replicas` (0–64, default 0): verified,
    /// weights-synced and joined to every epoch, but out of traffic (readiness gate False,
    /// not counted in `status.readyReplicas` or `status.replicas`). A scale-out promotes
    /// them first — only their readiness gate opens — while new standby members refill in
    /// the background; a serving member that fails is replaced by a standby the same way.
    /// A scale-in keeps `standby` warm members, moving serving ones back to standby (their
    /// gate closes, their requests in flight finish) where the standby ones are drained.
    /// Each costs `devicesPerMember` NPUs.
    #[serde(default)]
    #[schemars(range(min = 0, max = 64))]
    pub standby: i32,
}

impl Default for ScalingSpec {
    fn default() -> Self {
        Self {
            strategy: ScalingStrategy::default(),
            drain_timeout_seconds: default_drain_timeout_seconds(),
            max_joining: default_max_joining(),
            max_unavailable: default_max_unavailable(),
            standby: 0,
        }
    }
}

fn default_drain_timeout_seconds() -> i32 {
    300
}

fn default_max_joining() -> i32 {
    4
}

fn default_max_unavailable() -> i32 {
    1
}

/// The scaling strategy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScalingStrategy {
    /// Grow and shrink the domain in place, make-before-break.
    #[default]
    Incremental,
    /// Full teardown and rebuild on every membership change.
    Rebuild,
}
