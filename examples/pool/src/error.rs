//! The library's error type: one variant per boundary, so a caller can tell an agent that
//! is not there from one that refused, and a bad flag from an I/O failure.

use std::path::PathBuf;

/// Errors of the example worker and router.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The exchange with the node agent failed (the worker library's error).
    #[error(transparent)]
    Agent(#[from] hcomm_worker::Error),
    /// The weights directory could not be resolved or digested.
    #[error("weights at {path}: {message}")]
    Weights { path: PathBuf, message: String },
    /// A bad command line or environment.
    #[error("{0}")]
    Config(String),
    /// Listening or serving HTTP failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The Kubernetes client failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
