//! The data NIC: parsing `socketIfname` ([`ifname`]), choosing the interface ([`select`]),
//! proving links to peers ([`probe`]) and deciding `hcomm.io/verified` ([`verify`]).
//!
//! Data flow: inventory NICs → [`select::select_data_nic`] → [`probe::probe_all`] to every
//! peer's data address (and, for the unreachable ones, through the other interfaces) →
//! [`verify::decide`] → the Pod condition written by the member driver.

pub mod ifname;
pub mod probe;
pub mod select;
pub mod verify;

pub use ifname::IfnameMatcher;
pub use select::{Chosen, NicRule, select_data_nic};
