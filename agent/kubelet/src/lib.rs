//! The kubelet's gRPC APIs over Unix sockets: PodResources v1, and the CSI node plugin with
//! the plugin registration that introduces it to the kubelet.
//!
//! The agent asks the kubelet which devices each Pod on its node really got ([`client`]);
//! the e2e testbed plays the kubelet's side of the same API (`server`, behind the
//! `server` feature, which only the testbed enables). The agent is also a CSI node plugin
//! of ephemeral inline volumes ([`csi`]: the plugin behind the `csi-node` feature, the
//! kubelet's calls to it always compiled, for the testbed). It is a crate of its own so
//! the gRPC stack (tonic, prost, h2) is compiled once and kept out of the crates that do
//! not speak gRPC, and so every client and server here is tested against its other side.

#[cfg(any(feature = "server", feature = "csi-node", feature = "device-plugin"))]
mod any_authority;
pub mod client;
pub mod csi;
#[cfg(feature = "device-plugin")]
pub mod device_plugin;
mod grpc;
#[cfg(any(feature = "server", feature = "csi-node", feature = "device-plugin"))]
mod listen;
pub mod proto;
#[cfg(feature = "server")]
pub mod server;

pub use client::{PodResourcesClient, PodResourcesError};
pub use csi::client::{CsiError, CsiNodeClient, RegistrationClient};
#[cfg(feature = "csi-node")]
pub use csi::server::{NodePlugin, NodePluginServer, serve_node_plugin};
#[cfg(any(feature = "server", feature = "csi-node", feature = "device-plugin"))]
pub use listen::ServeError;
pub use proto::{ContainerDevices, ContainerResources, PodResources};
/// A gRPC status and its code, as a `NodePlugin` answers and a
/// [`CsiError::Rpc`] carries, so callers need no tonic of their own.
pub use tonic::{Code, Status};
