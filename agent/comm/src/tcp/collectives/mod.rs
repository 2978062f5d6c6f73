//! Executors: each follows a pure schedule from `crate::schedule` over an [`Op`]. Pipelined
//! schedules run a receiver and a sender concurrently within the operation: the receiver
//! takes segments from the left, reduces or copies them, and hands owned buffers to the
//! sender, so forwarding overlaps receiving and nothing is copied twice.

mod alltoall;
mod bruck;
mod halving;
mod ring;
mod rooted;

use std::ops::Range;

use tokio::sync::mpsc;

use super::op::Op;
use crate::api::CommError;

pub use alltoall::{all_to_all_regions, regions};
pub use bruck::bruck_all_gather;
pub use halving::halving_doubling_all_reduce;
pub use ring::{ring_all_gather, ring_all_reduce, ring_reduce_scatter};
pub use rooted::{
    chain_broadcast, chain_reduce, tree_all_reduce, tree_broadcast, tree_reduce,
    tree_reduce_scatter,
};

pub(super) fn bytes(r: &Range<usize>, es: usize) -> Range<usize> {
    r.start * es..r.end * es
}

/// Forwards owned segments to `to`, in order, until the channel closes.
pub(super) async fn forward(
    op: &Op<'_>,
    to: usize,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) -> Result<(), CommError> {
    while let Some(v) = rx.recv().await {
        op.send(to, &v).await?;
        op.recycle(v);
    }
    Ok(())
}
