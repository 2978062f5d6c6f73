//! The fetch scheduler: which chunk to ask which source for next. Pure state, no I/O (the
//! workers in `fetch` drive it), so the policy is tested on its own.
//!
//! Policy:
//! - A source is *full* (holds the whole set: an existing member) or *partial* (a fellow
//!   joiner, whose verified chunks we learn from its `Have` bitmap, polled).
//! - Full sources are asked in this joiner's stripe order (joiner `j` of `k` owns chunks
//!   `j·n/k..(j+1)·n/k`, asked from the start; then every other chunk in an order of its
//!   own, shuffled: [`striped_order`]), skipping chunks a live partial source already holds
//!   or is fetching.
//!   `j` and `k` are first a guess (the member's place in the rank table), then, once
//!   every source answered whether it holds the whole set, this joiner's place among the
//!   sources that do not plus itself (`restripe_once_told`, ordered by address: every
//!   joiner of the swarm computes the same list). The rank table's places alone leave the
//!   existing members' places nobody's stripe: every joiner that finished its own went on
//!   to the same last unclaimed stretch and asked for the same chunks within one `Have`
//!   poll of the others (issue 20). So k joiners
//!   pull disjoint stripes from the existing members and the rest from each other: every
//!   chunk leaves the existing members about once and the joiners' links carry the copies
//!   — adding k members costs about one transfer (see `mod.rs`, "Several joiners").
//! - Partial sources are asked for any needed chunk they hold.
//! - Work stealing: a worker asks for its next chunk only when it has room in its
//!   pipeline, so faster sources simply take more chunks.
//! - A chunk that came back corrupt or `Missing` goes back to the queue and is never asked
//!   of that source again; a lost source's outstanding chunks go back to the queue.
//!
//! Picking is a linear scan (O(chunks)); at 4 MiB chunks even a 100 GB set is 25 600 entries.

use std::collections::HashSet;
use std::net::IpAddr;

use super::bitset::ChunkBits;

/// Chunks left, per live source, below which a full source helps with chunks a fellow
/// joiner already holds, whatever else is on its way (see `next_for`).
const ENDGAME_CHUNKS: usize = 2;

/// Corrupt chunks after which a source is dropped.
pub const MAX_CORRUPT_PER_SOURCE: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Needed,
    InFlight(usize),
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Holdings {
    /// Not told yet (before the first `Have` answer).
    Unknown,
    /// Held verified, and being fetched by that source right now.
    Partial(ChunkBits, ChunkBits),
    Full,
}

#[derive(Debug, Clone)]
struct SourceView {
    alive: bool,
    holdings: Holdings,
    /// Chunks this source must not be asked for again (it sent garbage or lacked them).
    bad: HashSet<usize>,
    corrupt: u32,
}

/// What happens to a source after a corrupt chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterCorrupt {
    Keep,
    Drop,
}

/// Who syncs together, for this joiner's stripe of the full sources' chunks.
#[derive(Debug, Clone)]
pub struct Swarm {
    /// Every source's address, by source index.
    pub sources: Vec<IpAddr>,
    /// This joiner's own address (what its fellows see as a source); `None` (no bind
    /// address): the first stripe stays.
    pub own: Option<IpAddr>,
    /// The first stripe, `(index, count)`: the member's place in the rank table. `None`:
    /// a start chosen at random.
    pub guess: Option<(usize, usize)>,
    /// Shuffles the chunks outside this joiner's stripe ([`striped_order`]); random in a
    /// fetch, fixed in tests.
    pub seed: u64,
}

/// Scheduler state of one fetch.
#[derive(Debug, Clone)]
pub struct Scheduler {
    chunks: Vec<ChunkState>,
    order: Vec<usize>,
    sources: Vec<SourceView>,
    /// The sources' addresses, by index (for the stripe among the joiners found).
    addresses: Vec<IpAddr>,
    /// This joiner's address while its stripe is still the first guess; `None` once it
    /// was set from the joiners found (or if it never can be).
    own_until_restriped: Option<IpAddr>,
    seed: u64,
    remaining: usize,
}

impl Scheduler {
    /// `n` chunks, `held` already verified locally, fetched from `swarm`'s sources.
    pub fn new(n: usize, held: &ChunkBits, swarm: Swarm) -> Scheduler {
        let order = match swarm.guess {
            Some((index, count)) => striped_order(n, index, count, swarm.seed),
            None => rotated(n, rand::random::<u64>() as usize % n.max(1)),
        };
        let chunks: Vec<_> = (0..n)
            .map(|i| {
                if held.get(i) {
                    ChunkState::Done
                } else {
                    ChunkState::Needed
                }
            })
            .collect();
        let remaining = chunks.iter().filter(|c| **c != ChunkState::Done).count();
        Scheduler {
            chunks,
            order,
            sources: vec![
                SourceView {
                    alive: true,
                    holdings: Holdings::Unknown,
                    bad: HashSet::new(),
                    corrupt: 0,
                };
                swarm.sources.len()
            ],
            addresses: swarm.sources,
            own_until_restriped: swarm.own,
            seed: swarm.seed,
            remaining,
        }
    }

    /// Once every live source told whether it holds the whole set, asks the full sources
    /// from this joiner's stripe among the joiners found: the partial sources plus itself,
    /// by address (every joiner of the swarm sorts the same list). Done once.
    fn restripe_once_told(&mut self) {
        let Some(own) = self.own_until_restriped else {
            return;
        };
        if self
            .sources
            .iter()
            .any(|s| s.alive && s.holdings == Holdings::Unknown)
        {
            return;
        }
        let mut joiners: Vec<IpAddr> = self
            .sources
            .iter()
            .zip(&self.addresses)
            .filter(|(s, _)| matches!(s.holdings, Holdings::Partial(..)))
            .map(|(_, ip)| *ip)
            .chain([own])
            .collect();
        joiners.sort_unstable();
        joiners.dedup();
        let index = joiners.iter().position(|ip| *ip == own).unwrap_or(0);
        tracing::debug!(
            index,
            joiners = joiners.len(),
            "striping among the joiners found"
        );
        let n = self.chunks.len();
        self.order = striped_order(n, index, joiners.len(), self.seed);
        self.own_until_restriped = None;
    }

    /// Chunks not yet verified.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    pub fn is_done(&self) -> bool {
        self.remaining == 0
    }

    /// Live sources.
    pub fn alive(&self) -> usize {
        self.sources.iter().filter(|s| s.alive).count()
    }

    /// Records a source's `Have` bitmaps: held (full = a full source) and in flight.
    pub fn set_holdings(&mut self, src: usize, bits: ChunkBits, coming: ChunkBits) {
        self.sources[src].holdings = if bits.is_full() {
            Holdings::Full
        } else {
            Holdings::Partial(bits, coming)
        };
        self.restripe_once_told();
    }

    /// Chunks in flight from any source (what this joiner advertises as coming).
    pub fn in_flight(&self) -> ChunkBits {
        let mut b = ChunkBits::new(self.chunks.len());
        for (i, c) in self.chunks.iter().enumerate() {
            if matches!(c, ChunkState::InFlight(_)) {
                b.set(i);
            }
        }
        b
    }

    /// Whether the source is alive.
    pub fn is_live(&self, src: usize) -> bool {
        self.sources[src].alive
    }

    /// Whether the source is a live fellow joiner (told to hold part of the set).
    pub fn is_partial(&self, src: usize) -> bool {
        let s = &self.sources[src];
        s.alive && matches!(s.holdings, Holdings::Partial(..))
    }

    /// Whether the source is known to hold the whole set.
    pub fn is_full(&self, src: usize) -> bool {
        self.sources[src].holdings == Holdings::Full
    }

    fn holds(&self, src: usize, i: usize) -> bool {
        let s = &self.sources[src];
        s.alive
            && !s.bad.contains(&i)
            && match &s.holdings {
                Holdings::Unknown => false,
                Holdings::Partial(b, _) => b.get(i),
                Holdings::Full => true,
            }
    }

    /// Every chunk is verified here or held by a live fellow joiner. O(chunks × sources),
    /// asked only when a full source found nothing else to send.
    fn joiners_hold_all(&self) -> bool {
        (0..self.chunks.len()).all(|i| {
            self.chunks[i] == ChunkState::Done
                || self.sources.iter().any(|s| {
                    s.alive && matches!(&s.holdings, Holdings::Partial(held, _) if held.get(i))
                })
        })
    }

    /// Some live fellow joiner holds chunk `i` or is fetching it.
    fn a_peer_has_or_gets(&self, i: usize) -> bool {
        self.sources.iter().any(|s| {
            s.alive && matches!(&s.holdings, Holdings::Partial(h, c) if h.get(i) || c.get(i))
        })
    }

    /// The next chunk to request from `src`, marked in flight; `None` if it has nothing
    /// useful right now.
    pub fn next_for(&mut self, src: usize) -> Option<usize> {
        let needed = |i: &usize| self.chunks[*i] == ChunkState::Needed && self.holds(src, *i);
        let pick = if self.is_full(src) {
            // Endgame: once every needed chunk is with a fellow joiner, a full source still
            // helps (a peer may be slow or die), but one chunk at a time, so members do not
            // send many copies of what the joiners already pass around — and only once
            // the joiners hold every chunk between them (the members' uplinks have no
            // chunk left that only they can send; helping earlier made the existing member
            // send 6-8 % of the set twice while its last chunks were still on their way:
            // issue 20), or when few chunks are left (a slow fellow joiner's last ones).
            let idle = !self.chunks.contains(&ChunkState::InFlight(src))
                && (self.joiners_hold_all() || self.remaining <= ENDGAME_CHUNKS * self.alive());
            self.order
                .iter()
                .copied()
                .find(|i| needed(i) && !self.a_peer_has_or_gets(*i))
                .or_else(|| {
                    idle.then(|| self.order.iter().copied().find(needed))
                        .flatten()
                })
        } else {
            self.order.iter().copied().find(needed)
        }?;
        self.chunks[pick] = ChunkState::InFlight(src);
        Some(pick)
    }

    /// Chunk `i` arrived from `src` and verified.
    pub fn complete(&mut self, i: usize) {
        if self.chunks[i] != ChunkState::Done {
            self.chunks[i] = ChunkState::Done;
            self.remaining -= 1;
        }
    }

    fn requeue(&mut self, i: usize) {
        if self.chunks[i] != ChunkState::Done {
            self.chunks[i] = ChunkState::Needed;
        }
    }

    /// Chunk `i` from `src` did not match its digest.
    pub fn corrupt(&mut self, i: usize, src: usize) -> AfterCorrupt {
        self.requeue(i);
        let s = &mut self.sources[src];
        s.bad.insert(i);
        s.corrupt += 1;
        if s.corrupt >= MAX_CORRUPT_PER_SOURCE {
            AfterCorrupt::Drop
        } else {
            AfterCorrupt::Keep
        }
    }

    /// `src` answered `Missing` for chunk `i`.
    pub fn missing(&mut self, i: usize, src: usize) {
        self.requeue(i);
        match &mut self.sources[src].holdings {
            Holdings::Partial(b, _) => b.clear(i),
            _ => {
                self.sources[src].bad.insert(i);
            }
        }
    }

    /// `src` is gone: its in-flight chunks go back to the queue. Returns how many.
    pub fn lose(&mut self, src: usize) -> usize {
        self.sources[src].alive = false;
        let mut n = 0;
        for c in &mut self.chunks {
            if *c == ChunkState::InFlight(src) {
                *c = ChunkState::Needed;
                n += 1;
            }
        }
        self.restripe_once_told();
        n
    }

    /// A needed chunk that no live source can ever provide: every live source holds the
    /// whole set yet all refused or corrupted it (partial sources may still obtain it).
    pub fn unfetchable(&self) -> Option<usize> {
        let hopeless = |i: usize| {
            self.sources
                .iter()
                .enumerate()
                .all(|(s, v)| !v.alive || (v.holdings == Holdings::Full && !self.holds(s, i)))
        };
        (0..self.chunks.len()).find(|&i| self.chunks[i] == ChunkState::Needed && hopeless(i))
    }
}

/// The start chunk for joiner `index` of `count` joiners syncing together.
fn stripe_start(n: usize, index: usize, count: usize) -> usize {
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
fn striped_order(n: usize, index: usize, count: usize, seed: u64) -> Vec<usize> {
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

/// `0..n` starting at `start` (mod n) and wrapping.
fn rotated(n: usize, start: usize) -> Vec<usize> {
    let start = start.checked_rem(n).unwrap_or(0);
    (start..n).chain(0..start).collect()
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
