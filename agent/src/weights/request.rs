//! What a fetch asks for ([`FetchRequest`], its [`Timeouts`]) and the state the fetch
//! driver shares with its workers ([`Ctx`]). Below `fetch`, `worker` and `conn`, which all
//! read it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::sync::Arc;
use tokio::sync::{Notify, watch};

use super::auth::{GroupId, GroupSecret};
use super::digest::Digest;
use super::link::CurrentLink;
use super::progress::Progress;
use super::schedule::{Place, Scheduler};
use super::store::{WeightSet, WeightStore};

/// Deadlines of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to a source, retries included (a fellow joiner may start a little later).
    pub connect: Duration,
    /// The group-secret handshake.
    pub handshake: Duration,
    /// Waiting for any one response (a chunk behind `parallelism - 1` others).
    pub response: Duration,
    /// The whole fetch making no progress (no chunk verified, no source news).
    pub stall: Duration,
    /// How often partial sources are asked what they hold.
    pub have_poll: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            handshake: Duration::from_secs(5),
            response: Duration::from_secs(30),
            stall: Duration::from_secs(60),
            have_poll: Duration::from_millis(100),
        }
    }
}

/// What to fetch, from where, into where.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// `spec.weights.digest`.
    pub manifest_digest: Digest,
    /// Members holding the set AND fellow joiners (they serve what they have verified).
    pub sources: Vec<SocketAddr>,
    pub dest: WeightStore,
    /// The group this fetch is for, and its secret: sources serve only the sets that
    /// group's spec names.
    pub group: GroupId,
    pub secret: GroupSecret,
    pub timeouts: Timeouts,
    /// Requests in flight per source that holds the whole set.
    pub parallelism: usize,
    /// Requests in flight per fellow joiner (a source holding part of the set). Its uplink
    /// is shared by every joiner that asks it, so a request queued behind others waits for
    /// all of them: four deep, a chunk from a fellow of eight joiners at 500 Mbit/s came
    /// up to ~1.9 s after it was asked, and a joiner that receives each chunk that much
    /// after the first joiner had it still lacks that many seconds of chunks when the
    /// existing members have sent their last one. One deep, the same runs took 0.6–0.8 s
    /// less (issue 20; `docs/benchmarks.md`).
    pub partial_parallelism: usize,
    /// This joiner's place among the members syncing together: picks its stripe of the
    /// existing members' chunks (the agent passes its member's place in the rank table,
    /// or before the table only its index in the group). Default: a random start.
    pub place: Place,
    /// Local address to connect from (the data NIC's), if any.
    pub bind: Option<IpAddr>,
    /// The link swapped to the set once it is installed (the agent: the group's link).
    pub link: CurrentLink,
    /// Sources learned while the fetch runs: each value sent is the whole list so far,
    /// and any address in it the fetch does not ask yet becomes a source (a joiner's early
    /// sync, begun from the serving members alone, learning its fellow joiners from its
    /// own rank table). Stopping the fetch and beginning anew with them lost every chunk
    /// in flight on the serving members' uplinks, the swarm's bottleneck. `None`: the
    /// sources are fixed.
    pub more_sources: Option<watch::Receiver<Vec<SocketAddr>>>,
}

impl FetchRequest {
    /// Defaults: 4 requests in flight per source holding the set and 1 per fellow joiner,
    /// default timeouts, a random start, the store-wide link.
    pub fn new(
        manifest_digest: Digest,
        sources: Vec<SocketAddr>,
        dest: WeightStore,
        secret: GroupSecret,
    ) -> FetchRequest {
        FetchRequest {
            manifest_digest,
            sources,
            dest,
            group: GroupId::default(),
            secret,
            timeouts: Timeouts::default(),
            parallelism: 4,
            partial_parallelism: 1,
            place: Place::Unknown,
            bind: None,
            link: CurrentLink::node(),
            more_sources: None,
        }
    }
}

/// State shared by the fetch driver and its workers.
pub(crate) struct Ctx {
    pub req: FetchRequest,
    pub set: Arc<WeightSet>,
    pub sched: Mutex<Scheduler>,
    /// Woken on anything a waiting worker or the driver may care about.
    pub changed: Notify,
    pub progress: Progress,
    /// When the last chunk was verified (stall detection).
    pub last_progress: Mutex<Instant>,
}
