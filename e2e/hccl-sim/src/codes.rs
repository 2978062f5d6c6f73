//! The return codes of the public headers the simulator answers with: `HcclResult`
//! (hccl_types.h) and `aclError` (acl_base.h, rt_error_codes.h). Which ACL code a failed
//! collective surfaces as on stream synchronisation is the simulator's choice among the
//! header's codes (documented per constant).

/// `HCCL_SUCCESS`.
pub const HCCL_SUCCESS: i32 = 0;
/// `HCCL_E_PARA`: bad argument.
pub const HCCL_E_PARA: i32 = 1;
/// `HCCL_E_PTR`: bad pointer or handle.
pub const HCCL_E_PTR: i32 = 2;
/// `HCCL_E_INTERNAL`.
pub const HCCL_E_INTERNAL: i32 = 4;
/// `HCCL_E_NOT_SUPPORT`: an entry point the simulator does not model.
pub const HCCL_E_NOT_SUPPORT: i32 = 5;
/// `HCCL_E_TIMEOUT`: rendezvous not complete within `HCCL_CONNECT_TIMEOUT`.
pub const HCCL_E_TIMEOUT: i32 = 9;
/// `HCCL_E_TCP_CONNECT`: the root rank could not be reached, or a peer's address was wrong.
pub const HCCL_E_TCP_CONNECT: i32 = 11;
/// `HCCL_E_TCP_TRANSFER`: a peer's connection broke.
pub const HCCL_E_TCP_TRANSFER: i32 = 13;
/// `HCCL_E_RUNTIME`: a runtime precondition (device not set) failed.
pub const HCCL_E_RUNTIME: i32 = 15;
/// `HCCL_E_AGAIN`: `HcclCommDestroy` while the communicator's work could not be stopped yet.
pub const HCCL_E_AGAIN: i32 = 20;
/// `HCCL_E_REMOTE`: the one asynchronous error `HcclGetCommAsyncError` reports (RDMA error CQE).
pub const HCCL_E_REMOTE: i32 = 21;

/// `ACL_SUCCESS`.
pub const ACL_SUCCESS: i32 = 0;
/// `ACL_ERROR_INVALID_PARAM`.
pub const ACL_ERROR_INVALID_PARAM: i32 = 100_000;
/// `ACL_ERROR_UNINITIALIZE`: a call before `aclInit`.
pub const ACL_ERROR_UNINITIALIZE: i32 = 100_001;
/// `ACL_ERROR_REPEAT_INITIALIZE`: a second `aclInit`.
pub const ACL_ERROR_REPEAT_INITIALIZE: i32 = 100_002;
/// `ACL_ERROR_RT_PARAM_INVALID`: bad handle or pointer.
pub const ACL_ERROR_RT_PARAM_INVALID: i32 = 107_000;
/// `ACL_ERROR_RT_INVALID_DEVICEID`.
pub const ACL_ERROR_RT_INVALID_DEVICEID: i32 = 107_001;
/// `ACL_ERROR_RT_CONTEXT_NULL`: the calling thread has no device (`aclrtSetDevice`).
pub const ACL_ERROR_RT_CONTEXT_NULL: i32 = 107_002;
/// `ACL_ERROR_RT_TASK_TIMEOUT`: a collective exceeded `HCCL_EXEC_TIMEOUT`.
pub const ACL_ERROR_RT_TASK_TIMEOUT: i32 = 107_020;
/// `ACL_ERROR_RT_DEVICE_TASK_ABORT`: a collective stopped by `HcclCommDestroy`.
pub const ACL_ERROR_RT_DEVICE_TASK_ABORT: i32 = 107_022;
/// `ACL_ERROR_RT_MEMORY_FREE`: `aclrtFree` of something that is not a live allocation.
pub const ACL_ERROR_RT_MEMORY_FREE: i32 = 207_002;
/// `ACL_ERROR_RT_AICPU_EXCEPTION`: a collective whose ranks disagree (op, count, type, root).
pub const ACL_ERROR_RT_AICPU_EXCEPTION: i32 = 507_018;
/// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`: `aclrtSynchronizeStreamWithTimeout` ran out of time.
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: i32 = 507_046;
/// `ACL_ERROR_RT_SUSPECT_REMOTE_ERROR`: a peer of the collective failed or went away.
pub const ACL_ERROR_RT_SUSPECT_REMOTE_ERROR: i32 = 507_057;

/// `ACL_MEMCPY_HOST_TO_DEVICE` (`aclrtMemcpyKind`).
pub const ACL_MEMCPY_HOST_TO_DEVICE: u32 = 1;
/// `ACL_MEMCPY_DEVICE_TO_HOST`.
pub const ACL_MEMCPY_DEVICE_TO_HOST: u32 = 2;

/// `HCCL_ROOT_INFO_BYTES`.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// The message `HcclGetErrorString` returns for a code.
pub fn hccl_message(code: i32) -> &'static std::ffi::CStr {
    match code {
        HCCL_SUCCESS => c"success",
        HCCL_E_PARA => c"parameter error",
        HCCL_E_PTR => c"empty or invalid pointer",
        HCCL_E_INTERNAL => c"internal error",
        HCCL_E_NOT_SUPPORT => c"not supported (by the hcomm HCCL simulator)",
        HCCL_E_TIMEOUT => c"timeout",
        HCCL_E_TCP_CONNECT => c"tcp connect failed",
        HCCL_E_TCP_TRANSFER => c"tcp transfer failed",
        HCCL_E_RUNTIME => c"call runtime api failed",
        HCCL_E_AGAIN => c"try again",
        HCCL_E_REMOTE => c"error cqe",
        _ => c"unknown error",
    }
}
