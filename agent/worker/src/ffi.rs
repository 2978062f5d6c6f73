//! The C ABI (`include/hcomm_worker.h`): opaque handles, an `int` code per call (0 = ok,
//! else [`crate::Error::code`], [`PANICKED`] for a bug), and the last error's message per
//! thread. Each handle owns a small tokio runtime and blocks the calling thread on it, so
//! a C or Python engine calls plainly from any thread (ctypes releases the GIL meanwhile).
//! No panic crosses the boundary: every entry point runs under `catch_unwind`.
//!
//! This is the crate's only `unsafe`: raw pointers from C callers, each use with its
//! `SAFETY:` reason.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::client::{AgentClient, WatchStream};
use crate::error::{Error, Result};
use crate::session::Session;

/// Returned when the library panicked (a bug; the message says where).
pub const PANICKED: c_int = 99;

/// The opaque handle C sees as `hcomm_worker`.
pub struct HcommWorker {
    rt: tokio::runtime::Runtime,
    session: Session,
    watch: tokio::sync::Mutex<Option<WatchStream>>,
    /// An event a too-small buffer could not take, handed out by the next call.
    held: Mutex<Option<String>>,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

fn guarded(f: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last("");
            0
        }
        Ok(Err(e)) => {
            set_last(&e.to_string());
            e.code()
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_last(&format!("hcomm_worker panicked (a bug): {what}"));
            PANICKED
        }
    }
}

/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn text<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes a NUL-terminated string that outlives the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Error::Invalid(format!("{name} is not UTF-8")))
}

/// # Safety
/// `h` is null or a handle from `hcomm_worker_open` not yet closed.
unsafe fn handle<'a>(h: *const HcommWorker) -> Result<&'a HcommWorker> {
    // SAFETY: the caller passes a live handle (or null, refused here).
    unsafe { h.as_ref() }.ok_or_else(|| Error::Invalid("null handle".into()))
}

/// # Safety
/// `p` is null or valid for writing one `T`.
unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller passes a writable pointer or null (skipped).
    if let Some(slot) = unsafe { p.as_mut() } {
        *slot = v;
    }
}

/// Copies `s` and a NUL into `buf` (`len` bytes); `needed` gets the size either way.
///
/// # Safety
/// `buf` is null or valid for `len` bytes; `needed` null or writable.
unsafe fn copy_out(s: &str, buf: *mut c_char, len: usize, needed: *mut usize) -> Result<()> {
    let n = s.len() + 1;
    // SAFETY: forwarded from the caller's contract.
    unsafe { put(needed, n) };
    if buf.is_null() || len < n {
        return Err(Error::BufferTooSmall { needed: n });
    }
    // SAFETY: `buf` holds `len >= n` bytes; the source is `s.len()` bytes; no overlap
    // (a Rust string and a caller's buffer).
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

/// The last error's message on this thread ("" after a success); valid until the next
/// call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn hcomm_worker_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Opens a handle. `ns` may be null; `timeout_ms` bounds each exchange with the agent.
///
/// # Safety
/// String arguments are null or NUL-terminated; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_open(
    socket: *const c_char,
    pod: *const c_char,
    ns: *const c_char,
    timeout_ms: u32,
    out: *mut *mut HcommWorker,
) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(Error::Invalid("null out pointer".into()));
        }
        // SAFETY: the caller's contract, forwarded.
        let (socket, pod, ns) = unsafe {
            (
                text(socket, "socket")?.ok_or_else(|| Error::Invalid("null socket".into()))?,
                text(pod, "pod")?.ok_or_else(|| Error::Invalid("null pod".into()))?,
                text(ns, "namespace")?,
            )
        };
        if timeout_ms == 0 {
            return Err(Error::Invalid("timeout_ms must be positive".into()));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("hcomm-worker")
            .enable_all()
            .build()
            .map_err(|e| Error::Invalid(format!("runtime: {e}")))?;
        let client = AgentClient {
            socket: PathBuf::from(socket),
            pod: pod.to_owned(),
            namespace: ns.filter(|n| !n.is_empty()).map(str::to_owned),
            timeout: ms(timeout_ms),
        };
        let h = Box::new(HcommWorker {
            rt,
            session: Session::new(client),
            watch: tokio::sync::Mutex::new(None),
            held: Mutex::new(None),
        });
        // SAFETY: checked non-null above; the caller owns the handle from here.
        unsafe { *out = Box::into_raw(h) };
        Ok(())
    })
}

/// Closes a handle (null is ignored): leaves the domain, destroying its communicators.
///
/// # Safety
/// `h` is null or a handle from `hcomm_worker_open`, not used after this.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_close(h: *mut HcommWorker) {
    if h.is_null() {
        return;
    }
    let _ = guarded(|| {
        // SAFETY: a handle from `hcomm_worker_open` (Box::into_raw), closed once.
        let h = unsafe { Box::from_raw(h) };
        h.rt.block_on(h.session.leave());
        let HcommWorker { rt, watch, .. } = *h;
        drop(watch);
        rt.shutdown_timeout(Duration::from_secs(1));
        Ok(())
    });
}

/// The member's assignment as JSON (see `hcomm_crds::local_api::Assignment`).
///
/// # Safety
/// `h` a live handle; `buf` valid for `len` bytes (or null to ask the size); `needed`
/// null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_assignment(
    h: *const HcommWorker,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        let a = h.rt.block_on(h.session.assignment())?;
        let json = serde_json::to_string(&a).map_err(|e| Error::Invalid(e.to_string()))?;
        // SAFETY: the caller's contract.
        unsafe { copy_out(&json, buf, len, needed) }
    })
}

/// Waits up to `timeout_ms` for a placement in a newer epoch and builds its communicator
/// beside the serving one; `epoch` gets the prepared epoch.
///
/// # Safety
/// `h` a live handle; `epoch` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_prepare(
    h: *const HcommWorker,
    timeout_ms: u32,
    epoch: *mut u64,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        let e = h.rt.block_on(h.session.prepare(ms(timeout_ms)))?;
        // SAFETY: the caller's contract.
        unsafe { put(epoch, e) };
        Ok(())
    })
}

/// The safe point: the prepared communicator serves, the old one is destroyed; `epoch`
/// gets the serving epoch.
///
/// # Safety
/// `h` a live handle; `epoch` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_switch(h: *const HcommWorker, epoch: *mut u64) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        let e = h.rt.block_on(h.session.switch())?;
        // SAFETY: the caller's contract.
        unsafe { put(epoch, e) };
        Ok(())
    })
}

/// The serving and prepared epochs (-1: none), and the serving communicator's rank and
/// world size (-1: none).
///
/// # Safety
/// `h` a live handle; the out pointers null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_state(
    h: *const HcommWorker,
    serving: *mut i64,
    prepared: *mut i64,
    rank: *mut i64,
    world: *mut i64,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        let (s, p) = h.session.epochs();
        let as_i64 = |v: Option<u64>| v.and_then(|v| i64::try_from(v).ok()).unwrap_or(-1);
        let comm = h.session.serving_tcp().ok();
        let (r, w) = comm.map_or((-1, -1), |c| {
            use hcomm_comm::Communicator;
            (c.rank() as i64, c.world_size() as i64)
        });
        // SAFETY: the caller's contract.
        unsafe {
            put(serving, as_i64(s));
            put(prepared, as_i64(p));
            put(rank, r);
            put(world, w);
        }
        Ok(())
    })
}

/// Sum all-reduce of `n` floats in place on the serving communicator (`tcp` backend).
///
/// # Safety
/// `h` a live handle; `data` valid for `n` floats (or null with `n == 0`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_all_reduce_sum_f32(
    h: *const HcommWorker,
    data: *mut f32,
    n: usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        let buf: &mut [f32] = if n == 0 {
            &mut []
        } else if data.is_null() {
            return Err(Error::Invalid("null data".into()));
        } else {
            // SAFETY: the caller passes `n` writable floats, not aliased during the call.
            unsafe { std::slice::from_raw_parts_mut(data, n) }
        };
        h.rt.block_on(h.session.all_reduce_sum_f32(buf))
    })
}

/// Reports requests in flight and queued (the drain's progress once draining).
///
/// # Safety
/// `h` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_report_load(
    h: *const HcommWorker,
    in_flight: u64,
    queue_depth: u64,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        h.rt.block_on(h.session.report_load(in_flight, queue_depth))
    })
}

/// Drain me (on SIGTERM or a `drain_requested` event): take no new work; the agent hears
/// it with the current load.
///
/// # Safety
/// `h` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_drain(h: *const HcommWorker) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        h.rt.block_on(h.session.drain())
    })
}

/// Tells the agent the weights are loaded and the engine takes traffic.
///
/// # Safety
/// `h` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_serving(h: *const HcommWorker) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        h.rt.block_on(h.session.serving())
    })
}

/// Tells the agent the engine cannot serve (what it needs before traffic failed for good):
/// a member still joining is failed with `reason` and replaced.
///
/// # Safety
/// `h` a live handle; `reason` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_cannot_serve(
    h: *const HcommWorker,
    reason: *const c_char,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        // SAFETY: the caller's contract.
        let reason = unsafe { text(reason, "reason")? }
            .ok_or_else(|| Error::Invalid("null reason".into()))?;
        h.rt.block_on(h.session.cannot_serve(reason))
    })
}

/// The next agent event as JSON (`{"event":"epoch_changed","epoch":3}`, ...), waiting up
/// to `timeout_ms`; none within it: returns 0 with `*needed == 0`. The stream is opened
/// at the first call (replaying weights readiness and a pending drain).
///
/// # Safety
/// `h` a live handle; `buf` valid for `len` bytes; `needed` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hcomm_worker_next_event(
    h: *const HcommWorker,
    timeout_ms: u32,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(h)? };
        let held = h.held.lock().unwrap_or_else(|p| p.into_inner()).take();
        let event = match held {
            Some(e) => Some(e),
            None => h.rt.block_on(next_event(h, ms(timeout_ms)))?,
        };
        let Some(json) = event else {
            // SAFETY: the caller's contract.
            unsafe { put(needed, 0) };
            return Ok(());
        };
        // SAFETY: the caller's contract.
        let r = unsafe { copy_out(&json, buf, len, needed) };
        if r.is_err() {
            *h.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(json);
        }
        r
    })
}

async fn next_event(h: &HcommWorker, timeout: Duration) -> Result<Option<String>> {
    let mut guard = h.watch.lock().await;
    let stream = match guard.as_mut() {
        Some(s) => s,
        None => guard.insert(h.session.watch().await?),
    };
    match tokio::time::timeout(timeout, stream.next_event()).await {
        Err(_) => Ok(None),
        Ok(Ok(Some(ev))) => serde_json::to_string(&ev)
            .map(Some)
            .map_err(|e| Error::Invalid(e.to_string())),
        Ok(Ok(None)) => {
            *guard = None;
            Err(Error::AgentClosed)
        }
        Ok(Err(e)) => {
            *guard = None;
            Err(e)
        }
    }
}
