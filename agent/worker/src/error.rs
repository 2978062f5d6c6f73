//! The library's error type: one variant per boundary (the agent's socket, the agent's
//! answer, the communicator, the epoch rules), each with a short fixed [`Error::code`] that
//! the C ABI returns and the Python package maps to its exceptions.

use std::path::PathBuf;
use std::time::Duration;

/// Errors of the worker library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The agent's socket could not be reached or the connection broke.
    #[error("agent socket {path}: {source}")]
    AgentIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The agent did not answer within the bound of one exchange.
    #[error("agent did not answer {op} within {after:?}")]
    AgentTimeout { op: &'static str, after: Duration },
    /// The agent answered `{"ok":false,"error":...}`.
    #[error("agent refused {op}: {error}")]
    AgentRefused { op: &'static str, error: String },
    /// The agent sent something that is not the documented protocol.
    #[error("agent protocol: {0}")]
    AgentProtocol(String),
    /// The agent closed the connection.
    #[error("agent closed the connection")]
    AgentClosed,
    /// Waited for something the agent had not published within the deadline.
    #[error("no {what} from the agent within {after:?}")]
    Timeout { what: &'static str, after: Duration },
    /// The agent's communicator placement could not be used.
    #[error("bad communicator placement from the agent: {0}")]
    BadPlacement(String),
    /// An epoch request that breaks the epoch rules (older than the serving one, a switch
    /// with nothing prepared, a collective with no communicator).
    #[error(transparent)]
    Epoch(#[from] crate::epochs::EpochRefusal),
    /// The TCP engine failed (init, a collective).
    #[error("communicator: {0}")]
    Comm(#[from] hcomm_comm::CommError),
    /// The HCCL backend failed (runtime not loadable, init, switch).
    #[error("HCCL: {0}")]
    Hccl(#[from] hcomm_comm::HcclError),
    /// A bad argument from the caller.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A C caller's buffer is too small for the answer (`needed` bytes with the NUL).
    #[error("buffer too small: {needed} bytes needed")]
    BufferTooSmall { needed: usize },
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The error's fixed code (the C ABI's return value; see `include/hcomm_worker.h`).
    pub fn code(&self) -> i32 {
        match self {
            Error::Invalid(_) => 1,
            Error::AgentIo { .. } | Error::AgentClosed | Error::AgentProtocol(_) => 2,
            Error::AgentRefused { .. } => 3,
            Error::AgentTimeout { .. } | Error::Timeout { .. } => 4,
            Error::Comm(_) | Error::BadPlacement(_) => 5,
            Error::Hccl(_) => 6,
            Error::Epoch(_) => 7,
            Error::BufferTooSmall { .. } => 8,
        }
    }
}
