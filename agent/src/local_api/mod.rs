//! The local worker API: the inference worker on this node learns its assignment, reports
//! requests in flight, and hears about weights, drains and epochs over a Unix socket
//! (default `/run/hcomm/agent.sock`). Protocol in [`protocol`] and `agent/README.md`;
//! shared state in [`hub`]; the socket server in [`server`].

pub mod hub;
pub mod protocol;
pub mod server;

pub use hub::Hub;
pub use protocol::{Assignment, Notice};
