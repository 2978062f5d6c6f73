//! Following a Service's EndpointSlices with a kube-runtime reflector, as a gateway does:
//! every change of the slices recomputes the ready set ([`ready_endpoints`]) and publishes
//! it on a watch channel, which the balancer reads.

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::endpoints::{Endpoint, SERVICE_NAME_LABEL, ready_endpoints};

/// A running follower; dropping it stops the watch.
pub struct Follower {
    rx: watch::Receiver<Vec<Endpoint>>,
    store: Store<EndpointSlice>,
    task: JoinHandle<()>,
}

impl Follower {
    /// The ready endpoints, as they change.
    pub fn endpoints(&self) -> watch::Receiver<Vec<Endpoint>> {
        self.rx.clone()
    }

    /// The slices as last seen (for diagnostics).
    pub fn slices(&self) -> Vec<EndpointSlice> {
        self.store.state().iter().map(|s| (**s).clone()).collect()
    }

    /// Waits until the first full list of slices arrived (bounded by the caller).
    pub async fn wait_synced(&self) -> bool {
        self.store.wait_until_ready().await.is_ok()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts following the EndpointSlices of Service `service` in `namespace`.
/// Watch errors are retried with kube-runtime's default backoff; the last good set stays
/// published meanwhile.
pub fn follow(client: kube::Client, namespace: &str, service: &str) -> Follower {
    let api: Api<EndpointSlice> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={service}"));
    let (store, writer) = reflector::store();
    let (tx, rx) = watch::channel(Vec::new());
    let reader = store.clone();
    let service = service.to_owned();
    let task = tokio::spawn(async move {
        let mut events = reflector::reflector(writer, watcher::watcher(api, config))
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            match ev {
                // The store is consistent after these (a relist swaps it at InitDone).
                Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => {
                    let slices: Vec<EndpointSlice> =
                        reader.state().iter().map(|s| (**s).clone()).collect();
                    let ready = ready_endpoints(&slices);
                    tx.send_if_modified(|cur| {
                        if *cur == ready {
                            return false;
                        }
                        tracing::info!(
                            service = %service,
                            ready = ?ready.iter().map(Endpoint::label).collect::<Vec<_>>(),
                            "ready endpoints changed"
                        );
                        *cur = ready;
                        true
                    });
                }
                Ok(Event::Init | Event::InitApply(_)) => {}
                Err(e) => {
                    tracing::warn!(service = %service, error = %e, "EndpointSlice watch error; retrying")
                }
            }
        }
    });
    Follower { rx, store, task }
}
