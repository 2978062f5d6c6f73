//! The exported C entry points, with the prototypes of the public headers (acl.h, acl_rt.h,
//! hccl.h, hccl_comm.h) that the backend's symbol tables declare. The only `unsafe` of the
//! simulator: reading and writing through the caller's host pointers and out-parameters.
//! Handles (streams, communicators) are small integers, device pointers are registry
//! addresses: neither is ever dereferenced, so a stale or forged one is caught, not followed.
//!
//! Size: one entry point per exported ACL/HCCL symbol, each with its argument checks.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::codes::*;
use crate::comm::{self, ALL_GATHER, ALL_REDUCE, BARRIER, BROADCAST, Op, REDUCE, REDUCE_SCATTER};
use crate::memory::{self, Fault};
use crate::reduce::{element_size, valid_op};
use crate::stream;
use crate::violation;

type Handle = *mut c_void;

static INITIALIZED: AtomicBool = AtomicBool::new(false);
/// Devices a simulated host has (an A3 node has 16).
const DEVICES: i32 = 16;
/// `HcclGetCommConfigCapability`: config fields below this index are understood (buffer
/// size 0 … exec timeout 8).
const CONFIG_CAPABILITY: u32 = 9;
/// `HCCL_COMM_CONFIG_MAGIC_WORD`.
const CONFIG_MAGIC: u32 = 0xf0f0_f0f0;
/// Byte offsets in `HcclCommConfig` (hccl_types.h, C layout).
const CONFIG_BUFFER_SIZE_AT: usize = 24;
const CONFIG_EXEC_TIMEOUT_AT: usize = 316;

thread_local! {
    /// The device `aclrtSetDevice` bound this thread to.
    static DEVICE: Cell<Option<i32>> = const { Cell::new(None) };
}

fn handle(id: usize) -> Handle {
    std::ptr::without_provenance_mut(id)
}

fn bound_device(call: &str) -> Option<i32> {
    let d = DEVICE.with(Cell::get);
    if d.is_none() {
        violation::record(
            "no_device",
            &format!("{call} on a thread that never called aclrtSetDevice"),
        );
    }
    d
}

#[unsafe(no_mangle)]
pub extern "C" fn aclInit(_config: *const c_char) -> c_int {
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return ACL_ERROR_REPEAT_INITIALIZE;
    }
    crate::faults::settings();
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclFinalize() -> c_int {
    if !INITIALIZED.swap(false, Ordering::SeqCst) {
        return ACL_ERROR_UNINITIALIZE;
    }
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDevice(device: i32) -> c_int {
    if !INITIALIZED.load(Ordering::SeqCst) {
        return ACL_ERROR_UNINITIALIZE;
    }
    if !(0..DEVICES).contains(&device) {
        return ACL_ERROR_RT_INVALID_DEVICEID;
    }
    DEVICE.with(|d| d.set(Some(device)));
    ACL_SUCCESS
}

/// # Safety
/// `out` must be writable for one handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStream(out: *mut Handle) -> c_int {
    let Some(device) = bound_device("aclrtCreateStream") else {
        return ACL_ERROR_RT_CONTEXT_NULL;
    };
    if out.is_null() {
        return ACL_ERROR_INVALID_PARAM;
    }
    // SAFETY: non-null out-pointer the caller guarantees writable.
    unsafe { out.write(handle(stream::create(device))) };
    ACL_SUCCESS
}

fn sync(s: Handle, timeout: Option<Duration>) -> c_int {
    match stream::get(s.addr()) {
        Some(st) => st.synchronize(timeout),
        None => {
            violation::record("invalid_stream", &format!("synchronize of {:#x}", s.addr()));
            ACL_ERROR_RT_PARAM_INVALID
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeStream(s: Handle) -> c_int {
    sync(s, None)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeStreamWithTimeout(s: Handle, timeout_ms: i32) -> c_int {
    match timeout_ms {
        -1 => sync(s, None),
        ms if ms > 0 => sync(s, Some(Duration::from_millis(ms as u64))),
        _ => ACL_ERROR_INVALID_PARAM,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStream(s: Handle) -> c_int {
    match stream::destroy(s.addr()) {
        None => {
            violation::record(
                "invalid_stream",
                &format!("aclrtDestroyStream({:#x}): not a live stream", s.addr()),
            );
            ACL_ERROR_RT_PARAM_INVALID
        }
        Some(0) => ACL_SUCCESS,
        Some(pending) => {
            violation::record(
                "destroy_busy_stream",
                &format!(
                    "aclrtDestroyStream with {pending} task(s) still queued: acl_rt.h requires \
                     the stream's tasks to have completed"
                ),
            );
            ACL_SUCCESS
        }
    }
}

/// # Safety
/// `out` must be writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMalloc(out: *mut *mut c_void, size: usize, _policy: u32) -> c_int {
    if bound_device("aclrtMalloc").is_none() {
        return ACL_ERROR_RT_CONTEXT_NULL;
    }
    if out.is_null() || size == 0 {
        return ACL_ERROR_INVALID_PARAM;
    }
    let addr = memory::malloc(size);
    // SAFETY: non-null out-pointer the caller guarantees writable.
    unsafe { out.write(std::ptr::without_provenance_mut(addr)) };
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtFree(ptr: *mut c_void) -> c_int {
    if memory::free(ptr.addr()) {
        ACL_SUCCESS
    } else {
        ACL_ERROR_RT_MEMORY_FREE
    }
}

fn fault(call: &str, addr: usize, len: usize, f: Fault) {
    let kind = if f == Fault::Freed {
        "use_after_free"
    } else {
        "invalid_pointer"
    };
    violation::record(
        kind,
        &format!("{call}: device range {addr:#x}+{len} is not live device memory: {f:?}"),
    );
}

/// # Safety
/// The host side (`src` for host-to-device, `dst` for device-to-host) must be valid for
/// `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: u32,
) -> c_int {
    if count > dest_max || dst.is_null() || src.is_null() {
        return ACL_ERROR_INVALID_PARAM;
    }
    match kind {
        ACL_MEMCPY_HOST_TO_DEVICE => {
            // SAFETY: the caller guarantees `src` holds `count` readable host bytes.
            let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), count) };
            match memory::write(dst.addr(), bytes) {
                Ok(()) => ACL_SUCCESS,
                Err(f) => {
                    fault("aclrtMemcpy(host to device)", dst.addr(), count, f);
                    ACL_ERROR_RT_PARAM_INVALID
                }
            }
        }
        ACL_MEMCPY_DEVICE_TO_HOST => match memory::read(src.addr(), count) {
            Ok(bytes) => {
                // SAFETY: the caller guarantees `dst` holds `count` writable host bytes.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast::<u8>(), count) };
                ACL_SUCCESS
            }
            Err(f) => {
                fault("aclrtMemcpy(device to host)", src.addr(), count, f);
                ACL_ERROR_RT_PARAM_INVALID
            }
        },
        _ => ACL_ERROR_INVALID_PARAM,
    }
}

/// # Safety
/// `info` must be writable for `HCCL_ROOT_INFO_BYTES`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn HcclGetRootInfo(info: *mut u8) -> c_int {
    let Some(device) = bound_device("HcclGetRootInfo") else {
        return HCCL_E_RUNTIME;
    };
    if info.is_null() {
        return HCCL_E_PTR;
    }
    match comm::get_root_info(device) {
        Ok(blob) => {
            // SAFETY: the caller's HcclRootInfo is HCCL_ROOT_INFO_BYTES long.
            unsafe { std::ptr::copy_nonoverlapping(blob.as_ptr(), info, HCCL_ROOT_INFO_BYTES) };
            HCCL_SUCCESS
        }
        Err(code) => code,
    }
}

/// # Safety
/// `root` must be readable for `HCCL_ROOT_INFO_BYTES`, `out` writable for one handle, and
/// `config` null or an `HcclCommConfig` whose size field is honest.
unsafe fn init(
    nranks: u32,
    root: *const u8,
    rank: u32,
    config: *const u8,
    out: *mut Handle,
) -> c_int {
    let Some(device) = bound_device("HcclCommInitRootInfo") else {
        return HCCL_E_RUNTIME;
    };
    if root.is_null() || out.is_null() {
        return HCCL_E_PTR;
    }
    // SAFETY: the caller's HcclRootInfo is HCCL_ROOT_INFO_BYTES long.
    let blob = unsafe { std::slice::from_raw_parts(root, HCCL_ROOT_INFO_BYTES) };
    let mut exec = None;
    if !config.is_null() {
        // SAFETY: the header's first 24 bytes are always present.
        let head = unsafe { std::slice::from_raw_parts(config, 24) };
        let size = u64::from_ne_bytes(head[0..8].try_into().expect("8 bytes")) as usize;
        let magic = u32::from_ne_bytes(head[8..12].try_into().expect("4 bytes"));
        if magic != CONFIG_MAGIC {
            eprintln!("hccl-sim: HcclCommConfig without HcclCommConfigInit's magic word");
            return HCCL_E_PARA;
        }
        if size >= CONFIG_EXEC_TIMEOUT_AT + 4 {
            // SAFETY: the struct's own size field says it covers these bytes.
            let cfg = unsafe { std::slice::from_raw_parts(config, CONFIG_EXEC_TIMEOUT_AT + 4) };
            let at = CONFIG_EXEC_TIMEOUT_AT;
            let secs = i32::from_ne_bytes(cfg[at..at + 4].try_into().expect("4 bytes"));
            if secs >= 0 {
                exec = Some((secs > 0).then(|| Duration::from_secs(secs as u64)));
            }
            let at = CONFIG_BUFFER_SIZE_AT;
            let mb = u32::from_ne_bytes(cfg[at..at + 4].try_into().expect("4 bytes"));
            if mb != u32::MAX && mb == 0 {
                eprintln!("hccl-sim: hcclBufferSize must be at least 1 MB");
                return HCCL_E_PARA;
            }
        }
    }
    match comm::init(nranks, blob, rank, device, exec) {
        Ok(id) => {
            // SAFETY: non-null out-pointer the caller guarantees writable.
            unsafe { out.write(handle(id)) };
            HCCL_SUCCESS
        }
        Err(code) => code,
    }
}

/// # Safety
/// As for the header's `HcclCommInitRootInfo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn HcclCommInitRootInfo(
    nranks: u32,
    root: *const u8,
    rank: u32,
    out: *mut Handle,
) -> c_int {
    // SAFETY: forwarded caller guarantees, no config.
    unsafe { init(nranks, root, rank, std::ptr::null(), out) }
}

/// # Safety
/// As for the header's `HcclCommInitRootInfoConfig`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn HcclCommInitRootInfoConfig(
    nranks: u32,
    root: *const u8,
    rank: u32,
    config: *const u8,
    out: *mut Handle,
) -> c_int {
    // SAFETY: forwarded caller guarantees.
    unsafe { init(nranks, root, rank, config, out) }
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclGetCommConfigCapability() -> u32 {
    CONFIG_CAPABILITY
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclGetErrorString(code: c_int) -> *const c_char {
    hccl_message(code).as_ptr()
}

/// # Safety
/// `err` must be writable for one int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn HcclGetCommAsyncError(c: Handle, err: *mut c_int) -> c_int {
    let Some(comm) = comm::get(c.addr()) else {
        violation::record(
            "invalid_comm",
            "HcclGetCommAsyncError on a dead communicator",
        );
        return HCCL_E_PTR;
    };
    if err.is_null() {
        return HCCL_E_PTR;
    }
    // SAFETY: non-null out-pointer the caller guarantees writable.
    unsafe { err.write(comm.async_error()) };
    HCCL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclCommDestroy(c: Handle) -> c_int {
    comm::destroy(c.addr())
}

/// Checks and launches one collective.
#[allow(clippy::too_many_arguments)]
fn collective(
    kind: u8,
    send: *mut c_void,
    send_elems: u64,
    recv: *mut c_void,
    recv_elems: u64,
    count: u64,
    dtype: u32,
    redop: u32,
    root: u32,
    c: Handle,
    s: Handle,
) -> c_int {
    let name = match kind {
        ALL_REDUCE => "HcclAllReduce",
        ALL_GATHER => "HcclAllGather",
        REDUCE_SCATTER => "HcclReduceScatter",
        BROADCAST => "HcclBroadcast",
        REDUCE => "HcclReduce",
        _ => "HcclBarrier",
    };
    let Some(comm) = comm::get(c.addr()) else {
        violation::record("invalid_comm", &format!("{name} on a dead communicator"));
        return HCCL_E_PTR;
    };
    let Some(st) = stream::get(s.addr()) else {
        violation::record("invalid_stream", &format!("{name} on a dead stream"));
        return HCCL_E_PTR;
    };
    match bound_device(name) {
        Some(d) if d == comm.device && d == st.device => {}
        Some(d) => {
            eprintln!(
                "hccl-sim: {name} on device {d}: the communicator is on {} and the stream on {}",
                comm.device, st.device
            );
            return HCCL_E_PARA;
        }
        None => return HCCL_E_RUNTIME,
    }
    let Some(size) = element_size(dtype) else {
        return HCCL_E_NOT_SUPPORT;
    };
    if !valid_op(redop) || (matches!(kind, BROADCAST | REDUCE) && root >= comm.nranks) {
        return HCCL_E_PARA;
    }
    let send_len = send_elems as usize * size;
    let recv_len = recv_elems as usize * size;
    for (addr, len) in [(send.addr(), send_len), (recv.addr(), recv_len)] {
        if len > 0
            && let Err(f) = memory::check(addr, len)
        {
            fault(name, addr, len, f);
            return HCCL_E_PTR;
        }
    }
    let op = Op {
        kind,
        count,
        dtype,
        redop,
        root,
        send: if send_len > 0 { send.addr() } else { 0 },
        send_len,
        recv: if recv_len > 0 { recv.addr() } else { 0 },
        recv_len,
    };
    comm.launch(op, &st)
}

fn world(c: Handle) -> u64 {
    comm::get(c.addr()).map_or(1, |c| c.nranks as u64)
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclAllReduce(
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    dtype: u32,
    op: u32,
    c: Handle,
    s: Handle,
) -> c_int {
    collective(
        ALL_REDUCE, send, count, recv, count, count, dtype, op, 0, c, s,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclAllGather(
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    dtype: u32,
    c: Handle,
    s: Handle,
) -> c_int {
    let n = world(c);
    collective(
        ALL_GATHER,
        send,
        count,
        recv,
        count * n,
        count,
        dtype,
        0,
        0,
        c,
        s,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclReduceScatter(
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    dtype: u32,
    op: u32,
    c: Handle,
    s: Handle,
) -> c_int {
    let n = world(c);
    collective(
        REDUCE_SCATTER,
        send,
        count * n,
        recv,
        count,
        count,
        dtype,
        op,
        0,
        c,
        s,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    dtype: u32,
    root: u32,
    c: Handle,
    s: Handle,
) -> c_int {
    collective(
        BROADCAST, buf, count, buf, count, count, dtype, 0, root, c, s,
    )
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn HcclReduce(
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    dtype: u32,
    op: u32,
    root: u32,
    c: Handle,
    s: Handle,
) -> c_int {
    collective(
        REDUCE, send, count, recv, count, count, dtype, op, root, c, s,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn HcclBarrier(c: Handle, s: Handle) -> c_int {
    let null = std::ptr::null_mut();
    // INT8 with zero elements: no buffers.
    collective(BARRIER, null, 0, null, 0, 0, 0, 0, 0, c, s)
}

/// Point-to-point is not simulated: the answer says so instead of pretending.
#[unsafe(no_mangle)]
pub extern "C" fn HcclSend(_: *mut c_void, _: u64, _: u32, _: u32, _: Handle, _: Handle) -> c_int {
    HCCL_E_NOT_SUPPORT
}

/// Point-to-point is not simulated: the answer says so instead of pretending.
#[unsafe(no_mangle)]
pub extern "C" fn HcclRecv(_: *mut c_void, _: u64, _: u32, _: u32, _: Handle, _: Handle) -> c_int {
    HCCL_E_NOT_SUPPORT
}
