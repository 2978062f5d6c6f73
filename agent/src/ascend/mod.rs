//! Ascend integration on the node: the NPUs' own RoCE network ([`hccn`]), checked before a
//! member joins and published in `HcommNode`.

pub mod hccn;
