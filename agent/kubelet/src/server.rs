//! A stand-in for the kubelet's side of PodResources v1, for the e2e testbed.
//!
//! The testbed's device-plugin stand-in records each allocation in a
//! [`SharedPodResources`]; [`serve`] answers `List`, `Get` and `GetAllocatableResources`
//! from it on a Unix socket, as the kubelet does on
//! `/var/lib/kubelet/pod-resources/kubelet.sock`. Faults a real kubelet shows can be
//! injected: a slow answer ([`SharedPodResources::set_delay`]) and a kubelet whose `Get`
//! is off ([`SharedPodResources::set_get_enabled`]).

use crate::listen::{self, Answer, Route, Serving};
use crate::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources, path,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tonic::Status;
use tonic::body::Body;

pub use crate::listen::ServeError;

#[derive(Debug, Default)]
struct State {
    pods: Vec<PodResources>,
    allocatable: Vec<ContainerDevices>,
    delay: Duration,
    get_disabled: bool,
}

/// The Pods' resources the stand-in serves; cheap to clone, every clone sees the same set.
#[derive(Debug, Clone, Default)]
pub struct SharedPodResources(Arc<Mutex<State>>);

impl SharedPodResources {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep serving it.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a Pod, or replaces the entry with the same namespace and name.
    pub fn set_pod(&self, pod: PodResources) {
        let mut s = self.lock();
        match s
            .pods
            .iter_mut()
            .find(|p| p.namespace == pod.namespace && p.name == pod.name)
        {
            Some(slot) => *slot = pod,
            None => s.pods.push(pod),
        }
    }

    /// Removes a Pod; true when it was there.
    pub fn remove_pod(&self, namespace: &str, name: &str) -> bool {
        let mut s = self.lock();
        let before = s.pods.len();
        s.pods
            .retain(|p| !(p.namespace == namespace && p.name == name));
        s.pods.len() != before
    }

    /// Every Pod, in insertion order.
    pub fn pods(&self) -> Vec<PodResources> {
        self.lock().pods.clone()
    }

    /// What `GetAllocatableResources` answers.
    pub fn set_allocatable(&self, devices: Vec<ContainerDevices>) {
        self.lock().allocatable = devices;
    }

    /// Every answer waits this long first (a busy kubelet); zero by default.
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// With `false`, `Get` answers UNIMPLEMENTED, as a kubelet without the
    /// `KubeletPodResourcesGet` method does.
    pub fn set_get_enabled(&self, enabled: bool) {
        self.lock().get_disabled = !enabled;
    }

    fn delay(&self) -> Duration {
        self.lock().delay
    }
}

/// A running stand-in; stops (and removes its socket) on [`Self::shutdown`] or drop.
#[derive(Debug)]
pub struct PodResourcesServer {
    socket: PathBuf,
    serving: Serving,
}

impl PodResourcesServer {
    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops accepting, waits (at most `grace`) for open calls, removes the socket.
    pub async fn shutdown(self, grace: Duration) {
        self.serving.shutdown(grace).await;
    }
}

/// Serves `state` on a Unix socket at `socket` (mode 0600: only its owner may call),
/// replacing a stale socket file as the kubelet does when it restarts.
pub async fn serve(
    socket: &Path,
    state: SharedPodResources,
) -> Result<PodResourcesServer, ServeError> {
    let bound = listen::bind(socket)?;
    let mut serving = Serving::default();
    let lister = Route {
        shared: Arc::new(state),
        answer: lister,
    };
    serving.serve("PodResources stand-in", bound, lister);
    Ok(PodResourcesServer {
        socket: socket.to_path_buf(),
        serving,
    })
}

/// The `PodResourcesLister` service, after the stand-in's injected delay: routes by
/// method path to one unary handler each.
fn lister(state: Arc<SharedPodResources>, req: http::Request<Body>) -> Answer {
    let state = SharedPodResources::clone(&state);
    Box::pin(async move {
        let delay = state.delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(answer(state, req).await)
    })
}

async fn answer(state: SharedPodResources, req: http::Request<Body>) -> http::Response<Body> {
    match req.uri().path() {
        path::LIST => {
            listen::unary(req, move |_: ListPodResourcesRequest| {
                Ok(ListPodResourcesResponse {
                    pod_resources: state.pods(),
                })
            })
            .await
        }
        path::GET => {
            listen::unary(req, move |r: GetPodResourcesRequest| {
                let s = state.lock();
                if s.get_disabled {
                    return Err(Status::unimplemented(
                        "PodResources API Get method disabled",
                    ));
                }
                s.pods
                    .iter()
                    .find(|p| p.namespace == r.pod_namespace && p.name == r.pod_name)
                    .cloned()
                    .map(|p| GetPodResourcesResponse {
                        pod_resources: Some(p),
                    })
                    .ok_or_else(|| {
                        Status::not_found(format!(
                            "pod {} in namespace {} not found",
                            r.pod_name, r.pod_namespace
                        ))
                    })
            })
            .await
        }
        path::GET_ALLOCATABLE => {
            listen::unary(req, move |_: AllocatableResourcesRequest| {
                Ok(AllocatableResourcesResponse {
                    devices: state.lock().allocatable.clone(),
                    ..Default::default()
                })
            })
            .await
        }
        _ => listen::unimplemented(&req),
    }
}
