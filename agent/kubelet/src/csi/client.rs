//! The kubelet's side of a CSI node plugin: the calls the e2e testbed makes as a kubelet
//! does, on the plugin's registration socket ([`RegistrationClient`]) and on its CSI
//! socket ([`CsiNodeClient`]).
//!
//! Each call opens its own connection and ends within one deadline, connect included, as
//! the PodResources client does; every failure is a named [`CsiError`], the gRPC code kept
//! as a [`Code`] so a caller can tell INVALID_ARGUMENT from NOT_FOUND from
//! PERMISSION_DENIED as the kubelet does.

use super::proto::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, NodeGetCapabilitiesRequest, NodeGetCapabilitiesResponse,
    NodeGetInfoRequest, NodeGetInfoResponse, NodePublishVolumeRequest, NodePublishVolumeResponse,
    NodeServiceCapability, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse,
    PluginCapability, ProbeRequest, ProbeResponse, path,
};
use super::registration::{self, InfoRequest, PluginInfo, RegistrationStatus};
use crate::grpc::{self, Failure};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;

/// Why a call to a CSI plugin gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsiError {
    /// No socket at the path: the plugin is not running, or not where it was expected.
    #[error("the plugin socket {0} does not exist (is the plugin running?)")]
    SocketMissing(PathBuf),
    /// The socket exists but nothing answers on it (connection refused, reset, or the
    /// plugin said UNAVAILABLE).
    #[error("the plugin socket {path} is unavailable: {detail}")]
    Unavailable {
        /// The socket.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// No answer within the deadline.
    #[error("{call} on a plugin socket got no answer within {after:?}")]
    Deadline {
        /// The method.
        call: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// The plugin answered with a gRPC error (UNIMPLEMENTED included).
    #[error("{call} failed with {code}: {message}")]
    Rpc {
        /// The method.
        call: &'static str,
        /// The gRPC status code.
        code: Code,
        /// The plugin's words.
        message: String,
    },
}

/// One plugin socket and the deadline of each call on it.
#[derive(Debug, Clone)]
struct Socket {
    path: PathBuf,
    deadline: Duration,
}

impl Socket {
    async fn call<Req, Resp>(
        &self,
        call: &'static str,
        method: &'static str,
        req: Req,
    ) -> Result<Resp, CsiError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        grpc::unary(&self.path, self.deadline, method, req)
            .await
            .map_err(|failure| match failure {
                Failure::SocketMissing => CsiError::SocketMissing(self.path.clone()),
                Failure::Unavailable(detail) => CsiError::Unavailable {
                    path: self.path.clone(),
                    detail,
                },
                Failure::Deadline => CsiError::Deadline {
                    call,
                    after: self.deadline,
                },
                Failure::Status(status) => CsiError::Rpc {
                    call,
                    code: status.code(),
                    message: status.message().to_string(),
                },
            })
    }
}

/// A client of one plugin's registration socket, as the kubelet's plugin watcher calls it.
#[derive(Debug, Clone)]
pub struct RegistrationClient(Socket);

impl RegistrationClient {
    /// A client of the socket at `socket`; every call (connect included) ends within
    /// `deadline`.
    pub fn new(socket: impl Into<PathBuf>, deadline: Duration) -> Self {
        Self(Socket {
            path: socket.into(),
            deadline,
        })
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.0.path
    }

    /// `GetInfo`: the plugin's type, name, CSI endpoint and versions.
    pub async fn get_info(&self) -> Result<PluginInfo, CsiError> {
        self.0
            .call("GetInfo", registration::path::GET_INFO, InfoRequest {})
            .await
    }

    /// `NotifyRegistrationStatus`: the kubelet's verdict; `error` is empty when
    /// `registered`.
    pub async fn notify(&self, registered: bool, error: &str) -> Result<(), CsiError> {
        let status = RegistrationStatus {
            plugin_registered: registered,
            error: error.into(),
        };
        let _: registration::RegistrationStatusResponse = self
            .0
            .call(
                "NotifyRegistrationStatus",
                registration::path::NOTIFY_REGISTRATION_STATUS,
                status,
            )
            .await?;
        Ok(())
    }
}

/// A client of one plugin's CSI socket (Identity and Node services).
#[derive(Debug, Clone)]
pub struct CsiNodeClient(Socket);

impl CsiNodeClient {
    /// A client of the socket at `socket`; every call (connect included) ends within
    /// `deadline`.
    pub fn new(socket: impl Into<PathBuf>, deadline: Duration) -> Self {
        Self(Socket {
            path: socket.into(),
            deadline,
        })
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.0.path
    }

    /// `Identity.GetPluginInfo`: the driver name and vendor version.
    pub async fn get_plugin_info(&self) -> Result<GetPluginInfoResponse, CsiError> {
        self.0
            .call(
                "GetPluginInfo",
                path::GET_PLUGIN_INFO,
                GetPluginInfoRequest {},
            )
            .await
    }

    /// `Identity.GetPluginCapabilities`.
    pub async fn get_plugin_capabilities(&self) -> Result<Vec<PluginCapability>, CsiError> {
        let r: GetPluginCapabilitiesResponse = self
            .0
            .call(
                "GetPluginCapabilities",
                path::GET_PLUGIN_CAPABILITIES,
                GetPluginCapabilitiesRequest {},
            )
            .await?;
        Ok(r.capabilities)
    }

    /// `Identity.Probe`: whether the plugin is ready (an unset answer means ready).
    pub async fn probe(&self) -> Result<bool, CsiError> {
        let r: ProbeResponse = self.0.call("Probe", path::PROBE, ProbeRequest {}).await?;
        Ok(r.ready.is_none_or(|ready| ready.value))
    }

    /// `Node.NodeGetInfo`: the node id the kubelet records in the CSINode object.
    pub async fn node_get_info(&self) -> Result<NodeGetInfoResponse, CsiError> {
        self.0
            .call("NodeGetInfo", path::NODE_GET_INFO, NodeGetInfoRequest {})
            .await
    }

    /// `Node.NodeGetCapabilities`: the optional Node methods the plugin implements.
    pub async fn node_get_capabilities(&self) -> Result<Vec<NodeServiceCapability>, CsiError> {
        let r: NodeGetCapabilitiesResponse = self
            .0
            .call(
                "NodeGetCapabilities",
                path::NODE_GET_CAPABILITIES,
                NodeGetCapabilitiesRequest {},
            )
            .await?;
        Ok(r.capabilities)
    }

    /// `Node.NodePublishVolume`.
    pub async fn node_publish(&self, request: NodePublishVolumeRequest) -> Result<(), CsiError> {
        let _: NodePublishVolumeResponse = self
            .0
            .call("NodePublishVolume", path::NODE_PUBLISH_VOLUME, request)
            .await?;
        Ok(())
    }

    /// `Node.NodeUnpublishVolume`.
    pub async fn node_unpublish(
        &self,
        request: NodeUnpublishVolumeRequest,
    ) -> Result<(), CsiError> {
        let _: NodeUnpublishVolumeResponse = self
            .0
            .call("NodeUnpublishVolume", path::NODE_UNPUBLISH_VOLUME, request)
            .await?;
        Ok(())
    }
}
