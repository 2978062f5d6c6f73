//! Bruck's all-gather for small messages: ⌈log2 n⌉ rounds for any world size, where the
//! ring needs n − 1. Each rank keeps its blocks in rotated order (position i holds rank
//! (r + i) mod n's block). In the round at distance d it sends its first min(d, n − have)
//! blocks to rank r − d and receives as many from rank r + d, appending them; a final local
//! rotation puts every block in its place.

/// One round of a rank's part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    pub to: usize,
    pub from: usize,
    /// Blocks sent (the first ones held) and received (appended after `have`).
    pub blocks: usize,
    /// Blocks held before this round.
    pub have: usize,
}

pub fn bruck(n: usize, r: usize) -> Vec<Round> {
    let mut rounds = Vec::new();
    let (mut have, mut dist) = (1, 1);
    while have < n {
        let blocks = dist.min(n - have);
        rounds.push(Round {
            to: (r + n - dist) % n,
            from: (r + dist) % n,
            blocks,
            have,
        });
        have += blocks;
        dist *= 2;
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_ends_with_every_block_once_in_rotated_order_for_any_world() {
        for n in 1..=12usize {
            // held[r][i]: which rank's block rank r holds at position i.
            let mut held: Vec<Vec<usize>> = (0..n).map(|r| vec![r]).collect();
            let plans: Vec<Vec<Round>> = (0..n).map(|r| bruck(n, r)).collect();
            let rounds = plans[0].len();
            assert!(plans.iter().all(|p| p.len() == rounds));
            assert!(rounds <= (n as f64).log2().ceil() as usize, "n={n}");
            for k in 0..rounds {
                let before = held.clone();
                for (r, plan) in plans.iter().enumerate() {
                    let round = &plan[k];
                    // The sender's matching round points back at r.
                    assert_eq!(plans[round.from][k].to, r, "n={n}");
                    assert_eq!(plans[round.from][k].blocks, round.blocks);
                    assert_eq!(held[r].len(), round.have);
                    let got = &before[round.from][..round.blocks];
                    held[r].extend_from_slice(got);
                }
            }
            for (r, h) in held.iter().enumerate() {
                let want: Vec<usize> = (0..n).map(|i| (r + i) % n).collect();
                assert_eq!(h, &want, "n={n} r={r}");
            }
        }
    }
}
