//! Errors of the simulated-hosts harness: every failed `ip`/`tc` call carries the
//! command line, its exit status and its stderr, so a test failure says what broke.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while building, changing or tearing down simulated hosts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process lacks the capabilities to create network namespaces. Callers may fall
    /// back to [`super::SimHosts::loopback`].
    #[error(
        "simulated hosts need root (CAP_NET_ADMIN and CAP_SYS_ADMIN); this process lacks {missing}. \
         Run the tests as root, or use SimHosts::loopback (no namespaces, no cuts, no shaping)"
    )]
    NotPermitted {
        /// Which capabilities are missing, e.g. `CAP_NET_ADMIN`.
        missing: String,
    },

    /// A program this harness needs (`ip`, `tc`, `kill`) is not installed.
    #[error("`{program}` is not installed: {source} (install iproute2 / procps)")]
    MissingTool {
        program: String,
        #[source]
        source: io::Error,
    },

    /// A command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },

    /// A command could not be started at all.
    #[error("could not run `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: io::Error,
    },

    /// The requested subnet overlaps an address already configured in the root namespace
    /// (another harness instance, or a real network).
    #[error(
        "subnet {subnet} is already in use by {address} on interface {interface}; \
         pick another SubnetIndex or use SubnetIndex::Auto"
    )]
    SubnetInUse {
        subnet: String,
        address: String,
        interface: String,
    },

    /// Every /24 pair in 198.18.0.0/15 is taken.
    #[error("no free /24 pair left in 198.18.0.0/16 + 198.19.0.0/16")]
    NoFreeSubnet,

    /// The kernel or the variant cannot do what was asked (e.g. delay without `sch_netem`,
    /// or cutting a loopback host).
    #[error("{what} is not supported: {why}")]
    Unsupported { what: &'static str, why: String },

    /// The options are inconsistent (too many hosts, loss outside 0..=100, ...).
    #[error("invalid simulated-host options: {0}")]
    InvalidOptions(String),

    /// A host index outside `0..len`.
    #[error("no simulated host with index {index} (there are {len})")]
    NoSuchHost { index: usize, len: usize },

    /// The cross-process lock that serialises subnet allocation could not be taken.
    #[error("subnet allocation lock {path}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Processes inside a namespace survived SIGKILL until the deadline.
    #[error("processes {pids:?} in namespace {netns} did not exit within the deadline")]
    ProcessesLinger { netns: String, pids: Vec<u32> },

    /// Teardown hit several errors; all of them are listed.
    #[error("teardown left errors: {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Teardown(Vec<Error>),
}

impl Error {
    /// A short, fixed name for metrics labels and event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::NotPermitted { .. } => "NotPermitted",
            Error::MissingTool { .. } => "MissingTool",
            Error::Command { .. } => "CommandFailed",
            Error::Spawn { .. } => "SpawnFailed",
            Error::SubnetInUse { .. } => "SubnetInUse",
            Error::NoFreeSubnet => "NoFreeSubnet",
            Error::Unsupported { .. } => "Unsupported",
            Error::InvalidOptions(_) => "InvalidOptions",
            Error::NoSuchHost { .. } => "NoSuchHost",
            Error::Lock { .. } => "LockFailed",
            Error::ProcessesLinger { .. } => "ProcessesLinger",
            Error::Teardown(_) => "TeardownFailed",
        }
    }
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
