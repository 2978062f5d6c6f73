//! The member lifecycle on this node: the Pod watch ([`driver`]) runs a task per member
//! ([`task`]) that drives the pure state machine ([`state`]) through the member's ports
//! ([`ports`]; production [`adapters`], in-memory fakes for tests): verification
//! ([`verify`], [`versions_check`]: an `hccl` group's nodes run one driver and CANN, and
//! [`runtime`]: the group backend's libraries load), weight sync (the [`weights::WeightsSyncer`] seam, implemented by
//! [`weights_sync::EngineSyncer`]), joining the domain ([`domain`], from the rank table:
//! [`ranktable`], [`group`]) and drain ([`stages`]), writing Pod conditions
//! ([`conditions`], until they land: [`condition_writer`]) and sync Warning Events
//! ([`sync_warnings`]); a group watch wakes the members of a group that changed
//! ([`nudge`]). The agent decides from the rank table and
//! its own observations, never from the group's status (see [`group`]).

pub mod adapters;
pub mod allocation;
pub mod allocation_check;
#[cfg(test)]
mod allocation_tests;
pub mod condition_writer;
pub mod conditions;
pub mod domain;
pub mod driver;
pub mod early_sync;
#[cfg(test)]
mod early_sync_tests;
#[cfg(test)]
mod fakes;
pub mod group;
#[cfg(test)]
mod npu_task_tests;
pub mod nudge;
pub mod ports;
pub mod prefetch;
pub mod ranktable;
pub mod ranktable_members;
pub mod runtime;
pub mod spec;
pub mod stages;
pub mod state;
pub mod sync_warnings;
pub mod task;
#[cfg(test)]
mod task_kit;
#[cfg(test)]
mod task_tests;
pub mod verify;
pub mod versions_check;
pub mod versions_stage;
#[cfg(test)]
mod versions_task_tests;
pub mod weights;
pub mod weights_authority;
pub mod weights_sync;

pub use state::{Action, Event, Phase, step};
