//! Errors of the HCCL backend. Each has a short fixed [`HcclError::category`] for metrics and
//! Kubernetes Event reasons; the message says what to do about it.

use std::time::Duration;

/// Everything the HCCL backend can fail with.
#[derive(Debug, thiserror::Error)]
pub enum HcclError {
    /// `libhccl.so` or `libascendcl.so` could not be opened from any candidate location.
    #[error(
        "{library} could not be loaded: no Ascend CANN runtime found (searched: {}; \
         ASCEND_HOME_PATH={}); install the CANN toolkit and `source set_env.sh`, or set \
         ASCEND_HOME_PATH; last loader error: {last_error}",
        .searched.join(", "),
        .ascend_home.as_deref().unwrap_or("(unset)")
    )]
    LibraryNotFound {
        library: &'static str,
        searched: Vec<String>,
        ascend_home: Option<String>,
        last_error: String,
    },
    /// The library loaded but lacks symbols hcomm cannot work without.
    #[error("{library} at {path} lacks required symbols: {}", .missing.join(", "))]
    MissingSymbols {
        library: &'static str,
        path: String,
        missing: Vec<&'static str>,
    },
    /// An optional entry point (weak in the headers, absent in some CANN releases) is missing.
    #[error("{function} is not exported by the loaded {library} (older or different CANN release)")]
    Unavailable {
        function: &'static str,
        library: &'static str,
    },
    /// An HCCL call returned a non-success `HcclResult`.
    #[error("{call} failed: {name} ({code}): {message}")]
    Hccl {
        call: &'static str,
        code: i32,
        name: &'static str,
        message: String,
    },
    /// An ACL runtime call returned a non-success `aclError`.
    #[error("{call} failed with aclError {code}{}", .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Acl {
        call: &'static str,
        code: i32,
        message: Option<String>,
    },
    /// Our data type has no HCCL counterpart.
    #[error("data type {ours} has no HCCL equivalent (hccl_types.h HcclDataType)")]
    UnsupportedDataType { ours: String },
    /// Our reduce op has no HCCL counterpart.
    #[error("reduce op {ours} has no HCCL equivalent (hccl_types.h HcclReduceOp)")]
    UnsupportedReduceOp { ours: String },
    /// A root info received out of band is not 4108 bytes.
    #[error("root info must be exactly 4108 bytes (HCCL_ROOT_INFO_BYTES), got {len}")]
    BadRootInfo { len: usize },
    /// A retried call (e.g. `HcclCommDestroy` on `HCCL_E_AGAIN`) or a background epoch build did
    /// not finish in time.
    #[error("{what} did not finish within {waited:?}")]
    Timeout { what: String, waited: Duration },
    /// A caller error: sizes, ranks, epochs.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The background thread building an epoch panicked.
    #[error("background build of epoch {epoch} panicked")]
    BuilderPanicked { epoch: u64 },
    /// A collective failed or did not finish within the op timeout after it was enqueued.
    /// HCCL may still have been using its device buffers, so the communicator was destroyed
    /// first (`HcclCommDestroy` stops a stuck communicator's work; HCCL has no abort call);
    /// if that could not be confirmed, the buffers were quarantined (leaked) rather than
    /// freed. The communicator is unusable afterwards: its epoch must be replaced.
    #[error(
        "{call} {}: {cause}; communicator {}, {quarantined_bytes} device bytes quarantined",
        if *.timed_out { "did not finish within the op timeout" } else { "failed on the device" },
        if *.communicator_destroyed { "destroyed before any buffer was freed" } else { "could not be destroyed" }
    )]
    OpAborted {
        call: &'static str,
        cause: Box<HcclError>,
        timed_out: bool,
        communicator_destroyed: bool,
        quarantined_bytes: usize,
    },
    /// The communicator was destroyed after a failed collective (see [`Self::OpAborted`]).
    #[error("the communicator was aborted after a failed collective; its epoch must be replaced")]
    CommunicatorAborted,
    /// `HcclGetCommAsyncError` reported an error raised by work already enqueued (HCCL reports
    /// an RDMA error completion as `HCCL_E_REMOTE`).
    #[error(
        "HcclGetCommAsyncError reports {name} ({code}): the communicator's links are broken; replace its epoch"
    )]
    AsyncError { code: i32, name: &'static str },
    /// A new communicator would take HCCL memory past the configured budget
    /// (`HCCL_BUFFSIZE` MB twice per communicator, times the communicators alive).
    #[error(
        "HCCL memory budget exceeded: a new communicator needs {needed} bytes, {reserved} are \
         held by {live} live communicator(s), the budget is {budget}; wait for an old epoch to \
         be destroyed, lower bufferSizeMb or raise the budget"
    )]
    MemoryBudgetExceeded {
        needed: u64,
        reserved: u64,
        live: usize,
        budget: u64,
    },
}

impl HcclError {
    /// Short fixed name for metrics labels and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::LibraryNotFound { .. } => "HcclLibraryNotFound",
            Self::MissingSymbols { .. } => "HcclMissingSymbols",
            Self::Unavailable { .. } => "HcclUnavailable",
            Self::Hccl { .. } => "HcclCallFailed",
            Self::Acl { .. } => "AclCallFailed",
            Self::UnsupportedDataType { .. } | Self::UnsupportedReduceOp { .. } => {
                "HcclUnsupported"
            }
            Self::BadRootInfo { .. } => "HcclBadRootInfo",
            Self::Timeout { .. } => "HcclTimeout",
            Self::InvalidArgument(_) => "HcclInvalidArgument",
            Self::BuilderPanicked { .. } => "HcclBuilderPanicked",
            Self::OpAborted {
                timed_out: true, ..
            } => "HcclOpTimeout",
            Self::OpAborted { .. } => "HcclOpFailed",
            Self::CommunicatorAborted => "HcclCommunicatorAborted",
            Self::AsyncError { .. } => "HcclAsyncError",
            Self::MemoryBudgetExceeded { .. } => "HcclMemoryBudgetExceeded",
        }
    }
}
