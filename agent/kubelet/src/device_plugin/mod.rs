//! A device plugin as the kubelet's device manager knows one (API v1beta1): it serves
//! `DevicePlugin` on a socket in the kubelet's device-plugin folder and introduces itself
//! with `Register` on the kubelet's own socket there; the kubelet then streams its
//! devices (ListAndWatch), advertises them as the Node's extended resource, picks devices
//! for each container that requests them (asking GetPreferredAllocation first) and calls
//! Allocate, whose environment the container starts with. PodResources then reports what
//! the kubelet really allocated.
//!
//! This is the testbed's Ascend device plugin (behind the `device-plugin` feature; the
//! agent never enables it): what it advertises and what Allocate answers are the
//! caller's ([`DevicePlugin`]).

pub mod proto;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_stream::StreamExt;
use tonic::Status;
use tonic::body::Body;

use crate::grpc::{self, Failure};
use crate::listen::{self, Answer, Route, ServeError, Serving};
use proto::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse, RegisterRequest, path,
};

/// What a plugin decides; the server does the protocol.
pub trait DevicePlugin: Send + Sync + 'static {
    /// The environment of a container given `devices` (their ids).
    fn allocate(&self, devices: &[String]) -> Result<ContainerAllocateResponse, Status>;

    /// Which `size` devices of `available` to hand out, `must_include` among them.
    fn preferred(&self, available: &[String], must_include: &[String], size: usize) -> Vec<String>;
}

/// Why registering with the kubelet failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The kubelet's socket is not there (no kubelet, or another device-plugin folder).
    #[error("the kubelet's device-plugin socket {0} does not exist")]
    NoKubelet(PathBuf),
    /// The kubelet did not answer, or refused.
    #[error("Register at {socket}: {detail}")]
    Failed {
        /// The kubelet's socket.
        socket: PathBuf,
        /// What happened.
        detail: String,
    },
}

/// A running plugin; it stops, and its socket goes, when it drops.
pub struct DevicePluginServer {
    dir: PathBuf,
    socket_name: String,
    resource: String,
    /// Kept while the plugin runs: ListAndWatch streams its devices until it drops.
    _devices: watch::Sender<Vec<Device>>,
    _serving: Serving,
}

impl std::fmt::Debug for DevicePluginServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePluginServer")
            .field("socket", &self.dir.join(&self.socket_name))
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// Serves `plugin` for `resource` on `<dir>/<socket_name>` (mode 0600), every one of
/// `devices` healthy. It is not yet known to the kubelet: [`DevicePluginServer::register`].
pub async fn serve_device_plugin(
    dir: &Path,
    socket_name: &str,
    resource: &str,
    devices: Vec<String>,
    plugin: Arc<dyn DevicePlugin>,
) -> Result<DevicePluginServer, ServeError> {
    let list = devices
        .into_iter()
        .map(|id| Device {
            id,
            health: proto::HEALTHY.to_owned(),
        })
        .collect();
    let (devices, receiver) = watch::channel(list);
    let shared = Arc::new(Shared {
        plugin,
        devices: receiver,
    });
    let mut serving = Serving::default();
    let bound = listen::bind(&dir.join(socket_name))?;
    serving.serve("device plugin", bound, Route { shared, answer });
    Ok(DevicePluginServer {
        dir: dir.to_path_buf(),
        socket_name: socket_name.to_owned(),
        resource: resource.to_owned(),
        _devices: devices,
        _serving: serving,
    })
}

impl DevicePluginServer {
    /// Introduces the plugin to the kubelet on `<dir>/kubelet.sock`, within `deadline`.
    /// Again after a kubelet restart (which removes every plugin's socket, this one's
    /// too: serve again first).
    pub async fn register(&self, deadline: Duration) -> Result<(), RegisterError> {
        let socket = self.dir.join(proto::KUBELET_SOCKET);
        let request = RegisterRequest {
            version: proto::VERSION.to_owned(),
            endpoint: self.socket_name.clone(),
            resource_name: self.resource.clone(),
            options: Some(OPTIONS),
        };
        let failed = |detail: String| RegisterError::Failed {
            socket: socket.clone(),
            detail,
        };
        let answer: Result<Empty, Failure> =
            grpc::unary(&socket, deadline, path::REGISTER, request).await;
        match answer {
            Ok(Empty {}) => Ok(()),
            Err(Failure::SocketMissing) => Err(RegisterError::NoKubelet(socket.clone())),
            Err(Failure::Unavailable(detail)) => Err(failed(detail)),
            Err(Failure::Deadline) => Err(failed(format!("no answer within {deadline:?}"))),
            Err(Failure::Status(status)) => {
                Err(failed(format!("{:?}: {}", status.code(), status.message())))
            }
        }
    }
}

/// No PreStartContainer; a GetPreferredAllocation before each choice.
const OPTIONS: DevicePluginOptions = DevicePluginOptions {
    pre_start_required: false,
    get_preferred_allocation_available: true,
};

struct Shared {
    plugin: Arc<dyn DevicePlugin>,
    devices: watch::Receiver<Vec<Device>>,
}

fn answer(shared: Arc<Shared>, req: http::Request<Body>) -> Answer {
    Box::pin(async move {
        let plugin = shared.plugin.clone();
        Ok(match req.uri().path() {
            path::GET_OPTIONS => listen::unary(req, |_: Empty| Ok(OPTIONS)).await,
            path::LIST_AND_WATCH => {
                let stream = tokio_stream::wrappers::WatchStream::new(shared.devices.clone())
                    .map(|devices| Ok(ListAndWatchResponse { devices }));
                listen::server_streaming::<Empty, _, _>(req, stream).await
            }
            path::GET_PREFERRED_ALLOCATION => {
                listen::unary(req, move |r: PreferredAllocationRequest| {
                    let container_responses = r
                        .container_requests
                        .iter()
                        .map(|c| ContainerPreferredAllocationResponse {
                            device_ids: plugin.preferred(
                                &c.available_device_ids,
                                &c.must_include_device_ids,
                                usize::try_from(c.allocation_size).unwrap_or(0),
                            ),
                        })
                        .collect();
                    Ok(PreferredAllocationResponse {
                        container_responses,
                    })
                })
                .await
            }
            path::ALLOCATE => {
                listen::unary(req, move |r: AllocateRequest| {
                    let container_responses = r
                        .container_requests
                        .iter()
                        .map(|c| plugin.allocate(&c.devices_ids))
                        .collect::<Result<_, _>>()?;
                    Ok(AllocateResponse {
                        container_responses,
                    })
                })
                .await
            }
            path::PRE_START_CONTAINER => {
                listen::unary(req, |_: PreStartContainerRequest| {
                    Ok(PreStartContainerResponse {})
                })
                .await
            }
            _ => listen::unimplemented(&req),
        })
    })
}
