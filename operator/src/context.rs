//! Everything a reconcile needs, in one place: the client, the metrics, the Event recorder
//! and the watch scope.

use std::sync::Arc;

use kube::runtime::events::{Recorder, Reporter};

use crate::links::LinkPolicy;
use crate::metrics::Metrics;

/// Shared by every reconcile.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: kube::Client,
    /// The process' metrics.
    pub metrics: Arc<Metrics>,
    /// Publishes Kubernetes Events as `hcomm-operator`.
    pub recorder: Recorder,
    /// Only this namespace is watched (and its member Pods counted), when set.
    pub namespace: Option<String>,
    /// When a link test is too old to count, and when a link is slow.
    pub links: LinkPolicy,
    /// Held from reading the cluster to creating joiner Pods. Placement counts the devices
    /// every group's Pods hold, so two groups reconciled at once could otherwise both
    /// give a new member the same free device; with it, the second reads the first's
    /// Pods (lists are served from etcd, not a cache).
    pub placement: std::sync::Arc<tokio::sync::Mutex<()>>,
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
            controller: crate::apply::FIELD_MANAGER.into(),
            instance: Some(identity.to_owned()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            namespace,
            links: LinkPolicy::default(),
            placement: std::sync::Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}
