//! A conformance simulator of Huawei's HCCL and ACL runtime, for machines without NPUs.
//!
//! Role: a TEST DOUBLE. Built as a shared object, symlinked as `libhccl.so` and
//! `libascendcl.so` into a directory the HCCL backend's search path points at, it exports the
//! entry points the backend `dlopen`s (`exports`) with the public headers' prototypes and
//! error codes (`codes`), and runs them on host memory between processes over TCP:
//! - `memory`: "device" memory from `aclrtMalloc`, freed once; double free, free of a buffer
//!   an in-flight collective still uses and use after free are recorded (`violation`);
//! - `stream`: ACL streams as ordered task queues on their own thread, synchronised with or
//!   without a timeout;
//! - `comm`: root-info rendezvous (the root rank listens on its device IP, the others connect
//!   from theirs), collectives relayed through rank 0 and checked to match across ranks;
//! - `faults`: the device IP (of the NPU behind the bound device, from the node's hccn.conf),
//!   and slow op, hung op, dead peer, wrong device IP, async error, from the
//!   environment at first use; `HCCL_CONNECT_TIMEOUT` / `HCCL_EXEC_TIMEOUT` /
//!   `HCCL_BUFFSIZE` are honoured as the real library reads them.
//!
//! It never ships: not in the chart, not linked into the agent. It uses no product code (only
//! the contract's environment names), so a product path cannot look right because the
//! simulator shares its mistakes.

mod codes;
mod comm;
mod exports;
mod faults;
mod memory;
mod reduce;
mod stream;
mod violation;
mod wire;

pub use codes::*;
pub use faults::{DEVICE_IP_ENV, FAULT_ENV, HCCN_CONF_ENV};
pub use violation::VIOLATIONS_ENV;
