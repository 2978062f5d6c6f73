//! Rabenseifner's all-reduce for mid-size messages: a reduce-scatter by recursive halving,
//! then an all-gather by recursive doubling — 2·log2(p) rounds moving the ring's bytes
//! (2(p−1)/p of the buffer per rank), where the ring needs 2(n−1) rounds and recursive
//! doubling moves the whole buffer every round. The buffer is cut into p blocks (p the
//! largest power of two ≤ n); non-power-of-two worlds fold first, as in
//! [`super::tree::recursive_doubling`].

use std::ops::Range;

use super::tree::{Role, recursive_doubling, virtual_rank};

/// One round: send blocks `send` to `peer` while receiving its blocks `recv`; in the
/// reduce-scatter half the received blocks are reduced into ours, in the all-gather half
/// they are copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    pub peer: usize,
    pub send: Range<usize>,
    pub recv: Range<usize>,
    pub reduce: bool,
}

/// A rank's part: folded ranks hand their buffer to `proxy` and get the result back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Folded {
        proxy: usize,
    },
    Active {
        folded: Option<usize>,
        /// The number of blocks the buffer is cut into.
        blocks: usize,
        rounds: Vec<Round>,
    },
}

pub fn halving_doubling(n: usize, r: usize) -> Plan {
    let (folded, partners) = match recursive_doubling(n, r) {
        Role::Folded { proxy } => return Plan::Folded { proxy },
        Role::Active { folded, partners } => (folded, partners),
    };
    // partners[k] is the active rank at virtual distance 2^k; p blocks, one per active rank.
    let p = 1usize << partners.len();
    let vrank = virtual_rank(n, r);
    let mut rounds = Vec::with_capacity(2 * partners.len());
    // Reduce-scatter: the largest distance first, keeping the half our bit selects.
    let mut held = 0..p;
    for k in (0..partners.len()).rev() {
        let mid = held.start + held.len() / 2;
        let (keep, give) = if vrank & (1 << k) == 0 {
            (held.start..mid, mid..held.end)
        } else {
            (mid..held.end, held.start..mid)
        };
        rounds.push(Round {
            peer: partners[k],
            send: give,
            recv: keep.clone(),
            reduce: true,
        });
        held = keep;
    }
    // All-gather: the smallest distance first, each round doubling what is held.
    for (k, &peer) in partners.iter().enumerate() {
        let len = held.len();
        let theirs = if vrank & (1 << k) == 0 {
            held.end..held.end + len
        } else {
            held.start - len..held.start
        };
        rounds.push(Round {
            peer,
            send: held.clone(),
            recv: theirs.clone(),
            reduce: false,
        });
        held = held.start.min(theirs.start)..held.end.max(theirs.end);
    }
    Plan::Active {
        folded,
        blocks: p,
        rounds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates every rank's blocks as sets of contributions (bit masks).
    #[test]
    fn every_rank_ends_with_every_block_fully_reduced_exactly_once_for_any_world() {
        for n in 1..=12usize {
            let full = (1u32 << n) - 1;
            let plans: Vec<Plan> = (0..n).map(|r| halving_doubling(n, r)).collect();
            let p = match plans.iter().find(|p| matches!(p, Plan::Active { .. })) {
                Some(Plan::Active { blocks, .. }) => *blocks,
                _ => unreachable!(),
            };
            // state[r][b]: contributions in rank r's block b.
            let mut state: Vec<Vec<u32>> = (0..n).map(|r| vec![1 << r; p]).collect();
            for (r, plan) in plans.iter().enumerate() {
                if let Plan::Folded { proxy } = plan {
                    let mine = state[r].clone();
                    for (theirs, m) in state[*proxy].iter_mut().zip(mine) {
                        *theirs |= m;
                    }
                }
            }
            let rounds = match &plans[n - 1] {
                Plan::Active { rounds, .. } => rounds.len(),
                _ => unreachable!(),
            };
            for k in 0..rounds {
                let before = state.clone();
                for (r, plan) in plans.iter().enumerate() {
                    let Plan::Active { rounds, .. } = plan else {
                        continue;
                    };
                    let round = &rounds[k];
                    let Plan::Active { rounds: theirs, .. } = &plans[round.peer] else {
                        panic!("n={n}: partner of {r} is folded");
                    };
                    // The peer sends exactly what this rank expects, and vice versa.
                    assert_eq!(theirs[k].peer, r);
                    assert_eq!(theirs[k].send, round.recv, "n={n} r={r} k={k}");
                    assert_eq!(theirs[k].reduce, round.reduce);
                    for b in round.recv.clone() {
                        let got = before[round.peer][b];
                        if round.reduce {
                            assert_eq!(state[r][b] & got, 0, "double count n={n}");
                            state[r][b] |= got;
                        } else {
                            state[r][b] = got;
                        }
                    }
                }
            }
            for (r, plan) in plans.iter().enumerate() {
                if let Plan::Folded { proxy } = plan {
                    state[r] = state[*proxy].clone();
                }
            }
            for (r, blocks) in state.iter().enumerate() {
                assert!(blocks.iter().all(|&m| m == full), "n={n} r={r}: {blocks:?}");
            }
        }
    }
}
