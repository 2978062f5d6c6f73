//! Latency-optimal and rooted executors: recursive-doubling all-reduce, chain and binomial
//! broadcast and reduce.

use std::ops::Range;

use futures::future::try_join;
use tokio::sync::mpsc;

use super::{bytes, forward};
use crate::api::{CommError, DataType, ReduceOp};
use crate::reduce::reduce_into;
use crate::schedule::broadcast::{binomial, chain};
use crate::schedule::segments;
use crate::schedule::tree::{Role, recursive_doubling};
use crate::tcp::op::Op;

/// Recursive doubling all-reduce (latency-optimal, full buffer per round). Each round's
/// exchange is segmented: a segment that came in is reduced while the next ones are still
/// on the wire, rather than after the whole buffer arrived.
pub async fn tree_all_reduce(
    op: &Op<'_>,
    buf: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    seg_bytes: usize,
) -> Result<(), CommError> {
    let (n, r) = (op.world(), op.rank());
    if n == 1 {
        return Ok(());
    }
    let (fold, partners) = match recursive_doubling(n, r) {
        Role::Folded { proxy } => (Fold::Away { proxy }, Vec::new()),
        Role::Active { folded, partners } => (Fold::Absorb { folded }, partners),
    };
    with_fold(op, buf, dtype, rop, fold, async |buf: &mut [u8]| {
        for q in partners {
            exchange_reduce(op, q, buf, dtype, rop, seg_bytes).await?;
        }
        Ok(())
    })
    .await
}

/// A rank's side of the fold that makes a world a power of two for the log-round
/// all-reduces.
pub(super) enum Fold {
    /// Hands its buffer to `proxy` and takes the result back.
    Away { proxy: usize },
    /// Absorbs `folded`'s buffer (if any) before the rounds and returns the result after.
    Absorb { folded: Option<usize> },
}

/// Runs `rounds` among the active ranks, with the fold around them.
pub(super) async fn with_fold(
    op: &Op<'_>,
    buf: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    fold: Fold,
    rounds: impl AsyncFnOnce(&mut [u8]) -> Result<(), CommError>,
) -> Result<(), CommError> {
    match fold {
        Fold::Away { proxy } => {
            op.send(proxy, buf).await?;
            op.recv_into(proxy, buf).await
        }
        Fold::Absorb { folded } => {
            if let Some(f) = folded {
                let m = op.recv_vec(f, buf.len()).await?;
                reduce_into(dtype, rop, buf, &m);
                op.recycle(m);
            }
            rounds(buf).await?;
            if let Some(f) = folded {
                op.send(f, buf).await?;
            }
            Ok(())
        }
    }
}

/// Small reduce-scatters: a recursive-doubling all-reduce of the whole (small) input, then
/// this rank's block — ⌈log2 n⌉ rounds of n blocks instead of the ring's n − 1 rounds of one.
pub async fn tree_reduce_scatter(
    op: &Op<'_>,
    send: &[u8],
    recv: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    seg_bytes: usize,
) -> Result<(), CommError> {
    let (r, m) = (op.rank(), recv.len());
    let mut all = send.to_vec();
    tree_all_reduce(op, &mut all, dtype, rop, seg_bytes).await?;
    recv.copy_from_slice(&all[r * m..(r + 1) * m]);
    Ok(())
}

/// Sends `buf` to `q` segment by segment while receiving `q`'s, reducing each received
/// segment into `buf` once ours has left (the peer must get the value before the
/// reduction). Both sides cut the same length into the same segments, one frame each.
async fn exchange_reduce(
    op: &Op<'_>,
    q: usize,
    buf: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    seg_bytes: usize,
) -> Result<(), CommError> {
    let seg = (seg_bytes / dtype.size()).max(1) * dtype.size();
    let (to_send, mut sending) = mpsc::unbounded_channel::<&mut [u8]>();
    let (sent, mut to_reduce) = mpsc::unbounded_channel::<&mut [u8]>();
    for part in buf.chunks_mut(seg) {
        let _ = to_send.send(part);
    }
    drop(to_send);
    let sender = async move {
        while let Some(part) = sending.recv().await {
            op.send(q, part).await?;
            let _ = sent.send(part);
        }
        Ok::<_, CommError>(())
    };
    let receiver = async move {
        while let Some(part) = to_reduce.recv().await {
            let m = op.recv_exact(q, part.len()).await?;
            reduce_into(dtype, rop, part, &m);
            op.recycle(m);
        }
        Ok::<_, CommError>(())
    };
    try_join(sender, receiver).await?;
    Ok(())
}

/// Pipelined chain broadcast: time ≈ size ÷ bandwidth + one segment per hop.
pub async fn chain_broadcast(
    op: &Op<'_>,
    buf: &mut [u8],
    root: usize,
    seg_bytes: usize,
) -> Result<(), CommError> {
    let (n, r) = (op.world(), op.rank());
    let segs = segments(0..buf.len(), seg_bytes);
    match chain(n, root, r) {
        (None, None) => Ok(()),
        (None, Some(next)) => {
            for s in segs {
                op.send(next, &buf[s]).await?;
            }
            Ok(())
        }
        (Some(prev), None) => {
            for s in segs {
                let m = op.recv_exact(prev, s.len()).await?;
                buf[s].copy_from_slice(&m);
                op.recycle(m);
            }
            Ok(())
        }
        (Some(prev), Some(next)) => {
            let (tx, rx) = mpsc::unbounded_channel();
            let receiver = async move {
                for s in segs {
                    let m = op.recv_exact(prev, s.len()).await?;
                    buf[s].copy_from_slice(&m);
                    let _ = tx.send(m);
                }
                Ok::<_, CommError>(())
            };
            try_join(forward(op, next, rx), receiver).await?;
            Ok(())
        }
    }
}

/// Binomial-tree broadcast (small messages).
pub async fn tree_broadcast(op: &Op<'_>, buf: &mut [u8], root: usize) -> Result<(), CommError> {
    let (parent, children) = binomial(op.world(), root, op.rank());
    if let Some(p) = parent {
        op.recv_into(p, buf).await?;
    }
    for c in children {
        op.send(c, buf).await?;
    }
    Ok(())
}

/// Pipelined chain reduce toward `root`; non-root buffers are only read.
pub async fn chain_reduce(
    op: &Op<'_>,
    buf: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    root: usize,
    seg_bytes: usize,
) -> Result<(), CommError> {
    let (n, r, es) = (op.world(), op.rank(), dtype.size());
    let segs: Vec<Range<usize>> = segments(0..buf.len() / es, (seg_bytes / es).max(1))
        .iter()
        .map(|s| bytes(s, es))
        .collect();
    // Data flows away from the chain's tail toward the root.
    let (toward, from) = chain(n, root, r);
    match (from, toward) {
        (None, None) => Ok(()),
        (None, Some(t)) => {
            for s in segs {
                op.send(t, &buf[s]).await?;
            }
            Ok(())
        }
        (Some(f), None) => {
            for s in segs {
                let m = op.recv_exact(f, s.len()).await?;
                reduce_into(dtype, rop, &mut buf[s], &m);
                op.recycle(m);
            }
            Ok(())
        }
        (Some(f), Some(t)) => {
            let (tx, rx) = mpsc::unbounded_channel();
            let mine: &[u8] = buf;
            let receiver = async move {
                for s in segs {
                    let mut m = op.recv_exact(f, s.len()).await?;
                    reduce_into(dtype, rop, &mut m, &mine[s]);
                    let _ = tx.send(m);
                }
                Ok::<_, CommError>(())
            };
            try_join(forward(op, t, rx), receiver).await?;
            Ok(())
        }
    }
}

/// Binomial-tree reduce (small messages); non-root buffers are left unchanged.
pub async fn tree_reduce(
    op: &Op<'_>,
    buf: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    root: usize,
) -> Result<(), CommError> {
    let (parent, children) = binomial(op.world(), root, op.rank());
    let len = buf.len();
    let mut own: Option<Vec<u8>> = None;
    for c in children.iter().rev() {
        let m = op.recv_vec(*c, len).await?;
        let acc: &mut [u8] = if parent.is_none() {
            buf
        } else {
            own.get_or_insert_with(|| buf.to_vec())
        };
        reduce_into(dtype, rop, acc, &m);
    }
    if let Some(p) = parent {
        op.send(p, own.as_deref().unwrap_or(buf)).await?;
    }
    Ok(())
}
