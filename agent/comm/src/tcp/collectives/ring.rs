//! Ring executors: all-reduce (reduce-scatter + all-gather), reduce-scatter, all-gather.

use std::ops::Range;

use futures::future::try_join;
use tokio::sync::mpsc;

use super::{bytes, forward};
use crate::api::{CommError, DataType, ReduceOp};
use crate::reduce::reduce_into;
use crate::schedule::ring::{ag_blocks, left, right, rs_blocks};
use crate::schedule::{segments, split_even};
use crate::tcp::op::Op;

/// A segment for the sender: a pooled buffer, or a slice of the user buffer sent in place —
/// `Lent` ones are handed back to the receiver once written (it needs them again later).
enum Out<'a> {
    Owned(Vec<u8>),
    Shared(&'a [u8]),
    Lent(&'a mut [u8]),
}

/// Ring all-reduce: reduce-scatter then all-gather, segmented and pipelined. Segments of the
/// user buffer that are sent unchanged (the first block, the final block, every gathered
/// segment) go out straight from `buf`; only reduce-scatter partial sums travel in pooled
/// buffers (reduced in place in the received buffer).
pub async fn ring_all_reduce(
    op: &Op<'_>,
    buf: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    seg_bytes: usize,
) -> Result<(), CommError> {
    let (n, r, es) = (op.world(), op.rank(), dtype.size());
    if n == 1 || buf.is_empty() {
        return Ok(());
    }
    let seg_elems = (seg_bytes / es).max(1);
    // parts[block][segment]: disjoint slices of `buf`, in order.
    let mut parts: Vec<Vec<Option<&mut [u8]>>> = Vec::with_capacity(n);
    let mut rest = buf;
    for b in split_even(rest.len() / es, n) {
        let mut segs = Vec::new();
        for s in segments(b, seg_elems).iter().filter(|s| !s.is_empty()) {
            let (seg, tail) = std::mem::take(&mut rest).split_at_mut(s.len() * es);
            segs.push(Some(seg));
            rest = tail;
        }
        parts.push(segs);
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (back_tx, mut back_rx) = mpsc::unbounded_channel();
    for seg in &mut parts[rs_blocks(r, 0, n).0] {
        let _ = tx.send(Out::Lent(seg.take().unwrap_or_default()));
    }
    let receiver = async move {
        let from = left(r, n);
        for step in 0..n - 1 {
            let last = step == n - 2;
            for seg in &mut parts[rs_blocks(r, step, n).1] {
                let mut m = op
                    .recv_exact(from, seg.as_ref().map_or(0, |d| d.len()))
                    .await?;
                if last {
                    // Block r is final: keep it and start the all-gather with it, in place.
                    let dst = seg.take().unwrap_or_default();
                    reduce_into(dtype, rop, dst, &m);
                    op.recycle(m);
                    let _ = tx.send(Out::Shared(dst));
                } else {
                    reduce_into(dtype, rop, &mut m, seg.as_deref().unwrap_or_default());
                    let _ = tx.send(Out::Owned(m));
                }
            }
        }
        for step in 0..n - 1 {
            for seg in &mut parts[ag_blocks(r, step, n).1] {
                let dst = match seg.take() {
                    Some(d) => d,
                    // Lent to the sender at the start; it has been sent long since.
                    None => back_rx
                        .recv()
                        .await
                        .ok_or_else(|| CommError::invalid(op.name, "ring sender stopped early"))?,
                };
                let m = op.recv_exact(from, dst.len()).await?;
                dst.copy_from_slice(&m);
                op.recycle(m);
                if step < n - 2 {
                    let _ = tx.send(Out::Shared(dst));
                }
            }
        }
        Ok::<_, CommError>(())
    };
    let sender = async move {
        let to = right(r, n);
        while let Some(out) = rx.recv().await {
            match out {
                Out::Owned(v) => {
                    op.send(to, &v).await?;
                    op.recycle(v);
                }
                Out::Shared(d) => op.send(to, d).await?,
                Out::Lent(d) => {
                    op.send(to, d).await?;
                    let _ = back_tx.send(d);
                }
            }
        }
        Ok::<_, CommError>(())
    };
    try_join(sender, receiver).await?;
    Ok(())
}

/// Ring reduce-scatter: `send` holds n blocks of `recv.len()` bytes; rank r gets block r.
pub async fn ring_reduce_scatter(
    op: &Op<'_>,
    send: &[u8],
    recv: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
    seg_bytes: usize,
) -> Result<(), CommError> {
    let (n, r, es) = (op.world(), op.rank(), dtype.size());
    let m = recv.len();
    if n == 1 || m == 0 {
        recv.copy_from_slice(&send[..m]);
        return Ok(());
    }
    let segs = segments(0..m / es, (seg_bytes / es).max(1));
    let block = move |b: usize, s: &Range<usize>| {
        let s = bytes(s, es);
        b * m + s.start..b * m + s.end
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let first = rs_blocks(r, 0, n).0;
    let receiver = async move {
        let from = left(r, n);
        for step in 0..n - 1 {
            let b = rs_blocks(r, step, n).1;
            for s in &segs {
                let mine = &send[block(b, s)];
                let mut msg = op.recv_exact(from, mine.len()).await?;
                if step == n - 2 {
                    let out = &mut recv[bytes(s, es)];
                    out.copy_from_slice(mine);
                    reduce_into(dtype, rop, out, &msg);
                    op.recycle(msg);
                } else {
                    reduce_into(dtype, rop, &mut msg, mine);
                    let _ = tx.send(msg);
                }
            }
        }
        Ok::<_, CommError>(())
    };
    let sender = async {
        let to = right(r, n);
        for s in &segments(0..m / es, (seg_bytes / es).max(1)) {
            op.send(to, &send[block(first, s)]).await?;
        }
        forward(op, to, rx).await
    };
    try_join(sender, receiver).await?;
    Ok(())
}

/// Ring all-gather: rank r's `send` lands at block r of every `recv`.
pub async fn ring_all_gather(
    op: &Op<'_>,
    send: &[u8],
    recv: &mut [u8],
    seg_bytes: usize,
) -> Result<(), CommError> {
    let (n, r, m) = (op.world(), op.rank(), send.len());
    recv[r * m..(r + 1) * m].copy_from_slice(send);
    if n == 1 || m == 0 {
        return Ok(());
    }
    let segs = segments(0..m, seg_bytes);
    let (tx, rx) = mpsc::unbounded_channel();
    let receiver = async {
        let from = left(r, n);
        for step in 0..n - 1 {
            let b = ag_blocks(r, step, n).1;
            for s in &segs {
                let dst = &mut recv[b * m + s.start..b * m + s.end];
                let msg = op.recv_exact(from, dst.len()).await?;
                dst.copy_from_slice(&msg);
                if step < n - 2 {
                    let _ = tx.send(msg);
                } else {
                    op.recycle(msg);
                }
            }
        }
        drop(tx);
        Ok::<_, CommError>(())
    };
    let sender = async {
        let to = right(r, n);
        for s in &segs {
            op.send(to, &send[s.clone()]).await?;
        }
        forward(op, to, rx).await
    };
    try_join(sender, receiver).await?;
    Ok(())
}
