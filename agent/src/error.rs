//! The agent's error type. Every variant has a short fixed [`Error::category`] used as a
//! metric label and Kubernetes Event reason (never a Debug string).

use std::time::Duration;

/// Errors of the agent library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag, environment variable or configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The Kubernetes API refused or failed a request.
    #[error("kubernetes API {action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A member Pod lacks something the operator should have set.
    #[error("member pod {pod}: {reason}")]
    InvalidMember { pod: String, reason: String },
    /// The rank table is missing or malformed.
    #[error("rank table {name}: {reason}")]
    RankTable { name: String, reason: String },
    /// The collective engine failed.
    #[error("communicator: {0}")]
    Comm(#[from] hcomm_comm::CommError),
    /// Local I/O (sockets, files) failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Something did not finish in time.
    #[error("{what} did not finish within {after:?}")]
    Timeout { what: String, after: Duration },
    /// Weight sync failed (reported by the weights module).
    #[error("weights: {0}")]
    Weights(String),
}

impl Error {
    /// Short fixed name for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::Kube { .. } => "kube",
            Error::InvalidMember { .. } => "invalid_member",
            Error::RankTable { .. } => "rank_table",
            Error::Comm(_) => "comm",
            Error::Io { .. } => "io",
            Error::Timeout { .. } => "timeout",
            Error::Weights(_) => "weights",
        }
    }

    /// Wraps a kube error with what was being done.
    pub fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let action = action.into();
        move |source| Error::Kube { action, source }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// Result alias of the agent library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_short_fixed_words() {
        let e = Error::Timeout {
            what: "drain".into(),
            after: Duration::from_secs(1),
        };
        assert_eq!(e.category(), "timeout");
        assert!(e.to_string().contains("drain"));
        assert_eq!(Error::Config("x".into()).category(), "config");
    }
}
