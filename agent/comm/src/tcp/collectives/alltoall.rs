//! All-to-all(v): every rank exchanges its region for each peer directly, all links at once.

use std::ops::Range;

use futures::future::{try_join, try_join_all};

use crate::api::{CommError, VLayout};
use crate::tcp::op::Op;

/// Direct all-to-all over arbitrary (validated, disjoint) regions: each rank sends region j
/// of `send` to rank j and receives rank j's into region j of `recv`, all links at once.
pub async fn all_to_all_regions(
    op: &Op<'_>,
    send: &[u8],
    send_regions: &[Range<usize>],
    recv: &mut [u8],
    recv_regions: &[Range<usize>],
) -> Result<(), CommError> {
    let (n, r) = (op.world(), op.rank());
    let mut outs = carve(recv, recv_regions);
    let mine = std::mem::take(&mut outs[r]);
    mine.copy_from_slice(&send[send_regions[r].clone()]);
    let sends = (1..n).map(|k| {
        let q = (r + k) % n;
        op.send(q, &send[send_regions[q].clone()])
    });
    let recvs = outs
        .into_iter()
        .enumerate()
        .filter(|(q, _)| *q != r)
        .map(|(q, out)| op.recv_into(q, out));
    try_join(try_join_all(sends), try_join_all(recvs)).await?;
    Ok(())
}

/// Splits `buf` into the given disjoint regions (validated by the caller), in region order.
fn carve<'a>(buf: &'a mut [u8], regions: &[Range<usize>]) -> Vec<&'a mut [u8]> {
    let mut order: Vec<usize> = (0..regions.len()).collect();
    order.sort_by_key(|&i| (regions[i].start, regions[i].end));
    let mut out: Vec<&'a mut [u8]> = (0..regions.len()).map(|_| Default::default()).collect();
    let mut rest = buf;
    let mut at = 0;
    for i in order {
        let reg = &regions[i];
        if reg.is_empty() {
            continue;
        }
        let tail = std::mem::take(&mut rest);
        let (_, tail) = tail.split_at_mut(reg.start - at);
        let (mine, tail) = tail.split_at_mut(reg.len());
        out[i] = mine;
        rest = tail;
        at = reg.end;
    }
    out
}

/// Byte regions of a v-layout, checked against the buffer; `disjoint` for receive sides.
pub fn regions(
    op_name: &str,
    layout: &VLayout,
    n: usize,
    es: usize,
    buf_len: usize,
    disjoint: bool,
) -> Result<Vec<Range<usize>>, CommError> {
    if layout.counts.len() != n || layout.displs.len() != n {
        return Err(CommError::invalid(
            op_name,
            format!(
                "layout has {} counts and {} displacements for {n} ranks",
                layout.counts.len(),
                layout.displs.len()
            ),
        ));
    }
    let mut regs = Vec::with_capacity(n);
    for (c, d) in layout.counts.iter().zip(&layout.displs) {
        let start = d.checked_mul(es);
        let end = d.checked_add(*c).and_then(|e| e.checked_mul(es));
        match (start, end) {
            (Some(s), Some(e)) if e <= buf_len => regs.push(s..e),
            _ => {
                return Err(CommError::invalid(
                    op_name,
                    format!("region (displ {d}, count {c}) exceeds the {buf_len}-byte buffer"),
                ));
            }
        }
    }
    if disjoint {
        let mut sorted: Vec<&Range<usize>> = regs.iter().filter(|r| !r.is_empty()).collect();
        sorted.sort_by_key(|r| r.start);
        if sorted.windows(2).any(|w| w[0].end > w[1].start) {
            return Err(CommError::invalid(op_name, "receive regions overlap"));
        }
    }
    Ok(regs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carve_returns_regions_in_layout_order() {
        let mut buf: Vec<u8> = (0..10).collect();
        let regs = vec![6..9, 0..2, 2..2, 3..5];
        let parts = carve(&mut buf, &regs);
        assert_eq!(parts[0], &[6, 7, 8]);
        assert_eq!(parts[1], &[0, 1]);
        assert!(parts[2].is_empty());
        assert_eq!(parts[3], &[3, 4]);
    }

    #[test]
    fn overlapping_or_out_of_bounds_layouts_are_refused() {
        let l = VLayout {
            counts: vec![2, 2],
            displs: vec![0, 1],
        };
        assert!(regions("x", &l, 2, 1, 10, true).is_err());
        assert!(regions("x", &l, 2, 1, 10, false).is_ok());
        assert!(regions("x", &l, 2, 4, 8, false).is_err());
        assert!(regions("x", &VLayout::packed(vec![1]), 2, 1, 8, false).is_err());
    }
}
