//! The only `unsafe` code in this crate: `dlopen` of `libascendcl.so` and `libhccl.so`,
//! per-symbol resolution, and thin safe wrappers over the raw HCCL / ACL calls.
//!
//! Where it sits: [`super::epoch`] and [`super::backend`] call the safe wrappers here; nothing
//! else in the crate touches a raw pointer. The crate denies `unsafe_code`; this module alone
//! allows it, and every block carries a `// SAFETY:` argument.
//!
//! Prototypes are the public headers' (`hicann/hccl` `include/hccl.h`, `hicann/hcomm`
//! `include/hccl/hccl_comm.h`, `hicann/runtime` `include/external/acl/acl_rt.h`): C enums
//! travel as `u32`, `HcclResult` / `aclError` come back as `i32`, handles are `void *`.
//!
//! Soundness rules the safe wrappers keep:
//! - every device pointer handed to HCCL belongs to a live [`DeviceBuffer`] whose length is
//!   checked against `count * element size` first;
//! - every collective waits for its stream before returning, so a borrowed buffer outlives the
//!   device's use of it (no asynchronous API is exposed safely); when that wait fails or times
//!   out, the communicator is destroyed (which stops its work) before the call returns, and if
//!   that cannot be confirmed the buffers are quarantined, never freed;
//! - the `Library` handles live in [`Api`], which every handle type keeps alive through an
//!   `Arc`, so no function pointer outlives its library;
//! - the libraries are never unloaded (no `dlclose`), even when the last [`Api`] goes: the
//!   runtime starts threads of its own (stream workers, heartbeats) whose thread-exit
//!   destructors run the library's code after any call of ours has returned, and a process
//!   that unmaps it under them crashes (seen with the conformance simulator: a stream
//!   thread ending after the last handle dropped took SIGSEGV in its TLS destructor). ACL is
//!   initialised once per process anyway; a second `dlopen` finds the loaded copy.
#![allow(unsafe_code)]

mod comm;
mod handles;
#[cfg(test)]
mod loader_tests;

pub use comm::Comm;
pub use handles::{DeviceBuffer, Stream, quarantined_device_bytes};

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::ManuallyDrop;
use std::sync::Arc;

use libloading::Library;

use super::HcclError;
use super::search::LibrarySearch;
use super::types::{
    ACL_ERROR_REPEAT_INITIALIZE, ACL_MEM_MALLOC_HUGE_FIRST, ACL_SUCCESS, HCCL_SUCCESS,
    HcclCommConfig, HcclRootInfo, hccl_result_name,
};

/// `libhccl.so`.
pub const HCCL_LIB: &str = "libhccl.so";
/// `libascendcl.so`.
pub const ACL_LIB: &str = "libascendcl.so";

type Handle = *mut c_void; // HcclComm, aclrtStream
type Ptr = *mut c_void;
type CPtr = *const c_void;

/// Declares a symbol table: required entries are plain function pointers (loading fails
/// without them), optional ones are `Option`s (weak symbols that differ across CANN releases).
macro_rules! symbol_table {
    ($(#[$meta:meta])* $name:ident, $lib:expr,
     required { $($r:ident: $rt:ty,)* }
     optional { $($o:ident: $ot:ty,)* }) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        pub(crate) struct $name {
            $(pub(crate) $r: $rt,)*
            $(pub(crate) $o: Option<$ot>,)*
        }

        impl $name {
            /// Symbols without which the library is unusable.
            #[cfg_attr(not(test), allow(dead_code))] // read by the loader tests
            pub(crate) const REQUIRED: &'static [&'static str] = &[$(stringify!($r)),*];
            /// Symbols looked up but allowed to be missing.
            #[cfg_attr(not(test), allow(dead_code))] // read by the loader tests
            pub(crate) const OPTIONAL: &'static [&'static str] = &[$(stringify!($o)),*];

            #[allow(non_snake_case)] // locals are named after the C symbols
            fn resolve(lib: &Library, path: &str) -> Result<Self, HcclError> {
                let mut missing = Vec::new();
                $(
                    // SAFETY: the type is the prototype from the public header for this exact
                    // symbol name; the pointer is copied out of the `Symbol` and stays valid
                    // while `lib` is loaded, which `Api` guarantees by owning `lib`.
                    let $r: Option<$rt> = unsafe { lib.get::<$rt>(stringify!($r)) }.ok().map(|s| *s);
                    if $r.is_none() {
                        missing.push(stringify!($r));
                    }
                )*
                $(
                    // SAFETY: as above, for an optional symbol.
                    let $o: Option<$ot> = unsafe { lib.get::<$ot>(stringify!($o)) }.ok().map(|s| *s);
                )*
                match ($($r,)*) {
                    ($(Some($r),)*) => Ok(Self { $($r,)* $($o,)* }),
                    #[allow(unreachable_patterns)]
                    _ => Err(HcclError::MissingSymbols { library: $lib, path: path.to_string(), missing }),
                }
            }

            /// Names of the optional symbols this library lacks.
            pub(crate) fn unavailable(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(if self.$o.is_none() { out.push(stringify!($o)); })*
                out
            }
        }
    };
}

symbol_table! {
    /// `libhccl.so` entry points (hccl.h, hccl_comm.h).
    HcclSymbols, HCCL_LIB,
    required {
        HcclGetRootInfo: unsafe extern "C" fn(*mut HcclRootInfo) -> c_int,
        HcclCommInitRootInfo: unsafe extern "C" fn(u32, *const HcclRootInfo, u32, *mut Handle) -> c_int,
        HcclAllReduce: unsafe extern "C" fn(Ptr, Ptr, u64, u32, u32, Handle, Handle) -> c_int,
        HcclAllGather: unsafe extern "C" fn(Ptr, Ptr, u64, u32, Handle, Handle) -> c_int,
        HcclReduceScatter: unsafe extern "C" fn(Ptr, Ptr, u64, u32, u32, Handle, Handle) -> c_int,
        HcclBroadcast: unsafe extern "C" fn(Ptr, u64, u32, u32, Handle, Handle) -> c_int,
        HcclSend: unsafe extern "C" fn(Ptr, u64, u32, u32, Handle, Handle) -> c_int,
        HcclRecv: unsafe extern "C" fn(Ptr, u64, u32, u32, Handle, Handle) -> c_int,
        HcclCommDestroy: unsafe extern "C" fn(Handle) -> c_int,
    }
    optional {
        HcclCommInitRootInfoConfig:
            unsafe extern "C" fn(u32, *const HcclRootInfo, u32, *const HcclCommConfig, *mut Handle) -> c_int,
        HcclCreateSubCommConfig:
            unsafe extern "C" fn(*mut Handle, u32, *mut u32, u64, u32, *mut HcclCommConfig, *mut Handle) -> c_int,
        HcclAlltoAllV:
            unsafe extern "C" fn(CPtr, CPtr, CPtr, u32, CPtr, CPtr, CPtr, u32, Handle, Handle) -> c_int,
        HcclReduce: unsafe extern "C" fn(Ptr, Ptr, u64, u32, u32, u32, Handle, Handle) -> c_int,
        HcclBarrier: unsafe extern "C" fn(Handle, Handle) -> c_int,
        HcclGetErrorString: unsafe extern "C" fn(c_int) -> *const c_char,
        HcclGetCommAsyncError: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
        HcclGetCommConfigCapability: unsafe extern "C" fn() -> u32,
    }
}

symbol_table! {
    /// `libascendcl.so` entry points (acl.h, acl_rt.h).
    AclSymbols, ACL_LIB,
    required {
        aclInit: unsafe extern "C" fn(*const c_char) -> c_int,
        aclFinalize: unsafe extern "C" fn() -> c_int,
        aclrtSetDevice: unsafe extern "C" fn(i32) -> c_int,
        aclrtCreateStream: unsafe extern "C" fn(*mut Handle) -> c_int,
        aclrtSynchronizeStream: unsafe extern "C" fn(Handle) -> c_int,
        aclrtDestroyStream: unsafe extern "C" fn(Handle) -> c_int,
        aclrtMalloc: unsafe extern "C" fn(*mut Ptr, usize, u32) -> c_int,
        aclrtFree: unsafe extern "C" fn(Ptr) -> c_int,
        aclrtMemcpy: unsafe extern "C" fn(Ptr, usize, CPtr, usize, u32) -> c_int,
    }
    optional {
        aclrtSynchronizeStreamWithTimeout: unsafe extern "C" fn(Handle, i32) -> c_int,
        aclGetRecentErrMsg: unsafe extern "C" fn() -> *const c_char,
    }
}

/// Opens the first candidate that loads. The error names the library, every candidate, and
/// `ASCEND_HOME_PATH`.
fn open_library(
    file_name: &'static str,
    search: &LibrarySearch,
) -> Result<(Library, String), HcclError> {
    let candidates = search.candidates(file_name);
    let mut last_error = String::from("no candidate");
    for candidate in &candidates {
        // SAFETY: loading runs the library's initialisers. The candidates are the Ascend
        // runtime's own libraries (or, in the loader tests, a test-built library), whose
        // initialisers have no preconditions on our side.
        match unsafe { Library::new(candidate) } {
            Ok(lib) => return Ok((lib, candidate.clone())),
            Err(e) => last_error = e.to_string(),
        }
    }
    Err(HcclError::LibraryNotFound {
        library: file_name,
        searched: candidates,
        ascend_home: search.ascend_home.clone(),
        last_error,
    })
}

/// The loaded libraries and their symbol tables. Shared (`Arc`) by every handle made from it.
pub struct Api {
    pub(crate) hccl: HcclSymbols,
    pub(crate) acl: AclSymbols,
    hccl_path: String,
    acl_path: String,
    // Never dropped, so never unloaded: see the module's soundness rules.
    _hccl_lib: ManuallyDrop<Library>,
    _acl_lib: ManuallyDrop<Library>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("hccl", &self.hccl_path)
            .field("acl", &self.acl_path)
            .field("unavailable", &self.unavailable())
            .finish()
    }
}

thread_local! {
    /// The device this thread last bound with `aclrtSetDevice` (ACL contexts are per thread).
    static BOUND_DEVICE: Cell<Option<i32>> = const { Cell::new(None) };
}

impl Api {
    /// Loads `libascendcl.so` then `libhccl.so` (HCCL depends on ACL) and resolves symbols.
    /// Calls nothing in them.
    pub fn load(search: &LibrarySearch) -> Result<Arc<Self>, HcclError> {
        let (acl_lib, acl_path) = open_library(ACL_LIB, search)?;
        let acl = AclSymbols::resolve(&acl_lib, &acl_path)?;
        let (hccl_lib, hccl_path) = open_library(HCCL_LIB, search)?;
        let hccl = HcclSymbols::resolve(&hccl_lib, &hccl_path)?;
        Ok(Arc::new(Self {
            hccl,
            acl,
            hccl_path,
            acl_path,
            _hccl_lib: ManuallyDrop::new(hccl_lib),
            _acl_lib: ManuallyDrop::new(acl_lib),
        }))
    }

    /// Optional symbols missing from the loaded release, e.g. `HcclCreateSubCommConfig`.
    pub fn unavailable(&self) -> Vec<&'static str> {
        let mut v = self.hccl.unavailable();
        v.extend(self.acl.unavailable());
        v
    }

    /// Paths the two libraries were loaded from (`libhccl.so`, `libascendcl.so`).
    pub fn paths(&self) -> (&str, &str) {
        (&self.hccl_path, &self.acl_path)
    }

    fn hccl_check(&self, call: &'static str, code: c_int) -> Result<(), HcclError> {
        if code == HCCL_SUCCESS {
            return Ok(());
        }
        let message = match self.hccl.HcclGetErrorString {
            Some(f) => {
                // SAFETY: `HcclGetErrorString` takes any `HcclResult` and returns NULL or a
                // pointer to a static NUL-terminated string.
                let p = unsafe { f(code) };
                if p.is_null() {
                    String::new()
                } else {
                    // SAFETY: non-null, NUL-terminated, static (see above).
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            }
            None => String::from("(HcclGetErrorString not exported; see the plog for details)"),
        };
        Err(HcclError::Hccl {
            call,
            code,
            name: hccl_result_name(code),
            message,
        })
    }

    fn acl_check(&self, call: &'static str, code: c_int) -> Result<(), HcclError> {
        if code == ACL_SUCCESS {
            return Ok(());
        }
        let message = self.acl.aclGetRecentErrMsg.and_then(|f| {
            // SAFETY: `aclGetRecentErrMsg` takes no arguments and returns NULL or a
            // NUL-terminated string owned by ACL's thread-local storage, read before any
            // further ACL call on this thread.
            let p = unsafe { f() };
            // SAFETY: checked non-null; NUL-terminated per acl.h.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        });
        Err(HcclError::Acl {
            call,
            code,
            message,
        })
    }

    /// `aclInit(NULL)`; "already initialised" (by the inference engine) counts as success.
    pub fn acl_init(&self) -> Result<(), HcclError> {
        // SAFETY: NULL is the documented "no config file" argument.
        let code = unsafe { (self.acl.aclInit)(std::ptr::null()) };
        if code == ACL_ERROR_REPEAT_INITIALIZE {
            return Ok(());
        }
        self.acl_check("aclInit", code)
    }

    /// `aclFinalize()`: only for processes that own ACL (the bench, not an inference worker).
    pub fn acl_finalize(&self) -> Result<(), HcclError> {
        // SAFETY: no arguments; ACL tolerates a call after its own init.
        let code = unsafe { (self.acl.aclFinalize)() };
        self.acl_check("aclFinalize", code)
    }

    /// Binds the calling thread to `device` (`aclrtSetDevice`), once per thread and device.
    pub fn bind_thread(&self, device: i32) -> Result<(), HcclError> {
        if BOUND_DEVICE.with(Cell::get) == Some(device) {
            return Ok(());
        }
        // SAFETY: plain integer argument; ACL validates the id.
        let code = unsafe { (self.acl.aclrtSetDevice)(device) };
        self.acl_check("aclrtSetDevice", code)?;
        BOUND_DEVICE.with(|d| d.set(Some(device)));
        Ok(())
    }

    /// A new stream on the calling thread's device.
    pub fn create_stream(self: &Arc<Self>) -> Result<Stream, HcclError> {
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for one handle.
        let code = unsafe { (self.acl.aclrtCreateStream)(&mut raw) };
        self.acl_check("aclrtCreateStream", code)?;
        Ok(Stream::from_raw(raw, self))
    }

    /// `len` bytes of device memory (`aclrtMalloc`, huge pages first).
    pub fn malloc(self: &Arc<Self>, len: usize) -> Result<DeviceBuffer, HcclError> {
        let mut ptr: Ptr = std::ptr::null_mut();
        if len > 0 {
            // SAFETY: `ptr` is a valid out-pointer; ACL rejects a bad size with an error code.
            let code = unsafe { (self.acl.aclrtMalloc)(&mut ptr, len, ACL_MEM_MALLOC_HUGE_FIRST) };
            self.acl_check("aclrtMalloc", code)?;
        }
        Ok(DeviceBuffer::from_raw(ptr, len, self))
    }

    /// `HcclGetRootInfo` (root rank only): the blob the other ranks need.
    pub fn get_root_info(&self) -> Result<Box<HcclRootInfo>, HcclError> {
        let mut info = HcclRootInfo::zeroed();
        // SAFETY: `info` is a writable, correctly sized (4108 bytes, `repr(C)`) HcclRootInfo.
        let code = unsafe { (self.hccl.HcclGetRootInfo)(&mut *info) };
        self.hccl_check("HcclGetRootInfo", code)?;
        Ok(info)
    }

    /// `HcclGetCommConfigCapability()`, if exported: config fields with an index below it are
    /// understood by this release.
    pub fn config_capability(&self) -> Option<u32> {
        // SAFETY: no arguments, returns a plain integer.
        self.hccl
            .HcclGetCommConfigCapability
            .map(|f| unsafe { f() })
    }

    /// `HcclCommInitRootInfoConfig` when exported and a config is given, else
    /// `HcclCommInitRootInfo`. Collective over all `n_ranks`; blocks until every rank joined or
    /// HCCL's own connect timeout (`HCCL_CONNECT_TIMEOUT`) fires.
    pub fn comm_init_root_info(
        self: &Arc<Self>,
        n_ranks: u32,
        root: &HcclRootInfo,
        rank: u32,
        config: Option<&HcclCommConfig>,
    ) -> Result<Comm, HcclError> {
        if rank >= n_ranks {
            return Err(HcclError::InvalidArgument(format!(
                "rank {rank} out of range for {n_ranks} ranks"
            )));
        }
        let mut raw: Handle = std::ptr::null_mut();
        let code = match (config, self.hccl.HcclCommInitRootInfoConfig) {
            // SAFETY: `root` and `cfg` are valid `repr(C)` structs of the header layout, read
            // only during the call; `raw` is a valid out-pointer.
            (Some(cfg), Some(f)) => unsafe { f(n_ranks, root, rank, cfg, &mut raw) },
            // SAFETY: as above, without the config.
            _ => unsafe { (self.hccl.HcclCommInitRootInfo)(n_ranks, root, rank, &mut raw) },
        };
        self.hccl_check("HcclCommInitRootInfo", code)?;
        Ok(Comm::from_raw(raw, n_ranks, rank, self))
    }

    /// `HcclCreateSubCommConfig`: carve a communicator over `parent_ranks` (ranks of `parent`)
    /// without a new root info. Collective over the sub-communicator's members.
    pub fn create_sub_comm(
        self: &Arc<Self>,
        parent: &Comm,
        parent_ranks: &[u32],
        sub_comm_id: u64,
        config: &mut HcclCommConfig,
    ) -> Result<Comm, HcclError> {
        let f = self
            .hccl
            .HcclCreateSubCommConfig
            .ok_or(HcclError::Unavailable {
                function: "HcclCreateSubCommConfig",
                library: HCCL_LIB,
            })?;
        let sub_rank = parent_ranks
            .iter()
            .position(|r| *r == parent.rank())
            .ok_or_else(|| {
                HcclError::InvalidArgument(format!(
                    "rank {} is not among {parent_ranks:?}",
                    parent.rank()
                ))
            })? as u32;
        if parent_ranks.iter().any(|r| *r >= parent.world()) {
            return Err(HcclError::InvalidArgument(format!(
                "{parent_ranks:?} exceeds parent world {}",
                parent.world()
            )));
        }
        let mut ids = parent_ranks.to_vec();
        let mut parent_raw = parent.handle()?;
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: `parent_raw` is a live communicator (owned by `parent`, borrowed for the call);
        // `ids` holds `len` ranks, all checked < parent world; `config` is a valid header-layout
        // struct; `raw` is a valid out-pointer.
        let code = unsafe {
            f(
                &mut parent_raw,
                ids.len() as u32,
                ids.as_mut_ptr(),
                sub_comm_id,
                sub_rank,
                config,
                &mut raw,
            )
        };
        self.hccl_check("HcclCreateSubCommConfig", code)?;
        Ok(Comm::from_raw(raw, ids.len() as u32, sub_rank, self))
    }
}
