//! `HcommGroup`: one elastic pool of inference workers sharing one communication domain.

mod spec;
mod status;

pub use spec::*;
pub use status::*;
