//! Owned handles over ACL objects: [`Stream`] and [`DeviceBuffer`] (the communicator handle
//! is in `comm`). Each keeps the [`Api`] (and so the loaded libraries) alive and releases
//! its object exactly once.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Api, Handle, Ptr};
use crate::hccl::HcclError;
use crate::hccl::types::{ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_SUCCESS};

/// An ACL stream; destroyed on drop.
#[derive(Debug)]
pub struct Stream {
    pub(super) raw: Handle,
    api: Arc<Api>,
}

// SAFETY: an aclrtStream is an opaque runtime handle usable from any thread bound to its
// device; `Stream` is only used behind `&mut`/a mutex by one thread at a time.
unsafe impl Send for Stream {}

impl Stream {
    pub(super) fn from_raw(raw: Handle, api: &Arc<Api>) -> Self {
        Self {
            raw,
            api: Arc::clone(api),
        }
    }

    /// Waits for all work on the stream; with a timeout when
    /// `aclrtSynchronizeStreamWithTimeout` is exported (milliseconds, -1 = forever).
    pub fn synchronize(&self, timeout: Option<Duration>) -> Result<(), HcclError> {
        match (timeout, self.api.acl.aclrtSynchronizeStreamWithTimeout) {
            (Some(t), Some(f)) => {
                let ms = i32::try_from(t.as_millis()).unwrap_or(i32::MAX);
                // SAFETY: `self.raw` is a live stream owned by `self`.
                let code = unsafe { f(self.raw, ms) };
                self.api
                    .acl_check("aclrtSynchronizeStreamWithTimeout", code)
            }
            _ => {
                // SAFETY: `self.raw` is a live stream owned by `self`.
                let code = unsafe { (self.api.acl.aclrtSynchronizeStream)(self.raw) };
                self.api.acl_check("aclrtSynchronizeStream", code)
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: `self.raw` was created by aclrtCreateStream and is destroyed exactly once.
        let code = unsafe { (self.api.acl.aclrtDestroyStream)(self.raw) };
        if code != ACL_SUCCESS {
            tracing::warn!(code, "aclrtDestroyStream failed");
        }
    }
}

/// Device bytes leaked on purpose because HCCL might still have been using them (see
/// [`DeviceBuffer::quarantine`]); process-wide, for a metric.
static QUARANTINED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Device bytes this process quarantined instead of freeing.
pub fn quarantined_device_bytes() -> u64 {
    QUARANTINED_BYTES.load(Ordering::Relaxed)
}

/// Device memory from `aclrtMalloc`; freed on drop, unless quarantined.
#[derive(Debug)]
pub struct DeviceBuffer {
    pub(super) ptr: Ptr,
    len: usize,
    api: Arc<Api>,
    quarantined: Cell<bool>,
}

// SAFETY: device memory is addressable from any host thread bound to the device; the buffer
// is uniquely owned and mutated only through `&mut self`.
unsafe impl Send for DeviceBuffer {}

impl DeviceBuffer {
    pub(super) fn from_raw(ptr: Ptr, len: usize, api: &Arc<Api>) -> Self {
        Self {
            ptr,
            len,
            api: Arc::clone(api),
            quarantined: Cell::new(false),
        }
    }

    /// Never free this buffer: a collective that may still be running on the device uses it
    /// and its communicator could not be destroyed. Leaking is the safe failure; freeing
    /// would let HCCL write into memory the next allocation owns.
    pub(super) fn quarantine(&self) {
        self.quarantined.set(true);
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn check(&self, what: &'static str, bytes: usize) -> Result<(), HcclError> {
        if bytes > self.len {
            return Err(HcclError::InvalidArgument(format!(
                "{what} needs {bytes} bytes, device buffer holds {}",
                self.len
            )));
        }
        Ok(())
    }

    /// Copies `src` to the start of the buffer (synchronous `aclrtMemcpy`).
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<(), HcclError> {
        self.check("host-to-device copy", src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: destination is our allocation of `self.len` bytes (>= src.len(), checked);
        // source is a live host slice; the copy is synchronous.
        let code = unsafe {
            (self.api.acl.aclrtMemcpy)(
                self.ptr,
                self.len,
                src.as_ptr().cast(),
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        };
        self.api.acl_check("aclrtMemcpy(host to device)", code)
    }

    /// Copies the first `dst.len()` bytes of the buffer to `dst` (synchronous).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), HcclError> {
        self.check("device-to-host copy", dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: destination is a live host slice of `dst.len()` bytes; the source has at
        // least that many (checked); the copy is synchronous.
        let code = unsafe {
            (self.api.acl.aclrtMemcpy)(
                dst.as_mut_ptr().cast(),
                dst.len(),
                self.ptr,
                dst.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.api.acl_check("aclrtMemcpy(device to host)", code)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        if self.quarantined.get() {
            QUARANTINED_BYTES.fetch_add(self.len as u64, Ordering::Relaxed);
            tracing::error!(
                bytes = self.len,
                "device buffer quarantined (leaked): HCCL may still use it"
            );
            return;
        }
        // SAFETY: `self.ptr` came from aclrtMalloc and is freed exactly once; every collective
        // that used it either completed (its stream synchronised) or had its communicator
        // destroyed, which stops its work, before returning; otherwise it is quarantined.
        let code = unsafe { (self.api.acl.aclrtFree)(self.ptr) };
        if code != ACL_SUCCESS {
            tracing::warn!(code, "aclrtFree failed");
        }
    }
}
