//! hcomm's node agent (`hcomm-agent`): runs on every node and owns the communication path
//! there.
//!
//! Data flow: [`inventory`] observes the node and publishes its `HcommNode`;
//! [`member::driver`] watches the member Pods on this node and runs each through the
//! lifecycle state machine ([`member::state`]): verification ([`nic`]: data NIC choice,
//! link probes, device/version/shm checks) → weight sync (through
//! [`member::weights::WeightsSyncer`], implemented on the [`weights`] engine by
//! [`member::weights_sync::EngineSyncer`]) → joining the group's domain on the TCP engine
//! ([`member::domain`]) → readiness gate → drain → leave. The inference worker talks to the
//! agent over [`local_api`]; [`health`] probes links and the domain; [`metrics`] exports
//! Prometheus text; [`diagnose`] runs the operator's checklist. Kubernetes I/O stays at the
//! edges (`run`, `member::adapters` behind `member::ports`, `member::driver`,
//! `inventory::publish`); the decisions are pure functions tested on their own, and the
//! member task is tested against in-memory fakes of its ports.

pub mod ascend;
pub mod cli;
pub mod config;
pub mod diagnose;
pub mod error;
pub mod group_secrets;
pub mod health;
pub mod inventory;
pub mod local_api;
pub mod member;
pub mod metrics;
pub mod nic;
pub mod probes;
pub mod run;
pub mod weights;

pub use config::{AgentConfig, Context};
pub use error::{Error, Result};

/// The field manager of every write the agent makes (server-side apply, status patches).
pub const FIELD_MANAGER: &str = "hcomm-agent";
