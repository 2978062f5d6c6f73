//! Rabenseifner's all-reduce ([`crate::schedule::halving`]): the ring's bytes in
//! 2·log2(p) rounds instead of 2(n−1).

use std::ops::Range;

use futures::future::try_join;

use crate::api::{CommError, DataType, ReduceOp};
use crate::reduce::reduce_into;
use crate::schedule::halving::{Plan, halving_doubling};
use crate::schedule::split_even;
use crate::tcp::op::Op;

use super::rooted::{Fold, with_fold};

pub async fn halving_doubling_all_reduce(
    op: &Op<'_>,
    buf: &mut [u8],
    dtype: DataType,
    rop: ReduceOp,
) -> Result<(), CommError> {
    let (n, r, es) = (op.world(), op.rank(), dtype.size());
    if n == 1 {
        return Ok(());
    }
    let (fold, blocks, rounds) = match halving_doubling(n, r) {
        Plan::Folded { proxy } => (Fold::Away { proxy }, 1, Vec::new()),
        Plan::Active {
            folded,
            blocks,
            rounds,
        } => (Fold::Absorb { folded }, blocks, rounds),
    };
    with_fold(op, buf, dtype, rop, fold, async |buf: &mut [u8]| {
        let parts = split_even(buf.len() / es, blocks);
        let bytes = |b: &Range<usize>| parts[b.start].start * es..parts[b.end - 1].end * es;
        for round in rounds {
            let (out, into) = disjoint(buf, bytes(&round.send), bytes(&round.recv));
            if round.reduce {
                let (_, m) = try_join(
                    op.send(round.peer, out),
                    op.recv_vec(round.peer, into.len()),
                )
                .await?;
                reduce_into(dtype, rop, into, &m);
                op.recycle(m);
            } else {
                try_join(op.send(round.peer, out), op.recv_into(round.peer, into)).await?;
            }
        }
        Ok(())
    })
    .await
}

/// `buf[a]` to read and `buf[b]` to write, for non-overlapping `a` and `b`.
fn disjoint(buf: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&[u8], &mut [u8]) {
    if a.start >= b.end {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&hi[..a.len()], &mut lo[b])
    } else {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.len()])
    }
}
