//! The seam to weight sync: the member task calls a [`WeightsSyncer`]; the real
//! implementation is [`super::weights_sync::EngineSyncer`] on top of `crate::weights`,
//! plugged in by `run`. A failure carries a fixed reason (written on
//! `hcomm.io/weights-synced=False` and used as the Event reason) and a message.

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;

use hcomm_crds::WeightsSpec;

/// Reasons of `hcomm.io/weights-synced=False` (and of the sync Events).
pub mod reasons {
    /// The declared source (or a peer's manifest) does not hash to `spec.weights.digest`.
    pub const DIGEST_MISMATCH: &str = hcomm_crds::contract::PodReason::DigestMismatch.as_str();
    /// No peer serves the set and the declared source cannot be read by the agent.
    pub const NO_SOURCE: &str = hcomm_crds::contract::PodReason::NoWeightsSource.as_str();
    /// The peers that hold the set could not deliver it (lost, timed out, refused).
    pub const PEER_FETCH_FAILED: &str = hcomm_crds::contract::PodReason::PeerFetchFailed.as_str();
    /// `spec.weights` is malformed (e.g. the digest is not `sha256:<64 hex>`).
    pub const INVALID_SPEC: &str = hcomm_crds::contract::PodReason::InvalidWeightsSpec.as_str();
    /// Anything else (local I/O, no verified interface).
    pub const SYNC_FAILED: &str = super::super::state::reasons::SYNC_FAILED;
    /// A peer sent a chunk that did not hash right (refetched elsewhere): a warning Event.
    pub const CORRUPT_CHUNK: &str = hcomm_crds::contract::PodReason::CorruptWeightsChunk.as_str();
    /// A peer was given up during the transfer (its chunks went elsewhere): a warning Event.
    pub const SOURCE_LOST: &str = hcomm_crds::contract::PodReason::WeightsSourceLost.as_str();
}

/// What a sync is asked to do.
#[derive(Debug, Clone)]
pub struct WeightsRequest {
    pub namespace: String,
    pub group: String,
    pub pod: String,
    pub node: String,
    pub spec: Option<WeightsSpec>,
    /// The verified data interface and its address.
    pub interface: String,
    pub local_ip: IpAddr,
    /// Peer nodes (name, data address) that may hold the weights.
    pub peers: Vec<(String, String)>,
    pub epoch: u64,
}

/// A finished sync.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightsOutcome {
    /// Where the worker reads the weights.
    pub path: Option<PathBuf>,
    /// Bytes received over the network or imported from the source.
    pub bytes: u64,
    pub seconds: f64,
    pub message: String,
    /// Warnings worth a Kubernetes Event (reason, message): corrupt chunks, lost sources;
    /// at most one per reason, naming every source involved.
    pub warnings: Vec<(&'static str, String)>,
}

/// A failed sync: a fixed reason (see [`reasons`]) and a message naming what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncFailure {
    pub reason: &'static str,
    pub message: String,
    /// Warnings gathered before the failure.
    pub warnings: Vec<(&'static str, String)>,
}

impl SyncFailure {
    pub fn new(reason: &'static str, message: impl Into<String>) -> SyncFailure {
        SyncFailure {
            reason,
            message: message.into(),
            warnings: Vec::new(),
        }
    }
}

/// A boxed future of a sync.
pub type SyncFuture<'a> =
    Pin<Box<dyn Future<Output = Result<WeightsOutcome, SyncFailure>> + Send + 'a>>;

/// Brings a member's weights in place and verified.
pub trait WeightsSyncer: Send + Sync {
    fn sync<'a>(&'a self, req: &'a WeightsRequest) -> SyncFuture<'a>;
}
