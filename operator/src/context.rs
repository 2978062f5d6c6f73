//! Everything a reconcile needs, in one place: the client, the metrics, the Event recorder
//! and the watch scope.

use std::sync::Arc;

use kube::runtime::events::{Recorder, Reporter};

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
}

impl Context {
    /// A context for `client`, reporting Events as `hcomm-operator` from `identity`.
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
        }
    }
}
