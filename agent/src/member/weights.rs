//! The seam to weight sync: the member task calls a [`WeightsSyncer`]; the real
//! implementation is [`super::weights_sync::EngineSyncer`] on top of `crate::weights`,
//! plugged in by `run`. A failure carries a fixed reason (written on
//! `hcomm.io/weights-synced=False` and used as the Event reason) and a message.

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;

use hcomm_crds::WeightsSpec;
use hcomm_crds::contract::PodReason;

use crate::weights::Place;

/// What a sync is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightsRequest {
    pub namespace: String,
    pub group: String,
    /// The group's UID: names the incarnation whose secret authenticates the fetch.
    pub group_uid: String,
    pub pod: String,
    pub node: String,
    pub spec: Option<WeightsSpec>,
    /// The verified data interface and its address.
    pub interface: String,
    pub local_ip: IpAddr,
    /// Peer nodes (name, data address) that may hold the weights.
    pub peers: Vec<(String, String)>,
    /// This member's place in the rank table as a stripe, `(member position, members)`:
    /// where its stripe of the existing members' chunks starts, so joiners of one epoch
    /// start evenly spread over the set instead of at random (random starts left some
    /// joiners short stripes, which then raced the others for theirs and made the existing
    /// members send ~30 % of the set twice; issue 20). Before the table (an early sync),
    /// the member's index in its group, which spreads the joiners' starts as well.
    pub place: Place,
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
    pub warnings: Vec<(PodReason, String)>,
}

/// A failed sync: a fixed [`PodReason`] and a message naming what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncFailure {
    pub reason: PodReason,
    pub message: String,
    /// Warnings gathered before the failure.
    pub warnings: Vec<(PodReason, String)>,
}

impl SyncFailure {
    pub fn new(reason: PodReason, message: impl Into<String>) -> SyncFailure {
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

/// Peers learned while a sync runs: each value is the whole list so far, as in
/// [`WeightsRequest::peers`].
pub type PeerFeed = tokio::sync::watch::Receiver<Vec<(String, String)>>;

/// Brings a member's weights in place and verified.
pub trait WeightsSyncer: Send + Sync {
    fn sync<'a>(&'a self, req: &'a WeightsRequest) -> SyncFuture<'a>;

    /// As [`WeightsSyncer::sync`], also fetching from the peers sent on `more` once they
    /// arrive: a joiner's early sync learning its fellow joiners from its own rank table
    /// without losing what it has in flight ([`super::prefetch`]). By default the feed is
    /// ignored (the sync's outcome is still valid: every chunk is verified whoever sent
    /// it, only the fellows' uplinks go unused).
    fn sync_growing<'a>(&'a self, req: &'a WeightsRequest, more: PeerFeed) -> SyncFuture<'a> {
        drop(more);
        self.sync(req)
    }
}
