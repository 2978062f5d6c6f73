//! The client the agent uses: `List`, `Get` and `GetAllocatableResources` on the kubelet's
//! PodResources socket, each call under one deadline.
//!
//! Each call opens its own connection: the kubelet recreates the socket when it restarts,
//! and the agent asks rarely (once per member verification), so a fresh connection costs
//! nothing and never talks to a socket that is gone. Every failure is a named
//! [`PodResourcesError`] so the caller can tell "not mounted" from "kubelet busy".

use crate::grpc::{self, Failure};
use crate::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, GetPodResourcesRequest,
    GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse, PodResources, path,
};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;

/// Why a PodResources call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodResourcesError {
    /// No socket at the path: the kubelet's pod-resources directory is not mounted, or
    /// the kubelet is not running.
    #[error(
        "the kubelet's PodResources socket {0} does not exist (is /var/lib/kubelet/pod-resources mounted?)"
    )]
    SocketMissing(PathBuf),
    /// The socket exists but nothing answers on it (connection refused, reset, or the
    /// server said UNAVAILABLE).
    #[error("the kubelet's PodResources socket {path} is unavailable: {detail}")]
    Unavailable {
        /// The socket.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// No answer within the deadline.
    #[error("{call} on the kubelet's PodResources socket got no answer within {after:?}")]
    Deadline {
        /// The method.
        call: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// The kubelet does not serve this method (too old, or its feature gate is off).
    #[error("the kubelet does not implement PodResources {call}: {message}")]
    Unimplemented {
        /// The method.
        call: &'static str,
        /// The kubelet's words.
        message: String,
    },
    /// Any other gRPC error.
    #[error("PodResources {call} failed with {code}: {message}")]
    Rpc {
        /// The method.
        call: &'static str,
        /// The gRPC status code, as words.
        code: String,
        /// The kubelet's words.
        message: String,
    },
}

/// A client of one kubelet's PodResources socket.
#[derive(Debug, Clone)]
pub struct PodResourcesClient {
    socket: PathBuf,
    deadline: Duration,
}

impl PodResourcesClient {
    /// A client of the socket at `socket`; every call (connect included) ends within
    /// `deadline`.
    pub fn new(socket: impl Into<PathBuf>, deadline: Duration) -> Self {
        Self {
            socket: socket.into(),
            deadline,
        }
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `List`: every Pod on the node with its resources.
    pub async fn list(&self) -> Result<Vec<PodResources>, PodResourcesError> {
        let r: ListPodResourcesResponse = self
            .call("List", path::LIST, ListPodResourcesRequest {})
            .await?;
        Ok(r.pod_resources)
    }

    /// `Get`: one Pod, `None` when the kubelet answers without it. Kubelets before 1.34
    /// serve it only with the `KubeletPodResourcesGet` gate; callers that must work
    /// everywhere use [`Self::list`].
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PodResources>, PodResourcesError> {
        let req = GetPodResourcesRequest {
            pod_name: name.into(),
            pod_namespace: namespace.into(),
        };
        let r: GetPodResourcesResponse = self.call("Get", path::GET, req).await?;
        Ok(r.pod_resources)
    }

    /// `GetAllocatableResources`: what the kubelet can hand out on this node.
    pub async fn allocatable(&self) -> Result<AllocatableResourcesResponse, PodResourcesError> {
        self.call(
            "GetAllocatableResources",
            path::GET_ALLOCATABLE,
            AllocatableResourcesRequest {},
        )
        .await
    }

    async fn call<Req, Resp>(
        &self,
        call: &'static str,
        method: &'static str,
        req: Req,
    ) -> Result<Resp, PodResourcesError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        grpc::unary(&self.socket, self.deadline, method, req)
            .await
            .map_err(|failure| match failure {
                Failure::SocketMissing => PodResourcesError::SocketMissing(self.socket.clone()),
                Failure::Unavailable(detail) => PodResourcesError::Unavailable {
                    path: self.socket.clone(),
                    detail,
                },
                Failure::Deadline => PodResourcesError::Deadline {
                    call,
                    after: self.deadline,
                },
                Failure::Status(status) if status.code() == Code::Unimplemented => {
                    PodResourcesError::Unimplemented {
                        call,
                        message: status.message().to_string(),
                    }
                }
                Failure::Status(status) => PodResourcesError::Rpc {
                    call,
                    code: status.code().description().to_string(),
                    message: status.message().to_string(),
                },
            })
    }
}
