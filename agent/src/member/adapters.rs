//! The production implementations of the member's [`super::ports`]: the API server
//! ([`KubeCluster`]), verification on this node ([`NicVerifier`]), the TCP engine
//! ([`EngineDomain`], which also runs the domain's health loop while joined), the local
//! API hub ([`HubWorker`]) and the system clock ([`SystemClock`]). Each wraps the code
//! that did this I/O inside the member task before the ports existed.
//!
//! Size: one short adapter per port, side by side so the ports' production meaning reads in
//! one place; each is a thin wrapper, and splitting them would scatter one table.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use hcomm_crds::contract::PodReason;
use hcomm_events::EventKey;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::sync::watch;

use super::condition_writer::{ConditionSink, ConditionWriter, Flushed, WriteFailure};
use super::conditions;
use super::domain::Domain;
use super::group::{
    GroupView, PublishedTable, ReadAt, fetch_group, fetch_member_pods, fetch_rank_table,
    still_arriving,
};
use super::ports::{
    Allocations, Clock, Cluster, CommDomain, JoinError, JoinSpec, Verifier, Worker,
};
use super::spec::MemberSpec;
use super::state::CondUpdate;
use super::verify::{Against, EarlySources, NicPassed, Verified, early_sources, verify};
use super::versions_check::{NodeVersions, member_nodes, node_versions};
use crate::config::Context;
use crate::error::{Error, Result};
use crate::group_secrets::SecretLookup;
use crate::local_api::{Assignment, Notice};
use crate::nic::verify::Verdict;
use crate::weights::GroupId;

/// The API server, for one member Pod.
pub struct KubeCluster {
    ctx: Arc<Context>,
    namespace: String,
    group: String,
    pod: String,
    uid: String,
    /// Writes the Pod's conditions until they land (`condition_writer`).
    conditions: ConditionWriter,
}

impl KubeCluster {
    pub fn new(ctx: Arc<Context>, spec: &MemberSpec) -> KubeCluster {
        let sink = PodConditions {
            api: Api::namespaced(ctx.client.clone(), &spec.namespace),
            pod: spec.pod.clone(),
            written: Mutex::new(None),
            failures: ctx.metrics.condition_write_failures.clone(),
        };
        KubeCluster {
            conditions: ConditionWriter::spawn(Arc::new(sink)),
            ctx,
            namespace: spec.namespace.clone(),
            group: spec.group.clone(),
            pod: spec.pod.clone(),
            uid: spec.uid.clone(),
        }
    }

    fn pod_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(self.pod.clone()),
            namespace: Some(self.namespace.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }

    /// Queues the Event; the member task does not wait for the API server.
    async fn publish(&self, warning: bool, reason: PodReason, message: String) {
        let note: String = message.chars().take(1000).collect();
        let regarding = self.pod_ref();
        let key = EventKey::new(
            &regarding,
            warning,
            reason.as_str(),
            "MemberLifecycle",
            &note,
        );
        self.ctx.events.publish(key, regarding);
    }
}

/// One member Pod's conditions on the API server: the production [`ConditionSink`].
struct PodConditions {
    api: Api<Pod>,
    pod: String,
    /// The Pod's conditions as this process's last condition write left them (the write's
    /// answer); `None` before the first write and after a failed one. Only this agent
    /// writes its condition types, so the next write merges against these instead of
    /// reading the Pod first: one request fewer on the joiner's path to Ready, where eight
    /// joiners' writes land at once (issue 20).
    written: Mutex<Option<Vec<PodCondition>>>,
    /// `hcomm_agent_condition_write_failures_total`.
    failures: prometheus::IntCounter,
}

impl PodConditions {
    fn last_written(&self) -> std::sync::MutexGuard<'_, Option<Vec<PodCondition>>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the Pod's conditions unless the last write left them known, merges
    /// `updates` in and patches the status when anything changed.
    async fn try_put(&self, updates: &[CondUpdate]) -> std::result::Result<(), kube::Error> {
        let known = self.last_written().clone();
        let existing = match known {
            Some(conditions) => conditions,
            None => conditions_of(&self.api.get_status(&self.pod).await?),
        };
        let now = Time(Timestamp::now());
        let Some(merged) = conditions::merge(&existing, updates, &now) else {
            return Ok(());
        };
        let params = PatchParams {
            field_manager: Some(crate::FIELD_MANAGER.into()),
            ..Default::default()
        };
        let body = conditions::patch_body(&merged);
        let patched = self
            .api
            .patch_status(&self.pod, &params, &Patch::Strategic(&body))
            .await?;
        *self.last_written() = Some(conditions_of(&patched));
        for c in updates {
            tracing::info!(
                condition = c.type_,
                status = c.status,
                reason = c.reason.as_str(),
                "pod condition"
            );
        }
        Ok(())
    }
}

impl ConditionSink for PodConditions {
    fn put<'a>(
        &'a self,
        updates: &'a [CondUpdate],
    ) -> BoxFuture<'a, std::result::Result<(), WriteFailure>> {
        async move {
            let outcome = match tokio::time::timeout(API_DEADLINE, self.try_put(updates)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                    return Err(WriteFailure::Gone);
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {API_DEADLINE:?}"),
            };
            *self.last_written() = None;
            self.failures.inc();
            Err(WriteFailure::Failed(outcome))
        }
        .boxed()
    }
}

fn conditions_of(pod: &Pod) -> Vec<PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// The deadline of each API call a member task makes. A request on a connection that died
/// silently (the node cut off from the API server) would otherwise wait for kube's read
/// timeout (295 s), and the member task with it, blind meanwhile to its own deletion and
/// holding its communicator's ports after its Pod is gone.
const API_DEADLINE: Duration = Duration::from_secs(10);

/// `call` within [`API_DEADLINE`].
async fn bounded<T>(what: &str, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(API_DEADLINE, call)
        .await
        .map_err(|_| Error::Timeout {
            what: what.to_owned(),
            after: API_DEADLINE,
        })?
}

impl Cluster for KubeCluster {
    fn group(&self, at: ReadAt) -> BoxFuture<'_, Result<GroupView>> {
        async move {
            bounded(
                "read the group",
                fetch_group(&self.ctx.client, &self.namespace, &self.group, &at),
            )
            .await
        }
        .boxed()
    }

    fn rank_table(&self, at: ReadAt) -> BoxFuture<'_, Result<PublishedTable>> {
        async move {
            let name = hcomm_crds::rank_table::config_map_name(&self.group);
            bounded(
                "read the rank table",
                fetch_rank_table(&self.ctx.client, &self.namespace, &name, &at),
            )
            .await
        }
        .boxed()
    }

    fn arriving_peers(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        async move {
            let pods = bounded(
                "list the group's members",
                fetch_member_pods(&self.ctx.client, &self.namespace, &self.group),
            )
            .await?;
            Ok(still_arriving(&pods, &self.pod))
        }
        .boxed()
    }

    fn write_conditions(&self, updates: Vec<CondUpdate>) -> BoxFuture<'_, ()> {
        async move {
            let ticket = self.conditions.submit(updates);
            match tokio::time::timeout(API_DEADLINE, self.conditions.flushed(ticket)).await {
                Ok(Flushed::Written) => {}
                Ok(Flushed::Gone) => tracing::debug!("pod gone; its conditions not written"),
                Err(_) => tracing::warn!(
                    after = ?API_DEADLINE,
                    "pod conditions not written yet; still trying in the background"
                ),
            }
        }
        .boxed()
    }

    fn event(&self, warning: bool, reason: PodReason, message: String) -> BoxFuture<'_, ()> {
        async move {
            if tokio::time::timeout(API_DEADLINE, self.publish(warning, reason, message))
                .await
                .is_err()
            {
                tracing::warn!(after = ?API_DEADLINE, "publishing an Event timed out");
            }
        }
        .boxed()
    }

    fn group_node_versions(&self) -> BoxFuture<'_, Result<Vec<NodeVersions>>> {
        async move {
            let pods = bounded(
                "list the group's members",
                fetch_member_pods(&self.ctx.client, &self.namespace, &self.group),
            )
            .await?;
            let nodes = member_nodes(&pods, &self.ctx.cfg.node_name);
            bounded(
                "read the members' node versions",
                node_versions(&self.ctx.client, nodes),
            )
            .await
        }
        .boxed()
    }

    fn member_addresses(
        &self,
        table_revision: Option<String>,
    ) -> BoxFuture<'_, Result<super::ranktable_members::MemberAddresses>> {
        async move {
            bounded(
                "read the members' node addresses",
                super::ranktable_members::fetch(
                    &self.ctx.client,
                    &self.namespace,
                    &self.group,
                    table_revision.as_deref(),
                ),
            )
            .await
        }
        .boxed()
    }

    fn unreachable_peers(&self) -> Vec<String> {
        self.ctx
            .link_tests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|t| !t.reachable)
            .map(|t| t.peer_address.clone())
            .collect()
    }
}

/// Verification on this node ([`super::verify`]); remembers the peers it found for the
/// node's link-health probes.
pub struct NicVerifier(pub Arc<Context>);

impl Verifier for NicVerifier {
    fn backend_runtime(
        &self,
        backend: hcomm_crds::Backend,
    ) -> BoxFuture<'_, std::result::Result<(), String>> {
        async move {
            let search = hcomm_comm::hccl::LibrarySearch::from_env();
            tokio::task::spawn_blocking(move || super::runtime::check(backend, &search))
                .await
                .unwrap_or_else(|e| Err(format!("the runtime check did not finish: {e}")))
        }
        .boxed()
    }

    fn verify<'a>(
        &'a self,
        spec: &'a MemberSpec,
        socket_ifname: Option<&'a str>,
        connect_timeout: Duration,
        against: Against<'a>,
        nic_passed: Option<NicPassed>,
    ) -> BoxFuture<'a, Verified> {
        async move {
            // Without the group's secret the member can neither join its domain nor fetch
            // its weights: refuse it here, with the reason that names the cause.
            if let Some(v) = secret_missing(&self.0, spec, against.group_uid).await {
                return v;
            }
            let v = verify(
                &self.0,
                spec,
                socket_ifname,
                connect_timeout,
                against,
                nic_passed,
            )
            .await;
            if let Some(p) = &v.plan {
                self.0.set_member_peers(&spec.key(), Some(&p.peers));
            }
            v
        }
        .boxed()
    }

    fn early_sources<'a>(
        &'a self,
        spec: &'a MemberSpec,
        socket_ifname: Option<&'a str>,
        against: Against<'a>,
    ) -> BoxFuture<'a, std::result::Result<EarlySources, String>> {
        async move {
            if let Some(v) = secret_missing(&self.0, spec, against.group_uid).await {
                return Err(v.verdict.message);
            }
            early_sources(&self.0, spec, socket_ifname, against).await
        }
        .boxed()
    }
}

/// `Some(refusal)` when the secret of the member's group (`group_uid`, as the member
/// task read the group just before) cannot be had (`GroupSecretMissing`).
async fn secret_missing(ctx: &Context, spec: &MemberSpec, group_uid: &str) -> Option<Verified> {
    let id = GroupId::new(&spec.namespace, &spec.group, group_uid);
    let e = ctx.group_secrets.secret(&id).await.err()?;
    Some(Verified {
        verdict: Verdict {
            ok: false,
            reason: PodReason::GroupSecretMissing,
            message: format!(
                "the group's secret cannot be read, so this member could not authenticate to its group: {e}"
            ),
        },
        chosen: None,
        plan: None,
    })
}

/// The member's domain on the TCP engine; the domain's all-reduce health loop runs while
/// it is joined.
pub struct EngineDomain {
    ctx: Arc<Context>,
    /// The member's key, for its peer set.
    key: String,
    namespace: String,
    group: String,
    domain: Option<Domain>,
    health: Option<tokio::task::JoinHandle<()>>,
}

impl EngineDomain {
    pub fn new(ctx: Arc<Context>, spec: &MemberSpec) -> EngineDomain {
        EngineDomain {
            ctx,
            key: spec.key(),
            namespace: spec.namespace.clone(),
            group: spec.group.clone(),
            domain: None,
            health: None,
        }
    }

    /// The group's own secret (`crate::group_secrets`); none is a refused join, never a
    /// guessable default.
    async fn secret(&self, group_uid: &str) -> std::result::Result<Vec<u8>, JoinError> {
        let id = GroupId::new(&self.namespace, &self.group, group_uid);
        match self.ctx.group_secrets.secret(&id).await {
            Ok(s) => Ok(s.as_bytes().to_vec()),
            Err(e) => Err(JoinError {
                message: format!("{}: {e}", PodReason::GroupSecretMissing),
                waiting: false,
            }),
        }
    }

    fn start_health(&mut self) {
        if self.health.is_some() {
            return;
        }
        let Some(d) = &self.domain else { return };
        let rx = d.watch();
        let ctx = self.ctx.clone();
        let group = format!("{}/{}", self.namespace, self.group);
        self.health = Some(tokio::spawn(crate::health::allreduce_loop(ctx, group, rx)));
    }

    fn stop_health(&mut self) {
        if let Some(h) = self.health.take() {
            h.abort();
        }
    }
}

impl CommDomain for EngineDomain {
    fn join<'a>(
        &'a mut self,
        spec: &'a JoinSpec,
    ) -> BoxFuture<'a, std::result::Result<(), JoinError>> {
        async move {
            if self.domain.is_none() {
                let secret = self.secret(&spec.group_uid).await?;
                self.domain = Some(Domain::new(
                    &self.namespace,
                    &self.group,
                    secret,
                    spec.bind_ip,
                    spec.config,
                    self.ctx.metrics.clone(),
                ));
            }
            let domain = self.domain.as_mut().expect("created above");
            domain.join(&spec.plan, spec.epoch).await?;
            // A new epoch can bring members on hosts this agent has not verified against
            // (replacements, scale-outs): its health probes must reach them too, or their
            // links stay unprobed and the group's LinksHealthy never turns True. Peers
            // that left the table are dropped here (the set is replaced, not extended).
            self.ctx.set_member_peers(&self.key, Some(&spec.plan.peers));
            self.start_health();
            Ok(())
        }
        .boxed()
    }

    fn leave(&mut self) {
        self.stop_health();
        if let Some(mut d) = self.domain.take() {
            d.leave();
        }
    }

    fn group_secret(&self) -> Option<Vec<u8>> {
        self.domain.as_ref().map(|d| d.secret().to_vec())
    }
}

impl Drop for EngineDomain {
    fn drop(&mut self) {
        self.stop_health();
    }
}

/// The member's slot in the local API hub, and its Pod's own socket (open while the
/// member task runs; removed with its directory when the Pod is gone).
pub struct HubWorker {
    ctx: Arc<Context>,
    key: String,
    socket: Option<crate::local_api::pods::Ticket>,
}

impl HubWorker {
    pub fn new(ctx: Arc<Context>, spec: &MemberSpec) -> HubWorker {
        let id = crate::local_api::server::PodIdentity {
            namespace: spec.namespace.clone(),
            name: spec.pod.clone(),
            uid: spec.uid.clone(),
        };
        let socket = match ctx.pod_sockets.open(id) {
            Ok(t) => Some(t),
            Err(e) => {
                // The worker then cannot reach the agent, and the member's wait for it
                // fails with its own reason; the cause is here.
                tracing::error!(error = %e, category = e.category(), "cannot open the Pod's local-API socket");
                None
            }
        };
        HubWorker {
            ctx,
            key: spec.key(),
            socket,
        }
    }
}

impl Drop for HubWorker {
    fn drop(&mut self) {
        // The agent is stopping (or the task was aborted): the Pod lives on, so its
        // directory stays for the next agent; only the socket goes.
        if let Some(t) = self.socket.take() {
            self.ctx.pod_sockets.close(&t, false);
        }
    }
}

impl Worker for HubWorker {
    fn assign(&self, a: Assignment) {
        self.ctx
            .hub
            .slot(&self.key)
            .assignment
            .send_replace(Some(a));
    }

    fn notify(&self, n: Notice) {
        self.ctx.hub.notify(&self.key, n);
    }

    fn in_flight(&self) -> watch::Receiver<Option<u64>> {
        self.ctx.hub.slot(&self.key).inflight.subscribe()
    }

    fn serving(&self) -> watch::Receiver<bool> {
        self.ctx.hub.slot(&self.key).serving.subscribe()
    }

    fn cannot_serve(&self) -> watch::Receiver<Option<String>> {
        self.ctx.hub.slot(&self.key).cannot_serve.subscribe()
    }

    fn forget(&self) {
        if let Some(t) = &self.socket {
            self.ctx.pod_sockets.close(t, true);
        }
        self.ctx.set_member_peers(&self.key, None);
        self.ctx.hub.remove(&self.key);
    }
}

/// Each PodResources call (connect included) ends within this; the member's verification
/// deadline bounds the whole wait for an allocation.
pub const KUBELET_CALL_DEADLINE: Duration = Duration::from_secs(5);

/// The kubelet's PodResources socket.
pub struct KubeletAllocations(hcomm_kubelet::PodResourcesClient);

impl KubeletAllocations {
    pub fn new(cfg: &crate::config::AgentConfig) -> KubeletAllocations {
        KubeletAllocations(hcomm_kubelet::PodResourcesClient::new(
            cfg.pod_resources_socket.clone(),
            KUBELET_CALL_DEADLINE,
        ))
    }
}

impl Allocations for KubeletAllocations {
    fn kubelet_devices<'a>(
        &'a self,
        namespace: &'a str,
        pod: &'a str,
        resource: &'a str,
    ) -> BoxFuture<'a, std::result::Result<Option<Vec<String>>, hcomm_kubelet::PodResourcesError>>
    {
        async move {
            // List, not Get: Get needs a feature gate before Kubernetes 1.34.
            let pods = self.0.list().await?;
            Ok(pods
                .into_iter()
                .find(|p| p.namespace == namespace && p.name == pod)
                .map(|p| p.device_ids(resource)))
        }
        .boxed()
    }
}

/// The system's wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}
