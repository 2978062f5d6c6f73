//! A weight sync begun while verification still runs. The NPU network check (one
//! serialised `hccn_tool` call per fact and per ping: ~0.1 s for one device on the testbed,
//! longer on a node) runs beside the data NIC's check; the sync needs only the latter's
//! result — the verified data interface and a plan whose peers passed the rank-table check
//! — so it starts as soon as that passed instead of after the whole verdict. The member
//! stays `Verifying` until both parts pass and joins nothing before; its Syncing phase
//! then takes this sync's outcome ([`outcome`]). A verification that does not pass (or a
//! Pod deleted before its Syncing phase) drops the sync, which stops it: serving members
//! send nothing more to a member that will not join. The chunks already verified stay
//! staged in the node's store (its sets are shared by concurrent syncs and resumed by the
//! next one), so a retry on this node fetches only the rest.
//!
//! A joiner may also begin before its own rank table exists, from the serving members of
//! the table it can read ([`super::early_sync`]): a [`Start::Early`] sync. Its outcome is
//! taken only when it succeeded and the request it would stand for asks no source it did
//! not have (`Prefetch::serves`). A request for the same set over the same interface with
//! new sources (fellow joiners to stripe with) is handed to the running sync, which asks
//! them too ([`Prefetch::takes_on`]): stopped and begun anew, it lost every chunk in flight on
//! the serving members' uplinks, which every joiner waits on.

use std::sync::Arc;

use hcomm_crds::contract::PodReason;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::weights::{SyncFailure, WeightsOutcome, WeightsRequest, WeightsSyncer};
use crate::weights::Place;

/// Peers for a running sync, as [`super::weights::PeerFeed`] receives them.
type PeerSender = tokio::sync::watch::Sender<Vec<(String, String)>>;

type Outcome = Result<WeightsOutcome, SyncFailure>;

/// When a sync was begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Before the member's own rank table, from the table it could read.
    Early,
    /// Once the data NIC passed against the member's own table.
    NicPassed,
}

/// A sync in flight for `req`; dropping it stops the sync.
pub struct Prefetch {
    req: WeightsRequest,
    start: Start,
    /// Where an early sync learns more peers ([`Prefetch::takes_on`]).
    more: Option<PeerSender>,
    task: JoinHandle<Outcome>,
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        // A no-op once the sync ended (after [`Prefetch::finish`]).
        self.task.abort();
    }
}

impl Prefetch {
    /// Starts syncing `req` on its own task, in the caller's span.
    pub fn start(weights: Arc<dyn WeightsSyncer>, req: WeightsRequest, start: Start) -> Prefetch {
        match start {
            Start::Early => tracing::info!(
                peers = ?req.peers,
                "weight sync begun from the serving members before this member's rank table"
            ),
            Start::NicPassed => {
                tracing::debug!("weight sync started beside the NPU network check");
            }
        }
        let r = req.clone();
        let (more, feed) = match start {
            Start::Early => {
                let (tx, rx) = tokio::sync::watch::channel(req.peers.clone());
                (Some(tx), Some(rx))
            }
            Start::NicPassed => (None, None),
        };
        let task = tokio::spawn(
            async move {
                match feed {
                    Some(feed) => weights.sync_growing(&r, feed).await,
                    None => weights.sync(&r).await,
                }
            }
            .instrument(tracing::Span::current()),
        );
        Prefetch {
            req,
            start,
            more,
            task,
        }
    }

    pub fn start_kind(&self) -> Start {
        self.start
    }

    /// Whether this sync's outcome stands for `req`'s (pure): the same request, or, begun
    /// early, one for the same member, set and interface whose sources it already had —
    /// what it fetched is verified chunk by chunk against the set's digest whoever sent
    /// it, so only a source it lacks (a fellow joiner) makes a new sync worth more.
    fn serves(&self, req: &WeightsRequest) -> bool {
        let had = &self.req;
        match self.start {
            Start::NicPassed => had == req,
            Start::Early => {
                sans_sources(had) == sans_sources(req)
                    && req.peers.iter().all(|p| had.peers.contains(p))
            }
        }
    }

    /// Whether this sync stands for `req`'s, once handed `req`'s new peers if it can
    /// take them.
    pub fn takes_on(&mut self, req: &WeightsRequest) -> bool {
        self.serves(req) || self.grow(req)
    }

    /// Hands `req`'s peers to this sync when it can take them (an early sync, `req` for
    /// the same member, set and interface); from then on it [serves](Prefetch::serves)
    /// `req`. Returns whether it took them.
    fn grow(&mut self, req: &WeightsRequest) -> bool {
        let Some(more) = &self.more else {
            return false;
        };
        if sans_sources(&self.req) != sans_sources(req) {
            return false;
        }
        for p in &req.peers {
            if !self.req.peers.contains(p) {
                self.req.peers.push(p.clone());
            }
        }
        tracing::debug!(peers = ?self.req.peers, "the early weight sync asks the peers its member's table names too");
        more.send_replace(self.req.peers.clone());
        true
    }

    /// Stops the sync and waits until its task has ended (one sync per member at a time:
    /// two into one staging would race). What it staged stays for the next.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    async fn finish(mut self) -> Outcome {
        (&mut self.task).await.unwrap_or_else(|e| {
            Err(SyncFailure::new(
                PodReason::SyncFailed,
                format!("the weight sync task ended without an outcome: {e}"),
            ))
        })
    }
}

/// `r` without what an early sync may differ in from the verified one: its sources, its
/// stripe among them and the epoch they came from (any other field must match).
fn sans_sources(r: &WeightsRequest) -> WeightsRequest {
    WeightsRequest {
        peers: Vec::new(),
        place: Place::Unknown,
        epoch: 0,
        ..r.clone()
    }
}

/// The outcome of syncing `req`: the prefetch's when it [takes it on](Prefetch::takes_on)
/// (an early one only when it succeeded); otherwise a new sync, after any other prefetch
/// was stopped.
pub async fn outcome(
    prefetch: Option<Prefetch>,
    weights: Arc<dyn WeightsSyncer>,
    req: WeightsRequest,
) -> Outcome {
    if let Some(mut p) = prefetch {
        if !p.takes_on(&req) {
            tracing::debug!("the request changed since the sync began; stopping it");
            p.stop().await;
        } else if p.start == Start::NicPassed {
            return p.finish().await;
        } else {
            match p.finish().await {
                Ok(o) => return Ok(o),
                Err(f) => tracing::info!(
                    reason = f.reason.as_str(),
                    message = %f.message,
                    "the early weight sync failed; syncing again"
                ),
            }
        }
    }
    weights.sync(&req).await
}
