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

use std::sync::Arc;

use hcomm_crds::contract::PodReason;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::weights::{SyncFailure, WeightsOutcome, WeightsRequest, WeightsSyncer};

type Outcome = Result<WeightsOutcome, SyncFailure>;

/// A sync in flight for `req`; dropping it stops the sync.
pub struct Prefetch {
    req: WeightsRequest,
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
    pub fn start(weights: Arc<dyn WeightsSyncer>, req: WeightsRequest) -> Prefetch {
        tracing::debug!("weight sync started beside the NPU network check");
        let r = req.clone();
        let task = tokio::spawn(
            async move { weights.sync(&r).await }.instrument(tracing::Span::current()),
        );
        Prefetch { req, task }
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

/// The outcome of syncing `req`: the prefetch's when it was started for the same request;
/// otherwise a new sync, after any prefetch of another request finished (one sync per
/// member at a time: two into one staging would race).
pub async fn outcome(
    prefetch: Option<Prefetch>,
    weights: Arc<dyn WeightsSyncer>,
    req: WeightsRequest,
) -> Outcome {
    if let Some(p) = prefetch {
        if p.req == req {
            return p.finish().await;
        }
        tracing::debug!("the request changed since the early sync; finishing it first");
        let _ = p.finish().await;
    }
    weights.sync(&req).await
}
