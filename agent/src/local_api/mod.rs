//! The local worker API: the inference worker on this node learns its assignment, reports
//! requests in flight, and hears about weights, drains and epochs over a Unix socket — its
//! Pod's own ([`pods`]), the only one mounted into the Pod: in the Pod's CSI volume, which
//! the kubelet publishes through the agent's driver ([`csi`], [`csi_target`]), or in
//! `<--pod-sockets-dir>/<pod uid>/` for a hostPath volume. Node tools use the node socket
//! (`--socket`, mounted into no Pod).
//! Protocol in `hcomm_crds::local_api` and `agent/README.md`; shared state in [`hub`];
//! who may call in [`caller`]; the socket server in [`server`]; the worker's per-epoch
//! communicator placement in [`bootstrap`].

pub mod bootstrap;
pub mod caller;
pub mod csi;
pub mod csi_target;
pub mod hub;
pub mod pods;
pub mod server;

pub use hcomm_crds::local_api::{Assignment, Notice};
pub use hub::Hub;
