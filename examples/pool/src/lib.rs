//! The reference inference worker and router of hcomm's examples: what a real engine and
//! a real gateway do with an elastic pool, reduced to what proves the contract.
//!
//! - [`worker`] (`hcomm-worker`): learns its assignment from the node agent over the
//!   local Unix-socket API (through the worker library, `hcomm_worker`), loads (pins and digests) the weights the
//!   agent says are ready, serves `POST /generate` only then, reports requests in flight,
//!   and stops taking work when told to drain.
//! - [`router`] (`hcomm-router serve`): follows a Service's EndpointSlices, keeps the
//!   ready endpoints, spreads requests over them and retries a 503 or a reset on another
//!   one, as Envoy or an inference scheduler would.
//! - [`load`] (`hcomm-router load`): steady load through the router with per-request
//!   records and digest checks, so a harness can show that no request failed and none was
//!   answered by a member with the wrong weights while the pool scaled.

pub mod error;
pub mod flags;
pub mod load;
pub mod proxy;
pub mod router;
pub mod worker;

pub use error::{Error, Result};
