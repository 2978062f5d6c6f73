//! Errors of a real node: each names the step of the node's bring-up or teardown that
//! failed.

use std::path::PathBuf;

/// What can go wrong while starting, using or stopping a [`super::RealNode`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A program the node needs is not installed (`.ci/run` installs them).
    #[error(
        "`{program}` is not installed; a real node needs containerd, runc and the CNI plugins \
         (Debian: apt-get install containerd runc containernetworking-plugins) and a C \
         compiler with a static libc for the pause image (gcc, libc6-dev)"
    )]
    MissingProgram {
        /// The program.
        program: String,
    },
    /// A command failed.
    #[error("`{command}` failed: {message}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and stderr, or why it could not run.
        message: String,
    },
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The node's kubelet or container runtime did not come up in time; the log tail says why.
    #[error("{what} not within {after:?}; log {}:\n{tail}", log.display())]
    NotUp {
        /// What was awaited.
        what: String,
        /// The deadline.
        after: std::time::Duration,
        /// The log to read.
        log: PathBuf,
        /// Its last lines.
        tail: String,
    },
    /// The control plane's binaries (the kubelet among them) could not be had.
    #[error("kubelet binary: {0}")]
    Assets(#[from] crate::controlplane::Error),
}

impl Error {
    /// A `map_err` adapter for file operations on `path`.
    pub(crate) fn io(
        what: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Io { what, path, source }
    }
}

/// A real node's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
