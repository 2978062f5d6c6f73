//! The one error type of the collective engine, [`CommError`], and the [`ErrorContext`]
//! every network error carries.

use std::fmt;
use std::time::Duration;

/// Where a failure happened: every network error carries one, so a message names the
/// operation, the epoch, the peer (rank and address) and the local interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorContext {
    /// What was being done, e.g. "all_reduce", "connect", "handshake", "rendezvous".
    pub op: String,
    pub epoch: u64,
    /// The peer's rank in the communicator, when known (None e.g. for the rendezvous root).
    pub peer_rank: Option<usize>,
    /// The peer's address, when known.
    pub peer_addr: Option<String>,
    /// Local interface and address, e.g. "eth1 (10.0.0.2:40123)".
    pub local: String,
}

impl fmt::Display for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "during {} at epoch {}", self.op, self.epoch)?;
        match (&self.peer_rank, &self.peer_addr) {
            (Some(r), Some(a)) => write!(f, ", peer rank {r} at {a}")?,
            (Some(r), None) => write!(f, ", peer rank {r}")?,
            (None, Some(a)) => write!(f, ", peer at {a}")?,
            (None, None) => {}
        }
        write!(f, ", local {}", self.local)
    }
}

/// The one error type of the collective engine. [`CommError::category`] gives a short fixed
/// name for metrics labels and Kubernetes Event reasons.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("timed out after {after:?} {ctx}")]
    Timeout {
        ctx: Box<ErrorContext>,
        after: Duration,
    },
    #[error("peer closed the connection {ctx}: {detail}")]
    PeerClosed {
        ctx: Box<ErrorContext>,
        detail: String,
    },
    #[error("peer unreachable {ctx}: {source}")]
    Unreachable {
        ctx: Box<ErrorContext>,
        #[source]
        source: std::io::Error,
    },
    #[error("network I/O failed {ctx}: {source}")]
    Io {
        ctx: Box<ErrorContext>,
        #[source]
        source: std::io::Error,
    },
    #[error("authentication failed {ctx}: {reason}")]
    Auth {
        ctx: Box<ErrorContext>,
        reason: String,
    },
    #[error(
        "stale epoch {ctx}: local epoch {local_epoch}, remote epoch {remote_epoch} (the older side is refused)"
    )]
    StaleEpoch {
        ctx: Box<ErrorContext>,
        local_epoch: u64,
        remote_epoch: u64,
    },
    #[error("protocol violation {ctx}: {reason}")]
    Protocol {
        ctx: Box<ErrorContext>,
        reason: String,
    },
    /// The communicator is unusable: an earlier operation failed here or on a peer.
    #[error("communicator aborted {ctx}: {reason}")]
    Aborted {
        ctx: Box<ErrorContext>,
        reason: String,
    },
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument { op: String, reason: String },
    /// The bind interface/address could not be resolved or bound.
    #[error("network interface {spec:?}: {reason}")]
    Interface { spec: String, reason: String },
    /// A run-time library (e.g. libhccl.so) is absent.
    #[error(
        "library {library} not found (searched {search_path}; ASCEND_HOME_PATH={ascend_home:?})"
    )]
    LibraryMissing {
        library: String,
        search_path: String,
        ascend_home: Option<String>,
    },
    /// A backend library returned an error code.
    #[error("{backend} {op} failed: {name} (code {code})")]
    Backend {
        backend: &'static str,
        op: String,
        code: i64,
        name: String,
    },
    #[error("{op} is not supported by the {backend} backend")]
    Unsupported { backend: &'static str, op: String },
    /// A bound on the engine's state was reached (queued bytes, receive queues, links,
    /// rendezvous sessions): refused rather than grown without bound.
    #[error("limit reached {ctx}: {reason}")]
    Limit {
        ctx: Box<ErrorContext>,
        reason: String,
    },
}

impl CommError {
    /// Short fixed name for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            CommError::Timeout { .. } => "timeout",
            CommError::PeerClosed { .. } => "peer_closed",
            CommError::Unreachable { .. } => "unreachable",
            CommError::Io { .. } => "io",
            CommError::Auth { .. } => "auth",
            CommError::StaleEpoch { .. } => "stale_epoch",
            CommError::Protocol { .. } => "protocol",
            CommError::Aborted { .. } => "aborted",
            CommError::InvalidArgument { .. } => "invalid_argument",
            CommError::Interface { .. } => "interface",
            CommError::LibraryMissing { .. } => "library_missing",
            CommError::Backend { .. } => "backend",
            CommError::Unsupported { .. } => "unsupported",
            CommError::Limit { .. } => "limit",
        }
    }

    /// The network context, for the variants that have one.
    pub fn context(&self) -> Option<&ErrorContext> {
        match self {
            CommError::Timeout { ctx, .. }
            | CommError::PeerClosed { ctx, .. }
            | CommError::Unreachable { ctx, .. }
            | CommError::Io { ctx, .. }
            | CommError::Auth { ctx, .. }
            | CommError::StaleEpoch { ctx, .. }
            | CommError::Protocol { ctx, .. }
            | CommError::Aborted { ctx, .. } => Some(ctx),
            _ => None,
        }
    }

    /// The peer rank named by the error, if any.
    pub fn peer_rank(&self) -> Option<usize> {
        self.context().and_then(|c| c.peer_rank)
    }

    pub(crate) fn invalid(op: &str, reason: impl Into<String>) -> CommError {
        CommError::InvalidArgument {
            op: op.to_string(),
            reason: reason.into(),
        }
    }
}
