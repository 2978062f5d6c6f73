//! Ring schedule: reduce-scatter then all-gather over blocks, each block cut into segments
//! so that forwarding a segment overlaps receiving the next (the executor pipelines them).
//!
//! Rank r sends to r+1 and receives from r-1. Block indices are chosen so that after the
//! reduce-scatter rank r owns the fully reduced block r (so `reduce_scatter` needs no final
//! shuffle), and the all-gather starts by sending it.

/// (block sent, block received) at reduce-scatter step `s` (0..n-1) on rank `r`.
pub fn rs_blocks(r: usize, s: usize, n: usize) -> (usize, usize) {
    ((r + 2 * n - s - 1) % n, (r + 2 * n - s - 2) % n)
}

/// (block sent, block received) at all-gather step `s` (0..n-1) on rank `r`.
pub fn ag_blocks(r: usize, s: usize, n: usize) -> (usize, usize) {
    ((r + n - s) % n, (r + 2 * n - s - 1) % n)
}

pub fn right(r: usize, n: usize) -> usize {
    (r + 1) % n
}

pub fn left(r: usize, n: usize) -> usize {
    (r + n - 1) % n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates the ring with contributor bitmasks per (rank, block).
    #[test]
    fn ring_all_reduce_gives_every_rank_every_contribution_once() {
        for n in 1..=9usize {
            let full = (1u32 << n) - 1;
            // state[rank][block] = bitmask of ranks whose data is summed in.
            let mut state: Vec<Vec<u32>> = (0..n).map(|r| vec![1 << r; n]).collect();
            for s in 0..n.saturating_sub(1) {
                let sent: Vec<(usize, u32)> = (0..n)
                    .map(|r| {
                        let (b, _) = rs_blocks(r, s, n);
                        (b, state[r][b])
                    })
                    .collect();
                for r in 0..n {
                    let (b, m) = sent[left(r, n)];
                    let (_, want) = rs_blocks(r, s, n);
                    assert_eq!(b, want, "n={n} r={r} s={s}");
                    assert_eq!(state[r][b] & m, 0, "double count n={n}");
                    state[r][b] |= m;
                }
            }
            for (r, st) in state.iter().enumerate() {
                assert_eq!(st[r], full, "rank {r} owns block {r} after RS, n={n}");
            }
            for s in 0..n.saturating_sub(1) {
                let sent: Vec<(usize, u32)> = (0..n)
                    .map(|r| {
                        let (b, _) = ag_blocks(r, s, n);
                        (b, state[r][b])
                    })
                    .collect();
                for r in 0..n {
                    let (b, m) = sent[left(r, n)];
                    assert_eq!(b, ag_blocks(r, s, n).1);
                    assert_eq!(m, full);
                    state[r][b] = m;
                }
            }
            assert!(state.iter().flatten().all(|&m| m == full), "n={n}");
        }
    }

    #[test]
    fn each_step_forwards_what_the_previous_step_received() {
        for n in 2..=8usize {
            for r in 0..n {
                for s in 1..n - 1 {
                    assert_eq!(rs_blocks(r, s, n).0, rs_blocks(r, s - 1, n).1);
                    assert_eq!(ag_blocks(r, s, n).0, ag_blocks(r, s - 1, n).1);
                }
                assert_eq!(ag_blocks(r, 0, n).0, r);
            }
        }
    }
}
