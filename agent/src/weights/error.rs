//! The one error type of weight sync. Every variant names what it was about (the source
//! address, the chunk, the path) and maps to a short fixed [`WeightsError::category`] that
//! the agent uses as the Kubernetes Event reason and the metric label.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use super::digest::{Digest, DigestError};
use super::source::SourceRefused;

/// What a digest check was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The manifest of a weights set.
    Manifest,
    /// Chunk number `index` of the manifest's chunk table (its digest is `expected`).
    Chunk { index: usize },
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Manifest => write!(f, "manifest"),
            Subject::Chunk { index } => write!(f, "chunk #{index}"),
        }
    }
}

/// One source that was tried and why it was given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFailure {
    pub source: SocketAddr,
    pub reason: String,
}

fn list_tried(tried: &[SourceFailure]) -> String {
    if tried.is_empty() {
        return "none".into();
    }
    tried
        .iter()
        .map(|t| format!("{} ({})", t.source, t.reason))
        .collect::<Vec<_>>()
        .join(", ")
}

fn at(peer: &Option<SocketAddr>) -> String {
    peer.map(|p| format!(" from {p}")).unwrap_or_default()
}

/// Errors of manifest building, storage, serving and fetching.
#[derive(Debug, Error)]
pub enum WeightsError {
    /// Content did not hash to what the manifest (or `spec.weights.digest`) says.
    #[error("digest mismatch for {subject}{}: expected {expected}, got {actual}", at(.peer))]
    DigestMismatch {
        subject: Subject,
        peer: Option<SocketAddr>,
        expected: Digest,
        actual: Digest,
    },
    /// Every source failed (or none was given) before the set was complete.
    #[error(
        "no sources left for weights {manifest} with {remaining_chunks} chunk(s) missing; tried: {}",
        list_tried(.tried)
    )]
    NoSources {
        manifest: Digest,
        remaining_chunks: usize,
        tried: Vec<SourceFailure>,
    },
    /// A network wait passed its deadline.
    #[error("timed out after {after:?} waiting for {what}{}", at(.peer))]
    Timeout {
        what: String,
        peer: Option<SocketAddr>,
        after: Duration,
    },
    /// The group-secret handshake failed (wrong secret, or not an hcomm weights peer).
    #[error("authentication with {peer} failed: {reason}")]
    Auth { peer: SocketAddr, reason: String },
    /// A file-system or socket operation failed.
    #[error("{op}{}: {source}", .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Io {
        op: String,
        path: Option<PathBuf>,
        #[source]
        source: io::Error,
    },
    /// A peer sent something that is not the weights protocol (bad frame, oversize, wrong
    /// type), or a manifest that is not canonical.
    #[error("protocol error{}: {reason}", at(.peer))]
    Protocol {
        peer: Option<SocketAddr>,
        reason: String,
    },
    /// A request or a directory that cannot be a weights set (bad digest string, symlink,
    /// non-UTF-8 path, unsafe path, chunk size out of range).
    #[error("invalid weights input: {0}")]
    Invalid(String),
    /// A local source the agent may not read (outside the allowed roots, `..`, symlink,
    /// special file); nothing of it was read.
    #[error(transparent)]
    SourceRefused(#[from] SourceRefused),
}

impl WeightsError {
    /// Short fixed name for Event reasons and metric labels.
    pub fn category(&self) -> &'static str {
        match self {
            WeightsError::DigestMismatch { .. } => "digest_mismatch",
            WeightsError::NoSources { .. } => "no_sources",
            WeightsError::Timeout { .. } => "timeout",
            WeightsError::Auth { .. } => "auth",
            WeightsError::Io { .. } => "io",
            WeightsError::Protocol { .. } => "protocol",
            WeightsError::Invalid(_) => "invalid",
            WeightsError::SourceRefused(_) => "source_refused",
        }
    }

    pub(crate) fn io(op: impl Into<String>, path: Option<PathBuf>, source: io::Error) -> Self {
        WeightsError::Io {
            op: op.into(),
            path,
            source,
        }
    }

    pub(crate) fn protocol(peer: Option<SocketAddr>, reason: impl Into<String>) -> Self {
        WeightsError::Protocol {
            peer,
            reason: reason.into(),
        }
    }
}

/// Shorthand for results of this module.
pub type Result<T, E = WeightsError> = std::result::Result<T, E>;

/// `map_err` helper for file operations: `.map_err(io_at("read", &path))`.
pub(crate) fn io_at<'a>(
    op: &'a str,
    path: &'a std::path::Path,
) -> impl FnOnce(io::Error) -> WeightsError + 'a {
    move |e| WeightsError::io(op, Some(path.to_path_buf()), e)
}

impl From<DigestError> for WeightsError {
    fn from(e: DigestError) -> Self {
        WeightsError::Invalid(e.0)
    }
}

impl std::str::FromStr for Digest {
    type Err = WeightsError;

    /// Parses `sha256:<64 lower-case hex>` ([`Digest::parse_prefixed`]).
    fn from_str(s: &str) -> Result<Digest, WeightsError> {
        Ok(Digest::parse_prefixed(s)?)
    }
}

/// A blocking task that panicked or was cancelled, as a weights error.
pub(crate) fn blocking_failed(e: tokio::task::JoinError) -> WeightsError {
    WeightsError::io("blocking task", None, std::io::Error::other(e))
}
