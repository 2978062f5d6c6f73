//! The local worker API: the inference worker on this node learns its assignment, reports
//! requests in flight, and hears about weights, drains and epochs over a Unix socket
//! (default `/run/hcomm/agent.sock`). Protocol in `hcomm_crds::local_api` and `agent/README.md`;
//! shared state in [`hub`]; the socket server in [`server`].

pub mod hub;
pub mod server;

pub use hcomm_crds::local_api::{Assignment, Notice};
pub use hub::Hub;
