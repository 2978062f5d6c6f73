//! A stand-in for the kubelet's side of PodResources v1, for the e2e testbed.
//!
//! The testbed's device-plugin stand-in records each allocation in a
//! [`SharedPodResources`]; [`serve`] answers `List`, `Get` and `GetAllocatableResources`
//! from it on a Unix socket, as the kubelet does on
//! `/var/lib/kubelet/pod-resources/kubelet.sock`. Faults a real kubelet shows can be
//! injected: a slow answer ([`SharedPodResources::set_delay`]) and a kubelet whose `Get`
//! is off ([`SharedPodResources::set_get_enabled`]).

use crate::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources, path,
};
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::body::Body;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// Why the stand-in could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket's directory or a stale socket could not be prepared.
    #[error("cannot prepare the PodResources socket {path}: {source}")]
    Prepare {
        /// The socket.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Binding the socket failed.
    #[error("cannot listen on the PodResources socket {path}: {source}")]
    Bind {
        /// The socket.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

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
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl PodResourcesServer {
    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops accepting, waits (at most `grace`) for open calls, removes the socket.
    pub async fn shutdown(mut self, grace: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(grace, &mut self.task).await.is_err() {
            self.task.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for PodResourcesServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            self.task.abort();
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

/// Serves `state` on a Unix socket at `socket`, replacing a stale socket file as the
/// kubelet does when it restarts.
pub async fn serve(
    socket: &Path,
    state: SharedPodResources,
) -> Result<PodResourcesServer, ServeError> {
    let prepare = |source| ServeError::Prepare {
        path: socket.to_path_buf(),
        source,
    };
    if let Some(dir) = socket.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(prepare)?;
    }
    match tokio::fs::remove_file(socket).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(prepare(e)),
    }
    let listener = tokio::net::UnixListener::bind(socket).map_err(|source| ServeError::Bind {
        path: socket.to_path_buf(),
        source,
    })?;
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let (stop, stopped) = oneshot::channel::<()>();
    let lister = Lister { state };
    let task = tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
            .serve_with_incoming_shutdown(lister, incoming, async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = result {
            eprintln!("PodResources stand-in stopped: {e}");
        }
    });
    Ok(PodResourcesServer {
        socket: socket.to_path_buf(),
        stop: Some(stop),
        task,
    })
}

/// The `PodResourcesLister` service: routes by method path to one unary handler each.
#[derive(Debug, Clone)]
struct Lister {
    state: SharedPodResources,
}

type Answer = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

impl tower::Service<http::Request<Body>> for Lister {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Answer {
        let state = self.state.clone();
        Box::pin(async move {
            let delay = state.delay();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(answer(state, req).await)
        })
    }
}

async fn answer(state: SharedPodResources, req: http::Request<Body>) -> http::Response<Body> {
    match req.uri().path() {
        path::LIST => {
            let handler = tower::service_fn(move |_: Request<ListPodResourcesRequest>| {
                let pod_resources = state.pods();
                async move { Ok::<_, Status>(Response::new(ListPodResourcesResponse { pod_resources })) }
            });
            let codec: ProstCodec<ListPodResourcesResponse, ListPodResourcesRequest> =
                ProstCodec::default();
            tonic::server::Grpc::new(codec).unary(handler, req).await
        }
        path::GET => {
            let handler = tower::service_fn(move |r: Request<GetPodResourcesRequest>| {
                let r = r.into_inner();
                let s = state.lock();
                let answer = if s.get_disabled {
                    Err(Status::unimplemented(
                        "PodResources API Get method disabled",
                    ))
                } else {
                    s.pods
                        .iter()
                        .find(|p| p.namespace == r.pod_namespace && p.name == r.pod_name)
                        .cloned()
                        .map(|p| {
                            Response::new(GetPodResourcesResponse {
                                pod_resources: Some(p),
                            })
                        })
                        .ok_or_else(|| {
                            Status::not_found(format!(
                                "pod {} in namespace {} not found",
                                r.pod_name, r.pod_namespace
                            ))
                        })
                };
                drop(s);
                async move { answer }
            });
            let codec: ProstCodec<GetPodResourcesResponse, GetPodResourcesRequest> =
                ProstCodec::default();
            tonic::server::Grpc::new(codec).unary(handler, req).await
        }
        path::GET_ALLOCATABLE => {
            let handler = tower::service_fn(move |_: Request<AllocatableResourcesRequest>| {
                let devices = state.lock().allocatable.clone();
                async move {
                    Ok::<_, Status>(Response::new(AllocatableResourcesResponse {
                        devices,
                        ..Default::default()
                    }))
                }
            });
            let codec: ProstCodec<AllocatableResourcesResponse, AllocatableResourcesRequest> =
                ProstCodec::default();
            tonic::server::Grpc::new(codec).unary(handler, req).await
        }
        other => Status::unimplemented(format!("unknown method {other}")).into_http(),
    }
}
