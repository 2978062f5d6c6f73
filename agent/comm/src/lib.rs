//! hcomm's collective engine: one backend-neutral [`Communicator`] API ([`api`]) with a
//! portable TCP backend ([`tcp`]) and the run-time-loaded HCCL backend (`hccl`).
//!
//! Data flow of a collective on the TCP backend: [`tcp::TcpComm`] picks an algorithm, a pure
//! schedule (`schedule::*`) says who sends which slice to whom at which step, the reduction
//! kernels (`reduce`) combine slices in place, and the transport (`transport`) moves
//! length-prefixed, authenticated frames (`frame`, `auth`) over connections owned by an
//! [`tcp::Endpoint`] that outlives epochs, so elastic changes (`grow`, `shrink`, `split`)
//! reuse links. Nothing here knows about Kubernetes.

pub mod api;
mod auth;
pub mod bootstrap;
pub mod frame;
/// The HCCL backend (Ascend NPUs, `dlopen`ed at run time); the crate's only `unsafe` lives in
/// its FFI module.
pub mod hccl;
#[cfg(feature = "http")]
pub mod http_listener;
pub mod listen;
pub mod reduce;
pub mod schedule;
pub mod tcp;
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;
mod transport;

pub use api::{
    Algorithm, CommError, Communicator, CommunicatorExt, DataType, Element, ErrorContext,
    ParseError, ReduceOp, VLayout,
};
pub use hccl::{HcclBackend, HcclBackendConfig, HcclCommunicator, HcclError};
