//! Following a Service with a kube-runtime reflector, as a gateway does: every change
//! recomputes the ready set and publishes it on a watch channel, which the balancer reads.
//! The source is the Service's EndpointSlices ([`ready_endpoints`]) or, where the API
//! refuses the Pods' addresses in slices (loopback test hosts), its Pods
//! ([`ready_pod_endpoints`]).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::endpoints::{
    Endpoint, PORT_NAME, SERVICE_NAME_LABEL, ready_endpoints, ready_pod_endpoints,
};

/// Where the ready backends come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    /// The Service's EndpointSlices (what gateways and kube-proxy follow).
    EndpointSlices,
    /// The Pods the Service selects, by their Ready condition (for Pod addresses the
    /// EndpointSlice API refuses, such as `127.x`).
    Pods,
}

impl std::str::FromStr for Discovery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "endpointslices" => Ok(Discovery::EndpointSlices),
            "pods" => Ok(Discovery::Pods),
            other => Err(format!(
                "discovery {other:?}: expected endpointslices or pods"
            )),
        }
    }
}

/// A running follower; dropping it stops the watch.
pub struct Follower {
    rx: watch::Receiver<Vec<Endpoint>>,
    task: JoinHandle<()>,
}

impl Follower {
    /// The ready endpoints, as they change.
    pub fn endpoints(&self) -> watch::Receiver<Vec<Endpoint>> {
        self.rx.clone()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts following Service `service` in `namespace`. Watch errors are retried with
/// kube-runtime's default backoff; the last good set stays published meanwhile.
pub fn follow(
    client: kube::Client,
    namespace: &str,
    service: &str,
    discovery: Discovery,
) -> Follower {
    let (tx, rx) = watch::channel(Vec::new());
    let (namespace, service) = (namespace.to_owned(), service.to_owned());
    let task = match discovery {
        Discovery::EndpointSlices => {
            let api: Api<EndpointSlice> = Api::namespaced(client, &namespace);
            let config =
                watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={service}"));
            tokio::spawn(reflect(api, config, service, tx, |slices| {
                ready_endpoints(slices)
            }))
        }
        Discovery::Pods => tokio::spawn(async move {
            let (selector, target) = service_selector(&client, &namespace, &service).await;
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let config = watcher::Config::default().labels(&selector);
            reflect(api, config, service, tx, move |pods| {
                ready_pod_endpoints(pods, &target)
            })
            .await;
        }),
    };
    Follower { rx, task }
}

/// Mirrors the objects `config` selects and publishes `ready(objects)` on every change.
async fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    service: String,
    tx: watch::Sender<Vec<Endpoint>>,
    ready: impl Fn(&[K]) -> Vec<Endpoint>,
) where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer): (Store<K>, _) = reflector::store();
    let mut events = reflector::reflector(writer, watcher::watcher(api, config))
        .default_backoff()
        .boxed();
    while let Some(ev) = events.next().await {
        match ev {
            // The store is consistent after these (a relist swaps it at InitDone).
            Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => {
                let objects: Vec<K> = reader.state().iter().map(|o| (**o).clone()).collect();
                let now = ready(&objects);
                tx.send_if_modified(|cur| {
                    if *cur == now {
                        return false;
                    }
                    tracing::info!(
                        service = %service,
                        ready = ?now.iter().map(Endpoint::label).collect::<Vec<_>>(),
                        "ready endpoints changed"
                    );
                    *cur = now;
                    true
                });
            }
            Ok(Event::Init | Event::InitApply(_)) => {}
            Err(e) => {
                tracing::warn!(service = %service, error = %e, "watch error; retrying")
            }
        }
    }
}

/// The Service's Pod selector (`k=v,...`) and target port (of its port named `http`, else
/// its first), read until it can be (a Service created after the router is waited for).
async fn service_selector(
    client: &kube::Client,
    namespace: &str,
    service: &str,
) -> (String, IntOrString) {
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    loop {
        match api.get(service).await {
            Ok(svc) => {
                let spec = svc.spec.unwrap_or_default();
                let selector = spec
                    .selector
                    .unwrap_or_default()
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                let ports = spec.ports.unwrap_or_default();
                let port = ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(PORT_NAME))
                    .or_else(|| ports.first());
                let target = port
                    .and_then(|p| p.target_port.clone())
                    .or_else(|| port.map(|p| IntOrString::Int(p.port)))
                    .unwrap_or(IntOrString::String(PORT_NAME.into()));
                return (selector, target);
            }
            Err(e) => {
                tracing::warn!(%service, error = %e, "reading the Service; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
