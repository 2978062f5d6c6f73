//! hcomm's worker library: the one way an inference engine talks to its node agent.
//!
//! Through the agent's local API ([`client`]) a worker learns its assignment and, per
//! epoch, where it stands in the workers' communicator ([`comm`]: the TCP engine's, and
//! for `backend: hccl` the HCCL one whose root info rank 0 makes and broadcasts over it).
//! [`Session`] builds each epoch's communicator beside the serving one and switches at a
//! safe point the engine chooses ([`epochs`] holds those rules, pure), reports load and
//! drain progress, and exposes "drain me". The reference worker (`examples/pool`) uses it
//! from Rust; C engines through the C ABI ([`ffi`], `include/hcomm_worker.h`); Python
//! engines through `python/hcomm_worker` (ctypes over `libhcomm_worker.so`).

pub mod client;
pub mod comm;
pub mod epochs;
pub mod error;
pub mod ffi;
pub mod session;

pub use client::{AgentClient, AgentConn, AgentEvent, WatchStream, WeightsState};
pub use error::{Error, Result};
pub use hcomm_crds::local_api::{Assignment, WorkerBackend, WorkerComm, WorkerLoad};
pub use session::Session;
