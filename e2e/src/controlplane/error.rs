//! Errors of the local control plane harness.
//!
//! Every variant names the component or file it concerns, and the ones about a
//! running process carry the tail of that process' log, so a failed test says
//! what broke without a second run.

use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong while finding, building, starting or stopping the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "create state dir".
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// A helper command (`go`, `openssl`, `kill`) could not run or failed.
    #[error("{command} failed: {message}")]
    Command {
        /// The command line, shortened.
        command: String,
        /// Exit status and the tail of its output.
        message: String,
    },

    /// A binary is neither in `KUBEBUILDER_ASSETS` nor buildable.
    #[error("binary {binary} not found: {reason}")]
    MissingBinary {
        /// The binary's name, e.g. `kube-apiserver`.
        binary: &'static str,
        /// Why it could not be found or built.
        reason: String,
    },

    /// A component could not be spawned.
    #[error("failed to start {component} ({}): {source}", binary.display())]
    Spawn {
        /// The component, e.g. `etcd`.
        component: &'static str,
        /// The binary that was run.
        binary: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// A component exited while it should be running.
    #[error("{component} exited ({status}); log {}:\n{log_tail}", log.display())]
    Exited {
        /// The component, e.g. `kube-apiserver`.
        component: &'static str,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        log_tail: String,
    },

    /// A component did not become healthy before its deadline.
    #[error("{component} not healthy after {waited:?} ({last_error}); log {}:\n{log_tail}", log.display())]
    Unhealthy {
        /// The component, e.g. `kube-scheduler`.
        component: &'static str,
        /// How long was waited.
        waited: Duration,
        /// The last probe failure.
        last_error: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        log_tail: String,
    },

    /// A process did not go away after SIGKILL.
    #[error("{component} (pid {pid}) still running after SIGKILL")]
    Unkillable {
        /// The component.
        component: String,
        /// Its pid (and process group id).
        pid: u32,
    },

    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done, e.g. "apply CRD hcommgroups.hcomm.io".
        action: String,
        /// The underlying error.
        source: kube::Error,
    },

    /// A kubeconfig could not be built or loaded.
    #[error("kubeconfig {}: {message}", path.display())]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },

    /// Something did not happen within its deadline.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was awaited, e.g. "CRD foo.example.com Established".
        what: String,
        /// How long was waited.
        waited: Duration,
    },

    /// The state file of a detached control plane is missing or malformed.
    #[error("state {}: {message}", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Result of the control plane harness.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }

    pub(crate) fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Kube { action, source }
    }
}
