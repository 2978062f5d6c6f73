//! The transport: an [`Endpoint`] is one process's network identity for a group — a listener
//! on the chosen interface, a pool of authenticated links to other endpoints keyed by their
//! endpoint id, and a mailbox that demultiplexes incoming data by communicator and tag.
//!
//! Endpoints outlive communicators: every epoch and sub-communicator of a group runs over
//! the same pool, which is why `grow` only dials the joiners and `shrink`/`split` dial
//! nobody. Links are made eagerly when a communicator is initialised (the lower rank dials
//! the higher), so failures show up at init rather than mid-collective. The endpoint also
//! serves rendezvous sessions for the [`crate::bootstrap::RootInfo`]s it creates.

mod config;
mod connection;
mod endpoint;
mod handshake;
pub mod iface;
mod inner;
pub mod mailbox;
mod rendezvous;
mod sessions;
mod spin;

pub use config::{COMM_LIMITS, EndpointConfig, EndpointStats, Rejection};
pub use connection::Connection;
pub use endpoint::Endpoint;
pub use iface::BindSpec;
pub(crate) use rendezvous::join as rendezvous_join;
