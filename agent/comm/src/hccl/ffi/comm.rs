//! The owned [`Comm`] handle over an `HcclComm`: its collectives and point-to-point calls
//! (each synchronises its stream before returning, see the parent module's rules) and its
//! destruction, retried on `HCCL_E_AGAIN` until a deadline.
//!
//! A collective whose stream synchronisation fails or times out may still be running on the
//! device (HCCL's own `HCCL_EXEC_TIMEOUT` defaults to 1836 s, far past any op timeout), so
//! its buffers must not be freed yet: the communicator is destroyed first (`HcclCommDestroy`
//! stops a stuck communicator's work; the headers have no `HcclCommAbort`), the stream is
//! checked idle, and only then may the buffers go; otherwise they are quarantined.
//!
//! Size: one safe wrapper per HCCL collective, each with its size checks and `SAFETY:` argument.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handles::{DeviceBuffer, Stream};
use super::{Api, HCCL_LIB, Handle};
use crate::hccl::HcclError;
use crate::hccl::types::{
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, HCCL_E_AGAIN, HCCL_SUCCESS, HcclDataType, HcclReduceOp,
    hccl_result_name,
};

/// An `HcclComm`. Destroy it with [`Comm::destroy`] (retries `HCCL_E_AGAIN` until a
/// deadline); dropping an undestroyed one destroys it with a short deadline.
#[derive(Debug)]
pub struct Comm {
    raw: Cell<Option<Handle>>,
    /// Set once destroyed after a failed collective.
    aborted: Cell<bool>,
    world: u32,
    rank: u32,
    api: Arc<Api>,
}

// SAFETY: an HcclComm is an opaque handle HCCL allows to be used from any thread bound to the
// communicator's device; hcomm serialises its use (one `&mut`/mutex holder at a time).
unsafe impl Send for Comm {}

/// How long `Drop` keeps retrying `HcclCommDestroy` on `HCCL_E_AGAIN`.
const DROP_DESTROY_DEADLINE: Duration = Duration::from_secs(10);
/// How long destroying the communicator of a failed collective may keep answering
/// `HCCL_E_AGAIN` before its buffers are quarantined instead.
const ABORT_DESTROY_DEADLINE: Duration = Duration::from_secs(10);
/// How long the stream may take to drain once its communicator is destroyed.
const ABORT_IDLE_DEADLINE: Duration = Duration::from_secs(5);

impl Comm {
    pub(super) fn from_raw(raw: Handle, world: u32, rank: u32, api: &Arc<Api>) -> Self {
        Self {
            raw: Cell::new(Some(raw)),
            aborted: Cell::new(false),
            world,
            rank,
            api: Arc::clone(api),
        }
    }

    /// The loaded libraries this communicator belongs to.
    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }

    /// Ranks in this communicator.
    pub fn world(&self) -> u32 {
        self.world
    }

    /// This process's rank in it.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub(super) fn handle(&self) -> Result<Handle, HcclError> {
        if self.aborted.get() {
            return Err(HcclError::CommunicatorAborted);
        }
        match self.raw.get() {
            Some(raw) => Ok(raw),
            None => Err(HcclError::InvalidArgument(
                "communicator already destroyed".into(),
            )),
        }
    }

    /// Whether a failed collective destroyed this communicator.
    pub fn is_aborted(&self) -> bool {
        self.aborted.get()
    }

    fn count_bytes(count: u64, dtype: HcclDataType, times: u32) -> Result<usize, HcclError> {
        usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(dtype.size()))
            .and_then(|b| b.checked_mul(times as usize))
            .ok_or_else(|| HcclError::InvalidArgument(format!("count {count} overflows")))
    }

    /// After the launch: waits for the stream; on failure, makes `buffers` safe to drop
    /// before returning (see the module docs).
    fn finish(
        &self,
        call: &'static str,
        code: c_int,
        stream: &Stream,
        timeout: Option<Duration>,
        buffers: &[&DeviceBuffer],
    ) -> Result<(), HcclError> {
        self.api.hccl_check(call, code)?;
        stream
            .synchronize(timeout)
            .map_err(|cause| self.abort_in_flight(call, cause, stream, buffers))
    }

    fn abort_in_flight(
        &self,
        call: &'static str,
        cause: HcclError,
        stream: &Stream,
        buffers: &[&DeviceBuffer],
    ) -> HcclError {
        let is_timeout = |e: &HcclError| matches!(e, HcclError::Acl { code, .. } if *code == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
        let timed_out = is_timeout(&cause);
        let destroyed = self.destroy_inner(ABORT_DESTROY_DEADLINE);
        self.aborted.set(true);
        // Once destroyed, the aborted work ends with an error of its own: any answer but a
        // timeout means the stream is idle.
        let idle = destroyed.is_ok()
            && stream
                .synchronize(Some(ABORT_IDLE_DEADLINE))
                .err()
                .is_none_or(|e| !is_timeout(&e));
        let mut quarantined_bytes = 0;
        if !idle {
            for b in buffers {
                b.quarantine();
                quarantined_bytes += b.len();
            }
        }
        tracing::error!(
            call,
            error = %cause,
            timed_out,
            destroyed = destroyed.is_ok(),
            quarantined_bytes,
            "collective failed; communicator destroyed before its buffers were released"
        );
        HcclError::OpAborted {
            call,
            cause: Box::new(cause),
            timed_out,
            communicator_destroyed: destroyed.is_ok(),
            quarantined_bytes,
        }
    }

    /// `HcclAllReduce` of `count` elements from `send` into `recv`, then waits for the stream.
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: u64,
        dtype: HcclDataType,
        op: HcclReduceOp,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        let bytes = Self::count_bytes(count, dtype, 1)?;
        send.check("HcclAllReduce send", bytes)?;
        recv.check("HcclAllReduce recv", bytes)?;
        // SAFETY: both buffers are live device allocations of >= `bytes` (checked), the comm
        // and stream are live; we synchronise before the borrows end.
        let code = unsafe {
            (self.api.hccl.HcclAllReduce)(
                send.ptr,
                recv.ptr,
                count,
                dtype.raw(),
                op.raw(),
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclAllReduce", code, stream, timeout, &[send, &*recv])
    }

    /// `HcclAllGather`: `send_count` elements from every rank into `recv` (world × that).
    pub fn all_gather(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        send_count: u64,
        dtype: HcclDataType,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        send.check(
            "HcclAllGather send",
            Self::count_bytes(send_count, dtype, 1)?,
        )?;
        recv.check(
            "HcclAllGather recv",
            Self::count_bytes(send_count, dtype, self.world)?,
        )?;
        // SAFETY: sizes checked against world size; live comm, stream and buffers; synchronised.
        let code = unsafe {
            (self.api.hccl.HcclAllGather)(
                send.ptr,
                recv.ptr,
                send_count,
                dtype.raw(),
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclAllGather", code, stream, timeout, &[send, &*recv])
    }

    /// `HcclReduceScatter`: `send` holds world × `recv_count` elements; `recv` gets this
    /// rank's reduced block.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_scatter(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        recv_count: u64,
        dtype: HcclDataType,
        op: HcclReduceOp,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        send.check(
            "HcclReduceScatter send",
            Self::count_bytes(recv_count, dtype, self.world)?,
        )?;
        recv.check(
            "HcclReduceScatter recv",
            Self::count_bytes(recv_count, dtype, 1)?,
        )?;
        // SAFETY: sizes checked against world size; live comm, stream and buffers; synchronised.
        let code = unsafe {
            (self.api.hccl.HcclReduceScatter)(
                send.ptr,
                recv.ptr,
                recv_count,
                dtype.raw(),
                op.raw(),
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclReduceScatter", code, stream, timeout, &[send, &*recv])
    }

    /// `HcclReduce` of `count` elements to `root`, where exported.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: u64,
        dtype: HcclDataType,
        op: HcclReduceOp,
        root: u32,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        let f = self.api.hccl.HcclReduce.ok_or(HcclError::Unavailable {
            function: "HcclReduce",
            library: HCCL_LIB,
        })?;
        let bytes = Self::count_bytes(count, dtype, 1)?;
        send.check("HcclReduce send", bytes)?;
        recv.check("HcclReduce recv", bytes)?;
        if root >= self.world {
            return Err(HcclError::InvalidArgument(format!(
                "root {root} >= world {}",
                self.world
            )));
        }
        // SAFETY: sizes checked; live comm, stream and buffers; synchronised before return.
        let code = unsafe {
            f(
                send.ptr,
                recv.ptr,
                count,
                dtype.raw(),
                op.raw(),
                root,
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclReduce", code, stream, timeout, &[send, &*recv])
    }

    /// `HcclBroadcast` of `count` elements from `root`, in place.
    pub fn broadcast(
        &self,
        buf: &mut DeviceBuffer,
        count: u64,
        dtype: HcclDataType,
        root: u32,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        buf.check("HcclBroadcast", Self::count_bytes(count, dtype, 1)?)?;
        if root >= self.world {
            return Err(HcclError::InvalidArgument(format!(
                "root {root} >= world {}",
                self.world
            )));
        }
        // SAFETY: size checked; live comm, stream and buffer; synchronised.
        let code = unsafe {
            (self.api.hccl.HcclBroadcast)(
                buf.ptr,
                count,
                dtype.raw(),
                root,
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclBroadcast", code, stream, timeout, &[&*buf])
    }

    /// `HcclSend` of `count` elements to `peer`.
    pub fn send(
        &self,
        buf: &DeviceBuffer,
        count: u64,
        dtype: HcclDataType,
        peer: u32,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        buf.check("HcclSend", Self::count_bytes(count, dtype, 1)?)?;
        // SAFETY: size checked; live comm, stream and buffer; synchronised.
        let code = unsafe {
            (self.api.hccl.HcclSend)(
                buf.ptr,
                count,
                dtype.raw(),
                peer,
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclSend", code, stream, timeout, &[buf])
    }

    /// `HcclRecv` of `count` elements from `peer`.
    pub fn recv(
        &self,
        buf: &mut DeviceBuffer,
        count: u64,
        dtype: HcclDataType,
        peer: u32,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        buf.check("HcclRecv", Self::count_bytes(count, dtype, 1)?)?;
        // SAFETY: size checked; live comm, stream and buffer; synchronised.
        let code = unsafe {
            (self.api.hccl.HcclRecv)(
                buf.ptr,
                count,
                dtype.raw(),
                peer,
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclRecv", code, stream, timeout, &[&*buf])
    }

    /// `HcclAlltoAllV`: counts and displacements in elements, one per rank.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_v(
        &self,
        send: &DeviceBuffer,
        send_counts: &[u64],
        send_displs: &[u64],
        recv: &mut DeviceBuffer,
        recv_counts: &[u64],
        recv_displs: &[u64],
        dtype: HcclDataType,
        stream: &Stream,
        timeout: Option<Duration>,
    ) -> Result<(), HcclError> {
        let f = self.api.hccl.HcclAlltoAllV.ok_or(HcclError::Unavailable {
            function: "HcclAlltoAllV",
            library: HCCL_LIB,
        })?;
        let n = self.world as usize;
        if [
            send_counts.len(),
            send_displs.len(),
            recv_counts.len(),
            recv_displs.len(),
        ]
        .iter()
        .any(|l| *l != n)
        {
            return Err(HcclError::InvalidArgument(format!(
                "all-to-all-v needs {n} counts and displacements"
            )));
        }
        let extent = |counts: &[u64], displs: &[u64]| -> Result<usize, HcclError> {
            let mut max = 0u64;
            for (c, d) in counts.iter().zip(displs) {
                max = max.max(
                    c.checked_add(*d)
                        .ok_or_else(|| HcclError::InvalidArgument("overflow".into()))?,
                );
            }
            Self::count_bytes(max, dtype, 1)
        };
        send.check("HcclAlltoAllV send", extent(send_counts, send_displs)?)?;
        recv.check("HcclAlltoAllV recv", extent(recv_counts, recv_displs)?)?;
        // SAFETY: every (displacement + count) fits its buffer (checked); the four host arrays
        // hold `world` u64 each and live across the synchronous call; live comm and stream.
        let code = unsafe {
            f(
                send.ptr,
                send_counts.as_ptr().cast(),
                send_displs.as_ptr().cast(),
                dtype.raw(),
                recv.ptr,
                recv_counts.as_ptr().cast(),
                recv_displs.as_ptr().cast(),
                dtype.raw(),
                self.handle()?,
                stream.raw,
            )
        };
        self.finish("HcclAlltoAllV", code, stream, timeout, &[send, &*recv])
    }

    /// `HcclBarrier`, where exported.
    pub fn barrier(&self, stream: &Stream, timeout: Option<Duration>) -> Result<(), HcclError> {
        let f = self.api.hccl.HcclBarrier.ok_or(HcclError::Unavailable {
            function: "HcclBarrier",
            library: HCCL_LIB,
        })?;
        // SAFETY: live comm and stream.
        let code = unsafe { f(self.handle()?, stream.raw) };
        self.finish("HcclBarrier", code, stream, timeout, &[])
    }

    /// `HcclGetCommAsyncError`, where exported: an error raised by work already enqueued.
    pub fn async_error(&self) -> Result<(), HcclError> {
        let Some(f) = self.api.hccl.HcclGetCommAsyncError else {
            return Ok(());
        };
        let mut err: c_int = HCCL_SUCCESS;
        // SAFETY: live comm; `err` is a valid out-pointer.
        let code = unsafe { f(self.handle()?, &mut err) };
        self.api.hccl_check("HcclGetCommAsyncError", code)?;
        if err == HCCL_SUCCESS {
            Ok(())
        } else {
            Err(HcclError::AsyncError {
                code: err,
                name: hccl_result_name(err),
            })
        }
    }

    /// `HcclCommDestroy`, retried while it answers `HCCL_E_AGAIN` (work still in flight) until
    /// `deadline` has passed.
    pub fn destroy(self, deadline: Duration) -> Result<(), HcclError> {
        self.destroy_inner(deadline)
    }

    fn destroy_inner(&self, deadline: Duration) -> Result<(), HcclError> {
        let Some(raw) = self.raw.get() else {
            return Ok(());
        };
        let start = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            // SAFETY: `raw` is a live communicator; on success it is forgotten below so it is
            // destroyed exactly once.
            let code = unsafe { (self.api.hccl.HcclCommDestroy)(raw) };
            if code != HCCL_E_AGAIN {
                self.raw.set(None);
                return self.api.hccl_check("HcclCommDestroy", code);
            }
            if start.elapsed() >= deadline {
                return Err(HcclError::Timeout {
                    what: "HcclCommDestroy (still HCCL_E_AGAIN)".into(),
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(100));
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_inner(DROP_DESTROY_DEADLINE) {
            tracing::error!(error = %e, "HcclCommDestroy on drop failed; the communicator leaks");
        }
    }
}
