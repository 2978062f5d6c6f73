//! The orders a joiner asks for chunks in: its stripe first, then the others shuffled
//! ([`striped_order`]), or the whole set from a start of its own ([`Place`]); and each
//! chunk's place in that order ([`ranks`]).

/// What a joiner knows of its place among the joiners syncing with it: where its order of
/// the full sources' chunks starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Place {
    /// Place `index` of `count` (the member's rank in the rank table): its stripe first.
    Stripe { index: usize, count: usize },
    /// Only a number its fellows' differ from (the member's index in its group): an early
    /// sync, begun before the rank table that names its fellows. The start is spread from
    /// the other numbers' by the golden ratio (`spread_start`): random starts put two of
    /// eight joiners within 4 chunks of a 256-chunk set of each other in about every other
    /// run, and each chunk of such a pair's first requests left the member twice (6 in one
    /// logged run; issue 20).
    Spread(u64),
    /// Nothing: a start chosen by the fetch's seed.
    #[default]
    Unknown,
}

/// The start of joiner number `k`'s order of `n` chunks: `n · frac(k · φ⁻¹)`. Consecutive
/// numbers land far apart (any 8 consecutive ones at least `n / 12` from each other: the
/// three-gap theorem), and the next number falls in one of the largest gaps the others left.
pub(super) fn spread_start(n: usize, k: u64) -> usize {
    const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
    ((u128::from(k.wrapping_mul(GOLDEN)) * n as u128) >> 64) as usize
}

/// The start chunk for joiner `index` of `count` joiners syncing together.
pub(super) fn stripe_start(n: usize, index: usize, count: usize) -> usize {
    (n * index.checked_rem(count).unwrap_or(0))
        .checked_div(count)
        .unwrap_or(0)
}

/// Joiner `index`'s stripe of `count` first, from its start, then every other chunk in an
/// order shuffled by `seed` (each joiner its own). A joiner done with its own stripe helps
/// its fellows, and helpers in one fixed order collide: taken from the next stripe's start,
/// a helper asked for the very chunk the owner asked for next (21 of 128 chunks left the
/// member twice with eight joiners); taken from each stripe's end, several helpers reached
/// a slow owner's stripe end together and asked for the same chunks within 30 ms of each
/// other, too close for any `Have` poll (14 chunks twice in one run; per-chunk logs,
/// issue 20). Shuffled, two helpers or a helper and the owner pick the same chunk only by
/// chance.
pub(super) fn striped_order(n: usize, index: usize, count: usize, seed: u64) -> Vec<usize> {
    use rand::SeedableRng as _;
    use rand::seq::SliceRandom as _;
    let count = count.clamp(1, n.max(1));
    let own = index % count;
    let start = stripe_start(n, own, count);
    let end = if own + 1 == count {
        n
    } else {
        stripe_start(n, own + 1, count)
    };
    let mut others: Vec<usize> = (0..start).chain(end..n).collect();
    others.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    (start..end).chain(others).collect()
}

/// Each chunk's position in `order`.
pub(super) fn ranks(order: &[usize]) -> Vec<usize> {
    let mut rank = vec![0; order.len()];
    for (at, &i) in order.iter().enumerate() {
        rank[i] = at;
    }
    rank
}

/// `0..n` starting at `start` (mod n) and wrapping.
pub(super) fn rotated(n: usize, start: usize) -> Vec<usize> {
    let start = start.checked_rem(n).unwrap_or(0);
    (start..n).chain(0..start).collect()
}
