//! The kubelet's PodResources v1 gRPC API over its Unix socket.
//!
//! The agent asks the kubelet which devices each Pod on its node really got ([`client`]);
//! the e2e testbed plays the kubelet's side of the same API ([`server`], behind the
//! `server` feature, which only the testbed enables). It is a crate of its own so the
//! gRPC stack (tonic, prost, h2) is compiled once and kept out of the crates that do not
//! speak gRPC, and so client and stand-in server are tested against each other here.

pub mod client;
pub mod proto;
#[cfg(feature = "server")]
pub mod server;

pub use client::{PodResourcesClient, PodResourcesError};
pub use proto::{ContainerDevices, ContainerResources, PodResources};
