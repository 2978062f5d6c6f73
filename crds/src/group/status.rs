//! The observed state of an `HcommGroup`, written only by the operator.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the operator observed. `replicas` and `readyReplicas` count members (one Pod
/// each), which is what the scale subresource and autoscalers read.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HcommGroupStatus {
    /// Members that exist (any phase but gone), warm standby members not counted: this is
    /// the scale subresource's current size, which autoscalers compare with `spec.replicas`.
    #[serde(default)]
    pub replicas: i32,

    /// Members whose readiness gate is True: they receive traffic.
    #[serde(default)]
    pub ready_replicas: i32,

    /// Warm standby members (`spec.scaling.standby`): verified, synced and joined, out of
    /// traffic until a scale-out promotes them. They hold NPUs like any member.
    #[serde(default)]
    pub standby_replicas: i32,

    /// The label selector of the member Pods, for the scale subresource (HPA, KEDA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// The membership epoch: increased by one on every change of the member set. Members
    /// and rank tables carry the epoch they belong to; peers refuse stale epochs.
    #[serde(default)]
    pub epoch: i64,

    /// A one-word summary for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<GroupPhase>,

    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The ConfigMap holding the current epoch's rank table (HCCL rank-table JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_table: Option<String>,

    /// Every member, with its placement, ranks and lifecycle phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,

    /// Rank → device → NIC → node/switch map of the current epoch, ordered by rank.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<TopologyEntry>,

    /// The revision most members that are not yet on `updateRevision` run (the one being
    /// replaced); equal to `updateRevision` once every member runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,

    /// The revision of the current `template` and `weights`: the `hcomm.io/revision` label
    /// of the members a rollout creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,

    /// Members (not leaving) that run `updateRevision`.
    #[serde(default)]
    pub updated_replicas: i32,

    /// Members (not leaving) that run `currentRevision`.
    #[serde(default)]
    pub current_replicas: i32,

    /// `Ready`, `Progressing`, `Degraded` and `LinksHealthy`, following Kubernetes API
    /// conventions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A one-word summary of the group.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupPhase {
    /// No member is Ready yet.
    Pending,
    /// Members are joining or draining; the Ready ones keep serving.
    Scaling,
    /// Every desired member is Ready.
    Ready,
    /// Something needs attention; see the `Degraded` condition.
    Degraded,
    /// The group is being deleted; members are draining.
    Deleting,
}

/// One member of the group.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The member Pod's name.
    pub name: String,

    /// The member's index; its ranks are `index × devicesPerMember` onwards.
    pub index: i32,

    /// The node the member runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,

    /// The member's ranks in the group's domain.
    pub ranks: RankRange,

    /// Physical device ids, one per local rank, in local-rank order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_ids: Vec<i32>,

    /// The address of the member's data NIC, once verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_ip: Option<String>,

    /// Where the member is in its lifecycle.
    pub phase: MemberPhase,

    /// When the member entered its current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<Time>,

    /// The epoch at which the member joined (or will join) the domain.
    pub epoch: i64,

    /// The weights version the member holds, once synced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_version: Option<String>,

    /// Why the member is not progressing, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A contiguous range of ranks.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct RankRange {
    /// The first rank.
    pub first: i32,
    /// How many ranks.
    pub count: i32,
}

/// The member lifecycle. A member moves forward through these phases only:
/// `Pending → Verifying → Syncing → Joining → Ready → Draining → Leaving → gone`, with
/// `Joining → Standby → Ready` for a warm standby that is promoted (and `Ready → Standby`
/// for one moved back on a scale-in);
/// `Failed` is terminal for a member that could not be verified or joined (it is
/// replaced, never silently retried in place).
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum MemberPhase {
    /// The Pod is created but not yet running on a node.
    Pending,
    /// The agent checks the data NIC, links to every peer, devices, versions and memory.
    Verifying,
    /// The member receives the model weights.
    Syncing,
    /// The member enters the domain at a new epoch.
    Joining,
    /// A warm standby: verified, synced and joined, its readiness gate held False until the
    /// operator promotes it (`spec.scaling.standby`).
    Standby,
    /// The readiness gate is True; the member serves traffic.
    Ready,
    /// The readiness gate is False; the member finishes its requests in flight.
    Draining,
    /// The member has drained and leaves the domain; its Pod is deleted next.
    Leaving,
    /// Verification or joining failed; see the member's message.
    Failed,
}

impl MemberPhase {
    /// Whether the member serves traffic in this phase.
    pub fn is_serving(self) -> bool {
        self == Self::Ready
    }

    /// Whether the member has arrived: verified, synced and joined, serving or held as a
    /// warm standby. Rollouts count these as available: a standby can serve at once.
    pub fn is_warm(self) -> bool {
        matches!(self, Self::Standby | Self::Ready)
    }

    /// Whether the member is on its way in (counts against `maxJoining`).
    pub fn is_joining(self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Verifying | Self::Syncing | Self::Joining
        )
    }

    /// Whether the member is on its way out.
    pub fn is_leaving(self) -> bool {
        matches!(self, Self::Draining | Self::Leaving)
    }
}

impl std::fmt::Display for MemberPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// One rank of the domain and where it physically is.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TopologyEntry {
    /// The rank.
    pub rank: i32,
    /// The member (Pod) holding the rank.
    pub member: String,
    /// The node.
    pub node: String,
    /// The physical device id.
    pub device_id: i32,
    /// The data NIC carrying the rank's traffic, once verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    /// The data address, once verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_ip: Option<String>,
    /// The super-pod, rack and switch of the node, from its `HcommNode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_pod: Option<String>,
    /// The rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// The top-of-rack switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
}
