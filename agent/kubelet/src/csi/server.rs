//! A CSI node plugin for ephemeral inline volumes, served for the kubelet: Identity and
//! Node on the CSI socket, plugin registration on a second socket.
//!
//! The plugin's own work (what a volume is, how it appears at the target path) is the
//! caller's [`NodePlugin`]; this module speaks the protocol around it: who the plugin is,
//! that it has no controller and no staging (so the kubelet goes straight to
//! `NodePublishVolume`), the node id, the required fields of a publish, and the
//! registration handshake. Every other CSI method answers UNIMPLEMENTED.

use super::proto::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, NodeGetCapabilitiesRequest, NodeGetCapabilitiesResponse,
    NodeGetInfoRequest, NodeGetInfoResponse, NodePublishVolumeRequest, NodePublishVolumeResponse,
    NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse, ProbeRequest, ProbeResponse, path,
};
use super::registration::{
    self, InfoRequest, PLUGIN_TYPE_CSI, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    SUPPORTED_VERSIONS,
};
use crate::listen::{self, Answer, Route, ServeError, Serving};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;
use tonic::body::Body;

/// What the agent implements to be a CSI node plugin.
///
/// The calls are sync: the agent's work is a few file operations and a socket bind. They
/// run on the runtime's thread, not `spawn_blocking` (a thread hand-off costs more than
/// they do), so they must not block for long: no network calls, no waiting on locks held
/// across I/O. Requests reaching [`Self::publish`] and [`Self::unpublish`] already carry
/// the fields CSI calls required (volume id, target path, and for a publish the volume
/// capability); the rest is the plugin's to check.
pub trait NodePlugin: Send + Sync + 'static {
    /// The CSI driver name (the CSIDriver object's name), e.g. "local-api.hcomm.io".
    fn driver_name(&self) -> &str;
    /// The vendor version GetPluginInfo reports.
    fn vendor_version(&self) -> &str;
    /// NodeGetInfo's node_id (the Kubernetes node name).
    fn node_id(&self) -> &str;
    /// `NodePublishVolume`: make the volume appear at `request.target_path`. Must be
    /// idempotent (the kubelet retries), and answer with the CSI codes the kubelet knows:
    /// INVALID_ARGUMENT for a bad request, NOT_FOUND, ALREADY_EXISTS for a conflicting
    /// publish at the same path, PERMISSION_DENIED, INTERNAL.
    fn publish(&self, request: NodePublishVolumeRequest) -> Result<(), Status>;
    /// `NodeUnpublishVolume`: remove what the publish made; OK when it is already gone.
    fn unpublish(&self, request: NodeUnpublishVolumeRequest) -> Result<(), Status>;
    /// The kubelet's verdict on registration (NotifyRegistrationStatus).
    fn registration_status(&self, registered: bool, error: &str);
}

/// A running plugin; stops (and removes both sockets) on [`Self::shutdown`] or drop.
#[derive(Debug)]
pub struct NodePluginServer {
    csi_socket: PathBuf,
    registration_socket: Option<PathBuf>,
    serving: Serving,
}

impl NodePluginServer {
    /// The CSI socket (Identity and Node).
    pub fn csi_socket(&self) -> &Path {
        &self.csi_socket
    }

    /// The registration socket, when one is served.
    pub fn registration_socket(&self) -> Option<&Path> {
        self.registration_socket.as_deref()
    }

    /// Stops accepting, waits (at most `grace`) for open calls, removes the sockets.
    pub async fn shutdown(self, grace: Duration) {
        self.serving.shutdown(grace).await;
    }
}

/// Serves `plugin` on `csi_socket` and, when given, plugin registration on
/// `registration_socket` (in the kubelet's `plugins_registry` directory, so the kubelet
/// finds it). Both sockets get mode 0600: only root, which the kubelet runs as, may call.
///
/// `csi_socket` is also the endpoint registration reports, so it must be absolute and
/// the same path the kubelet sees (mount the plugin's directory at the host's path).
pub async fn serve_node_plugin(
    csi_socket: &Path,
    registration_socket: Option<&Path>,
    plugin: Arc<dyn NodePlugin>,
) -> Result<NodePluginServer, ServeError> {
    let endpoint = match csi_socket.to_str() {
        Some(e) if csi_socket.is_absolute() || registration_socket.is_none() => e.to_owned(),
        _ => {
            return Err(ServeError::Prepare {
                path: csi_socket.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the CSI endpoint registration reports must be an absolute UTF-8 path",
                ),
            });
        }
    };
    let shared = Arc::new(Shared { plugin, endpoint });
    let mut serving = Serving::default();
    // The CSI socket first: the kubelet calls NodeGetInfo on it as soon as registration
    // succeeds, and starts registering as soon as the registration socket appears.
    let csi = Route {
        shared: shared.clone(),
        answer: node,
    };
    serving.serve("CSI node plugin", listen::bind(csi_socket)?, csi);
    if let Some(socket) = registration_socket {
        let reg = Route {
            shared,
            answer: register,
        };
        serving.serve("CSI plugin registration", listen::bind(socket)?, reg);
    }
    Ok(NodePluginServer {
        csi_socket: csi_socket.to_path_buf(),
        registration_socket: registration_socket.map(Path::to_path_buf),
        serving,
    })
}

struct Shared {
    plugin: Arc<dyn NodePlugin>,
    endpoint: String,
}

/// Identity and Node.
fn node(shared: Arc<Shared>, req: http::Request<Body>) -> Answer {
    let plugin = shared.plugin.clone();
    Box::pin(async move {
        Ok(match req.uri().path() {
            path::GET_PLUGIN_INFO => {
                listen::unary(req, move |_: GetPluginInfoRequest| {
                    Ok(GetPluginInfoResponse {
                        name: plugin.driver_name().to_owned(),
                        vendor_version: plugin.vendor_version().to_owned(),
                        manifest: Default::default(),
                    })
                })
                .await
            }
            path::GET_PLUGIN_CAPABILITIES => {
                // No controller service: the kubelet neither attaches nor stages.
                listen::unary(req, |_: GetPluginCapabilitiesRequest| {
                    Ok(GetPluginCapabilitiesResponse::default())
                })
                .await
            }
            path::PROBE => {
                listen::unary(req, |_: ProbeRequest| {
                    Ok(ProbeResponse {
                        ready: Some(super::proto::BoolValue { value: true }),
                    })
                })
                .await
            }
            path::NODE_GET_CAPABILITIES => {
                // Neither STAGE_UNSTAGE_VOLUME nor VOLUME_MOUNT_GROUP.
                listen::unary(req, |_: NodeGetCapabilitiesRequest| {
                    Ok(NodeGetCapabilitiesResponse::default())
                })
                .await
            }
            path::NODE_GET_INFO => {
                listen::unary(req, move |_: NodeGetInfoRequest| {
                    Ok(NodeGetInfoResponse {
                        node_id: plugin.node_id().to_owned(),
                        max_volumes_per_node: 0,
                        accessible_topology: None,
                    })
                })
                .await
            }
            path::NODE_PUBLISH_VOLUME => {
                listen::unary(req, move |r: NodePublishVolumeRequest| {
                    required("volume_id", &r.volume_id)?;
                    required("target_path", &r.target_path)?;
                    if r.volume_capability.is_none() {
                        return Err(Status::invalid_argument("volume_capability is required"));
                    }
                    plugin.publish(r).map(|()| NodePublishVolumeResponse {})
                })
                .await
            }
            path::NODE_UNPUBLISH_VOLUME => {
                listen::unary(req, move |r: NodeUnpublishVolumeRequest| {
                    required("volume_id", &r.volume_id)?;
                    required("target_path", &r.target_path)?;
                    plugin.unpublish(r).map(|()| NodeUnpublishVolumeResponse {})
                })
                .await
            }
            _ => listen::unimplemented(&req),
        })
    })
}

/// Plugin registration.
fn register(shared: Arc<Shared>, req: http::Request<Body>) -> Answer {
    Box::pin(async move {
        Ok(match req.uri().path() {
            registration::path::GET_INFO => {
                listen::unary(req, move |_: InfoRequest| {
                    Ok(PluginInfo {
                        r#type: PLUGIN_TYPE_CSI.to_owned(),
                        name: shared.plugin.driver_name().to_owned(),
                        endpoint: shared.endpoint.clone(),
                        supported_versions: SUPPORTED_VERSIONS
                            .iter()
                            .map(|v| v.to_string())
                            .collect(),
                    })
                })
                .await
            }
            registration::path::NOTIFY_REGISTRATION_STATUS => {
                listen::unary(req, move |r: RegistrationStatus| {
                    shared
                        .plugin
                        .registration_status(r.plugin_registered, &r.error);
                    Ok(RegistrationStatusResponse {})
                })
                .await
            }
            _ => listen::unimplemented(&req),
        })
    })
}

/// INVALID_ARGUMENT when a field CSI calls required is empty, as the spec asks.
fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}
