//! placeholder
pub mod controlplane;
pub mod hosts;
