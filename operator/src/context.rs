//! Everything a reconcile needs, in one place: the client, the metrics, the Event recorder
//! and the watch scope.

use std::sync::Arc;

use hcomm_events::{EventSink, Reporter};

use crate::links::LinkPolicy;
use crate::metrics::Metrics;
use crate::phase::ObservedMember;

/// The operator's field manager for server-side apply, and the controller name its Events
/// report.
pub const FIELD_MANAGER: &str = "hcomm-operator";

/// Shared by every reconcile.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: kube::Client,
    /// The process' metrics.
    pub metrics: Arc<Metrics>,
    /// Publishes Kubernetes Events as `hcomm-operator`, off the reconcile path.
    pub events: EventSink,
    /// Only this namespace is watched (and its member Pods counted), when set.
    pub namespace: Option<String>,
    /// The operator's own (release) namespace: where the groups' Secrets live
    /// (`crate::group_secret`).
    pub secrets_namespace: String,
    /// When a link test is too old to count, and when a link is slow.
    pub links: LinkPolicy,
    /// How member Pods get their local-API directory (`--local-api-volume`).
    pub local_api_volume: crate::pod_builder::LocalApiVolume,
    /// Held from reading the cluster to assuming the plan's joiners on their nodes.
    /// Placement counts the devices every group's Pods hold, so two groups reconciled at
    /// once could otherwise both give a new member the same free device; with it, the
    /// second counts the first's joiners (assumed until the cache shows their Pods:
    /// `crate::cache`).
    pub placement: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// The running controller's watch caches, which reconciles read (`crate::cache`).
    pub caches: crate::cache::SharedCaches,
    /// The operator's Pod writes the Pod cache must show before a group's next plan.
    pub expected: Arc<crate::cache::Expectations>,
    /// The rank tables the operator wrote, which the table store must show before a
    /// reconcile reads its group's table from it.
    pub table_writes: Arc<crate::cache::TableWrites>,
    /// NPUs promised to joiners whose Pods the cache does not show yet.
    pub assumed: Arc<crate::cache::Assumed>,
    /// Groups whose Secret this process made sure of lately (`crate::recently`).
    pub secret_ensured: Arc<crate::recently::Recently>,
    /// Groups whose PodDisruptionBudget this process applied lately.
    pub budget_ensured: Arc<crate::recently::Recently>,
    /// The status this process last wrote per group (`crate::status_written`).
    pub status_written: Arc<crate::status_written::StatusWritten>,
    /// Writes the groups' statuses off the reconcile path (`crate::status_writer`).
    pub status_writer: crate::status_writer::StatusWriter,
    /// Per group, the member Pods the API server would not create
    /// (`crate::create_failures`).
    pub create_failures: Arc<crate::create_failures::CreateFailures>,
    /// Per group (`namespace/name`), its members' recent failures (see `crate::backoff`).
    pub backoff: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<String, crate::backoff::FailureBackoff>>,
    >,
}

impl Context {
    /// A context for `client`, reporting Events as `hcomm-operator` from `identity`, with
    /// the default [`LinkPolicy`] (set `links` to change it).
    pub fn new(
        client: kube::Client,
        metrics: Arc<Metrics>,
        namespace: Option<String>,
        identity: &str,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: identity.to_owned(),
        };
        let status_written = Arc::<crate::status_written::StatusWritten>::default();
        Self {
            status_writer: crate::status_writer::StatusWriter::for_client(
                client.clone(),
                FIELD_MANAGER,
                status_written.clone(),
                metrics.status_write_failures.clone(),
            ),
            events: EventSink::start(
                client.clone(),
                reporter,
                metrics.events_dropped.clone(),
                metrics.event_write_failures.clone(),
            ),
            client,
            metrics,
            namespace,
            secrets_namespace: "default".to_owned(),
            links: LinkPolicy::default(),
            local_api_volume: Default::default(),
            placement: std::sync::Arc::new(tokio::sync::Mutex::new(())),
            caches: crate::cache::SharedCaches::default(),
            expected: Arc::default(),
            table_writes: Arc::default(),
            assumed: Arc::default(),
            secret_ensured: Arc::default(),
            budget_ensured: Arc::default(),
            status_written,
            create_failures: Arc::default(),
            backoff: std::sync::Arc::default(),
        }
    }

    /// Counts the group's newly failed members (`members` as judged, see
    /// `crate::isolation`) and returns when new members may be created again (None: now).
    /// A deleted group's history goes with it.
    pub fn failure_backoff(
        &self,
        group: &hcomm_crds::HcommGroup,
        members: &[ObservedMember],
        now: k8s_openapi::jiff::Timestamp,
    ) -> Option<k8s_openapi::jiff::Timestamp> {
        use kube::{Resource, ResourceExt};
        let key = format!(
            "{}/{}",
            group.namespace().unwrap_or_default(),
            group.name_any()
        );
        let mut all = self.backoff.lock().unwrap_or_else(|p| p.into_inner());
        if group.meta().deletion_timestamp.is_some() {
            all.remove(&key);
            return None;
        }
        let failed: Vec<(String, i64)> = members
            .iter()
            .filter(|m| m.failed)
            .map(|m| (m.name.clone(), m.epoch))
            .collect();
        let entry = all.entry(key).or_default();
        let counted = entry.observe(&failed, now);
        if let Some(newest) = members
            .iter()
            .filter(|m| m.serving && !m.failed)
            .map(|m| m.epoch)
            .max()
        {
            entry.observe_serving(newest);
        }
        if counted && entry.failures() > 1 {
            tracing::warn!(
                failures = entry.failures(),
                "members keep failing; new members are delayed"
            );
        }
        entry.new_members_after(now)
    }
}
