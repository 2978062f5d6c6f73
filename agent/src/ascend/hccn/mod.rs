//! The NPU network through Huawei's tools: `/etc/hccn.conf` ([`conf`]), the `hccn_tool`
//! runner ([`runner`], one call at a time per node, each with a deadline) and the pure
//! parsers of its documented outputs ([`output`]); what one device looks like
//! ([`observe`]); the pre-join check ([`check`]: I/O through the [`port::NpuNetwork`]
//! port, the verdict in [`decide`], pure); the production port ([`live`]).
//!
//! Formats follow the public documentation (ASCEND.md §3), never a simulator.

pub mod check;
pub mod conf;
pub mod decide;
pub mod live;
pub mod observe;
pub mod output;
pub mod port;
pub mod runner;
