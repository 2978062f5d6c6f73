//! The HCCL backend: Huawei's collective library on Ascend NPUs, bound at run time.
//!
//! Where it sits: the agent's comm path picks a backend per `HcommGroup` (`spec.comm.backend`);
//! `tcp` is the portable engine, `hccl` is this module. Nothing is linked at build time:
//! [`HcclBackend::create`] `dlopen`s `libascendcl.so` and `libhccl.so` (search order in
//! [`LibrarySearch`]) and resolves symbols one by one, because the management entry points are
//! weak and differ across CANN releases ([`Api::unavailable`] lists what this release lacks).
//! Where no Ascend runtime is installed, creation fails at once with
//! [`HcclError::LibraryNotFound`], naming the library, every path tried and `ASCEND_HOME_PATH`.
//! It is never faked: on a machine without NPUs this backend cannot run.
//!
//! Layout:
//! - [`types`]: HCCL's enums and structs with the header's numbering and layout;
//! - `ffi`: the crate's only `unsafe` (loading, symbols, raw calls behind safe wrappers);
//! - [`epoch`]: make-before-break epochs (HCCL cannot grow or shrink a communicator), on the
//!   HCCL-independent, tested state machine in `slot`;
//! - `mapping`: our `DataType` / `ReduceOp` to HCCL's (and which of ours HCCL lacks);
//! - `backend`: [`HcclBackend`], the backend object the agent holds, and `communicator`:
//!   one epoch's [`HcclCommunicator`];
//! - `budget`: HCCL memory (`HCCL_BUFFSIZE` × live communicators) against a limit;
//!   `init_lock`: one communicator initialisation at a time per device.

mod backend;
mod budget;
mod communicator;
pub mod epoch;
mod error;
mod ffi;
mod init_lock;
mod mapping;
mod search;
mod slot;
pub mod types;

pub use backend::{HcclBackend, HcclBackendConfig};
pub use budget::{DEFAULT_BUFFER_SIZE_MB, HcclMemoryStats, MemoryBudget};
pub use communicator::HcclCommunicator;
pub use epoch::{EpochComm, EpochManager, EpochSettings, EpochSource, PendingEpoch};
pub use error::HcclError;
pub use ffi::{ACL_LIB, Api, Comm, DeviceBuffer, HCCL_LIB, Stream};
pub use mapping::{hccl_data_type, hccl_reduce_op};
pub use search::{DEFAULT_ASCEND_LIB64, LibrarySearch};
pub use slot::Epoched;
