//! The boundaries of one member's task, as traits: the driver ([`super::task`]) reaches
//! the world only through these, so the whole lifecycle runs in a unit test against the
//! in-memory fakes (`super::fakes`) with tokio's paused clock.
//!
//! - [`Cluster`] — Kubernetes: the group's spec, the rank-table ConfigMap, the member's
//!   Pod conditions and Events, the peers' own conditions and their nodes' versions.
//! - [`Verifier`] — checking the member against the rank table (data NIC, link probes,
//!   devices, versions, shm) and that the group backend's runtime loads.
//! - [`super::weights::WeightsSyncer`] — bringing the weights in place (already a seam).
//! - [`CommDomain`] — joining and leaving the group's domain at an epoch.
//! - [`Worker`] — the local API: the worker's assignment, notices, in-flight count and
//!   `serving` report.
//! - [`Allocations`] — the kubelet's PodResources record: which NPUs a Pod really got.
//! - [`Clock`] — the wall clock (the drain deadline counts from a Pod annotation's time);
//!   timers are tokio's, which tests pause and advance.
//!
//! The production implementations are in [`super::adapters`]; they wrap the code that did
//! this I/O before the ports existed.

use std::net::IpAddr;
use std::time::Duration;

use futures::future::BoxFuture;
use hcomm_crds::Backend;
use hcomm_crds::contract::PodReason;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::domain::DomainConfig;
use super::group::{GroupView, PublishedTable, ReadAt};
use super::ranktable::ControlPlan;
use super::ranktable_members::MemberAddresses;
use super::spec::MemberSpec;
use super::state::CondUpdate;
use super::verify::{Against, EarlySources, NicPassed, Verified};
use super::versions_check::NodeVersions;
use crate::error::Result;
use crate::local_api::{Assignment, Notice};

/// Kubernetes, as one member sees it.
pub trait Cluster: Send + Sync {
    /// The group's spec (never its status: see [`super::group`]) as of `at`.
    fn group(&self, at: ReadAt) -> BoxFuture<'_, Result<GroupView>>;
    /// The group's rank table, the epoch and the member Pods it was written for, as of
    /// `at`.
    fn rank_table(&self, at: ReadAt) -> BoxFuture<'_, Result<PublishedTable>>;
    /// The other members still on their way to the domain (not yet verified, or verified
    /// and still syncing weights), from their own Pod conditions.
    fn arriving_peers(&self) -> BoxFuture<'_, Result<Vec<String>>>;
    /// Merges the member's conditions into its Pod's status.
    fn write_conditions(&self, updates: Vec<CondUpdate>) -> BoxFuture<'_, ()>;
    /// Publishes a Kubernetes Event about the member's Pod.
    fn event(&self, warning: bool, reason: PodReason, message: String) -> BoxFuture<'_, ()>;
    /// The software versions of every node the group's members run on (this one
    /// included), from their `HcommNode`s (see [`super::versions_check`]).
    fn group_node_versions(&self) -> BoxFuture<'_, Result<Vec<NodeVersions>>>;
    /// The addresses the `HcommNode`s of the nodes running the group's member Pods
    /// publish: what every rank table's servers are checked against before a join
    /// (see [`super::ranktable_members`]).
    /// `table_revision` is the `resourceVersion` of the table to be checked: the members
    /// are read no older than it.
    fn member_addresses(
        &self,
        table_revision: Option<String>,
    ) -> BoxFuture<'_, Result<MemberAddresses>>;
    /// The data addresses this node's own link probes find unreachable in their last
    /// round (first-hand: this agent's probes, not another node's word).
    fn unreachable_peers(&self) -> Vec<String>;
}

/// Verification of the member against a rank table.
pub trait Verifier: Send + Sync {
    /// Whether the runtime of the group's backend can be loaded on this node (see
    /// [`super::runtime`]); `Err` says what is missing.
    fn backend_runtime(&self, backend: Backend) -> BoxFuture<'_, std::result::Result<(), String>>;
    /// Verifies the member against `against`. A passing verdict means the table's servers
    /// passed the check against the group's members
    /// ([`super::ranktable_members::check_table`]): the member's join at the same table
    /// version relies on it and does not check again.
    fn verify<'a>(
        &'a self,
        spec: &'a MemberSpec,
        socket_ifname: Option<&'a str>,
        connect_timeout: Duration,
        against: Against<'a>,
        nic_passed: Option<NicPassed>,
    ) -> BoxFuture<'a, Verified>;
    /// The data NIC and the checked servers of `against`, a table that does not hold this
    /// member yet, for a weight sync begun before its own ([`super::early_sync`]).
    fn early_sources<'a>(
        &'a self,
        spec: &'a MemberSpec,
        socket_ifname: Option<&'a str>,
        against: Against<'a>,
    ) -> BoxFuture<'a, std::result::Result<EarlySources, String>>;
}

/// What a join needs besides the plan.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub plan: ControlPlan,
    pub epoch: u64,
    /// The verified data address the member's endpoint binds.
    pub bind_ip: IpAddr,
    pub config: DomainConfig,
    /// The group's UID (the domain secret is derived from it when no secret file exists).
    pub group_uid: String,
}

/// Why a join did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinError {
    pub message: String,
    /// The rendezvous timed out or a peer was unreachable: the domain may still form once
    /// the missing members arrive. Otherwise the join was refused (e.g. the epoch was
    /// rejected) and waiting does not help.
    pub waiting: bool,
}

impl From<hcomm_comm::CommError> for JoinError {
    fn from(e: hcomm_comm::CommError) -> JoinError {
        JoinError {
            waiting: matches!(e.category(), "timeout" | "unreachable"),
            message: e.to_string(),
        }
    }
}

/// The member's place in its group's domain.
pub trait CommDomain: Send + Sync {
    /// Builds the communicator of `spec.epoch` beside the serving one and switches to it.
    fn join<'a>(
        &'a mut self,
        spec: &'a JoinSpec,
    ) -> BoxFuture<'a, std::result::Result<(), JoinError>>;
    /// Destroys the communicator and closes the links.
    fn leave(&mut self);
    /// The group's secret once the domain exists (the worker's per-epoch placement,
    /// `local_api::bootstrap`, derives its key and session from it); None before a join.
    fn group_secret(&self) -> Option<Vec<u8>>;
}

/// The member's worker, over the local API.
pub trait Worker: Send + Sync {
    fn assign(&self, a: Assignment);
    fn notify(&self, n: Notice);
    /// Requests in flight, as the worker last reported (None: never reported).
    fn in_flight(&self) -> watch::Receiver<Option<u64>>;
    /// Whether the worker reported that it serves.
    fn serving(&self) -> watch::Receiver<bool>;
    /// Why the worker said it cannot serve, once it did.
    fn cannot_serve(&self) -> watch::Receiver<Option<String>>;
    /// The member is gone: forget its slot.
    fn forget(&self);
}

/// The kubelet's record of the devices each Pod on the node was allocated (PodResources
/// `List`). Read during verification only: a serving member is never re-checked.
pub trait Allocations: Send + Sync {
    /// The kubelet device ids of `resource` allocated to Pod `namespace/pod`, over its
    /// containers; None when the kubelet does not list the Pod.
    fn kubelet_devices<'a>(
        &'a self,
        namespace: &'a str,
        pod: &'a str,
        resource: &'a str,
    ) -> BoxFuture<'a, std::result::Result<Option<Vec<String>>, hcomm_kubelet::PodResourcesError>>;
}

/// The wall clock.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}
