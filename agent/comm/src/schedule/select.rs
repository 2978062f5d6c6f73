//! `Algorithm::Auto`: picks the schedule by message size and world size. The thresholds are
//! the crossovers measured on loopback (agent/comm/README.md, "Crossover"): for small
//! messages the tree's ⌈log2 n⌉ rounds beat the ring's 2(n−1), for large ones the ring's
//! pipelined bandwidth wins, and in between (all-reduce, n ≥ 4) halving-doubling moves the
//! ring's bytes in 2·log2(n) rounds.

use crate::api::Algorithm;

/// All-reduce: largest message (bytes) for which the tree is chosen at world size `n`.
pub fn all_reduce_tree_max(n: usize) -> usize {
    match n {
        // At n = 2 both move the same bytes, and since the exchange is segmented (each
        // segment reduced while the next is on the wire) it pipelines too, with one step
        // and no gather copy. On the idle machine, 4 runs each: tree 1.20–1.49 against
        // ring 0.97–1.20 GB/s at 4 MiB, 1.10–1.27 against 0.93–1.14 at 8 MiB, even at
        // 16 MiB (0.91–1.12 against 1.05–1.13).
        0..=2 => 8 << 20,
        3 => 1 << 20,
        // Against halving-doubling, 3 interleaved runs each: at 4 ranks equal at 64 KiB,
        // behind at 256 KiB (0.36 against 0.42 GB/s); at 8 ranks ahead at 64 KiB (680
        // against 918 µs), behind at 256 KiB (0.17 against 0.23 GB/s).
        _ => 128 << 10,
    }
}

/// All-reduce: largest message for which halving-doubling is chosen over the ring, above
/// the tree's range (0: never). 3 interleaved runs each, GB/s: at 4 ranks 0.51 against the
/// ring's 0.43 at 1 MiB, 0.49 against 0.46 at 4 MiB, behind at 16 MiB (0.47 against
/// 0.53); at 8 ranks 0.24 against 0.23 at 1 MiB, level at 4 MiB, behind at 16 MiB. At 3
/// ranks the fold leaves two active ranks, so it was not measured there.
pub fn all_reduce_halving_max(n: usize) -> usize {
    if n >= 4 { 4 << 20 } else { 0 }
}

/// Broadcast/reduce: largest message for which the binomial tree beats the chain.
pub fn rooted_tree_max(n: usize) -> usize {
    if n <= 2 { 0 } else { 64 << 10 }
}

/// All-gather: largest output (bytes) for which Bruck's ⌈log2 n⌉ rounds are chosen over the
/// ring. At 2 ranks both are one exchange and the ring pipelines it. Interleaved runs on
/// loopback (3 each, medians): Bruck ahead up to 1 MiB at 4 and 8 ranks (4 KiB: 136 against
/// 185 µs at 4 ranks, 454 against 1 196 µs at 8; 1 MiB: 0.52 against 0.34 GB/s at 4 ranks),
/// the ring ahead from 4 MiB (0.46 against 0.43 at 4 ranks, 0.28 against 0.22 at 8).
pub fn all_gather_tree_max(n: usize) -> usize {
    if n <= 2 { 0 } else { 1 << 20 }
}

/// Reduce-scatter: largest input (bytes) for which a recursive-doubling all-reduce of the
/// whole input is chosen over the ring. It moves log2(n) times the input instead of
/// (n−1)/n of it, so it wins only while rounds cost more than bytes: 4 KiB at 8 ranks 402
/// against 803 µs, 64 KiB 783 against 1 014 µs, even at 256 KiB, the ring 1.8× ahead at 1 MiB.
pub fn reduce_scatter_tree_max(n: usize) -> usize {
    if n <= 2 { 0 } else { 64 << 10 }
}

/// Resolves `Auto` for an all-gather whose output is `bytes` over `n` ranks.
pub fn all_gather(algo: Algorithm, bytes: usize, n: usize) -> Algorithm {
    by_size(algo, bytes <= all_gather_tree_max(n))
}

/// Resolves `Auto` for a reduce-scatter whose input is `bytes` over `n` ranks.
pub fn reduce_scatter(algo: Algorithm, bytes: usize, n: usize) -> Algorithm {
    by_size(algo, bytes <= reduce_scatter_tree_max(n))
}

/// `Auto` by size for the collectives with two schedules; `HalvingDoubling`, which only
/// all-reduce has, means their log-round one.
fn by_size(algo: Algorithm, tree: bool) -> Algorithm {
    match algo {
        Algorithm::Auto if tree => Algorithm::Tree,
        Algorithm::Auto => Algorithm::Ring,
        Algorithm::HalvingDoubling => Algorithm::Tree,
        a => a,
    }
}

/// Resolves `Auto` for an all-reduce of `bytes` over `n` ranks.
pub fn all_reduce(algo: Algorithm, bytes: usize, n: usize) -> Algorithm {
    match algo {
        Algorithm::Auto if bytes <= all_reduce_tree_max(n) => Algorithm::Tree,
        Algorithm::Auto if bytes <= all_reduce_halving_max(n) => Algorithm::HalvingDoubling,
        Algorithm::Auto => Algorithm::Ring,
        a => a,
    }
}

/// Resolves `Auto` for a broadcast or reduce of `bytes` over `n` ranks.
pub fn rooted(algo: Algorithm, bytes: usize, n: usize) -> Algorithm {
    by_size(algo, bytes <= rooted_tree_max(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_tree_for_small_and_ring_for_large_messages() {
        assert_eq!(all_reduce(Algorithm::Auto, 4096, 8), Algorithm::Tree);
        assert_eq!(all_reduce(Algorithm::Auto, 64 << 20, 8), Algorithm::Ring);
        assert_eq!(all_reduce(Algorithm::Ring, 8, 8), Algorithm::Ring);
        assert_eq!(all_reduce(Algorithm::Auto, 8 << 20, 2), Algorithm::Tree);
        assert_eq!(all_reduce(Algorithm::Auto, 16 << 20, 2), Algorithm::Ring);
        assert_eq!(all_reduce(Algorithm::Tree, 1 << 30, 8), Algorithm::Tree);
        assert_eq!(rooted(Algorithm::Auto, 1 << 20, 4), Algorithm::Ring);
        assert_eq!(
            all_reduce(Algorithm::Auto, 1 << 20, 4),
            Algorithm::HalvingDoubling
        );
        assert_eq!(
            all_reduce(Algorithm::Auto, 4 << 20, 8),
            Algorithm::HalvingDoubling
        );
        assert_eq!(all_reduce(Algorithm::Auto, 1 << 20, 3), Algorithm::Tree);
        assert_eq!(all_reduce(Algorithm::Auto, 16 << 20, 4), Algorithm::Ring);
        assert_eq!(rooted(Algorithm::HalvingDoubling, 8, 4), Algorithm::Tree);
        assert_eq!(all_gather(Algorithm::Auto, 4096, 8), Algorithm::Tree);
        assert_eq!(all_gather(Algorithm::Auto, 4096, 2), Algorithm::Ring);
        assert_eq!(all_gather(Algorithm::Auto, 4 << 20, 4), Algorithm::Ring);
        assert_eq!(
            reduce_scatter(Algorithm::Auto, 64 << 10, 3),
            Algorithm::Tree
        );
        assert_eq!(reduce_scatter(Algorithm::Auto, 1 << 20, 8), Algorithm::Ring);
        assert_eq!(reduce_scatter(Algorithm::Ring, 8, 8), Algorithm::Ring);
    }
}
