//! Errors of the testbed: each says which part of the installation failed.

/// What can go wrong while starting, driving or stopping a [`super::Testbed`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building or changing the simulated hosts failed.
    #[error("simulated hosts: {0}")]
    Hosts(#[from] crate::hosts::Error),
    /// The control plane failed to start or answer.
    #[error("control plane: {0}")]
    ControlPlane(#[from] crate::controlplane::Error),
    /// A real node failed to start or stop.
    #[error("real node: {0}")]
    RealNode(#[from] crate::realnode::Error),
    /// Installing the chart failed.
    #[error("chart: {0}")]
    Chart(#[from] crate::chart::ChartError),
    /// What was asked for cannot be set up on these hosts (the message says why).
    #[error("{0}")]
    Unsupported(String),
    /// The HCCL conformance simulator saw the product break one of HCCL's rules (a device
    /// buffer freed while a collective used it, collectives that do not match, ...).
    #[error("the HCCL simulator recorded violations of HCCL's rules:\n{0}")]
    HcclViolations(String),
    /// A workspace program has not been built.
    #[error(
        "`{program}` not found (searched {searched}); build the workspace's programs first: \
         cargo build --workspace --bins"
    )]
    MissingProgram {
        /// The program's name.
        program: String,
        /// The folders looked in.
        searched: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// Something did not happen within its deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The deadline.
        after: std::time::Duration,
    },
}

impl Error {
    /// A `map_err` adapter for I/O errors.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
    /// A `map_err` adapter for API errors.
    pub(crate) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Kube { what, source }
    }
}

/// The testbed's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
