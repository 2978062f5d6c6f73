//! The member lifecycle on this node: the Pod watch ([`driver`]) runs a task per member
//! ([`task`]) that drives the pure state machine ([`state`]) through verification
//! ([`verify`]), weight sync (the [`weights::WeightsSyncer`] seam, implemented by
//! [`weights_sync::EngineSyncer`]), joining the domain
//! ([`domain`], from the rank table: [`ranktable`], [`group`]) and drain, writing Pod
//! conditions ([`conditions`]) and sync Warning Events ([`sync_warnings`]); a group watch
//! wakes the members of a group that changed ([`nudge`]).

pub mod conditions;
pub mod domain;
pub mod driver;
pub mod group;
pub mod nudge;
pub mod ranktable;
pub mod spec;
pub mod state;
pub mod sync_warnings;
pub mod task;
pub mod verify;
pub mod weights;
pub mod weights_sync;

pub use state::{Action, Event, Phase, step};
