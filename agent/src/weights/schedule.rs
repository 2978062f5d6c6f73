//! The fetch scheduler: which chunk to ask which source for next. Pure state, no I/O (the
//! workers in `fetch` drive it), so the policy is tested on its own.
//!
//! Policy:
//! - A source is *full* (holds the whole set: an existing member) or *partial* (a fellow
//!   joiner, whose verified chunks we learn from its `Have` bitmap, polled).
//! - Full sources are asked in this joiner's rotated order (joiner `j` of `k` starts at
//!   chunk `j·n/k`), skipping chunks a live partial source already holds or is fetching.
//!   `j` and `k` are first a guess (the member's place in the rank table), then, once
//!   every source answered whether it holds the whole set, this joiner's place among the
//!   sources that do not plus itself ([`Scheduler::restripe`], ordered by address: every
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

/// Scheduler state of one fetch.
#[derive(Debug, Clone)]
pub struct Scheduler {
    chunks: Vec<ChunkState>,
    order: Vec<usize>,
    sources: Vec<SourceView>,
    remaining: usize,
    /// The order was set from the joiners actually found ([`Scheduler::restripe`]).
    restriped: bool,
}

impl Scheduler {
    /// `n` chunks, `held` already verified locally, `sources` sources; full-source order
    /// starts at chunk `start` (mod n).
    pub fn new(n: usize, held: &ChunkBits, sources: usize, start: usize) -> Scheduler {
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
            order: rotated(n, start),
            sources: vec![
                SourceView {
                    alive: true,
                    holdings: Holdings::Unknown,
                    bad: HashSet::new(),
                    corrupt: 0,
                };
                sources
            ],
            remaining,
            restriped: false,
        }
    }

    /// The sources that do not hold the whole set (fellow joiners), once every live
    /// source told what it holds and if the order was not set from them yet; `None`
    /// before that, and after.
    pub fn fellow_joiners(&self) -> Option<Vec<usize>> {
        let told = self
            .sources
            .iter()
            .all(|s| !s.alive || s.holdings != Holdings::Unknown);
        (told && !self.restriped).then(|| {
            (0..self.sources.len())
                .filter(|&i| matches!(self.sources[i].holdings, Holdings::Partial(..)))
                .collect()
        })
    }

    /// Asks full sources from this joiner's stripe among `count` joiners (it is the
    /// `index`-th) from now on; done once (see the module's policy).
    pub fn restripe(&mut self, index: usize, count: usize) {
        let n = self.chunks.len();
        self.order = rotated(n, Self::stripe_start(n, index, count));
        self.restriped = true;
    }

    /// The start chunk for joiner `index` of `count` joiners syncing together.
    pub fn stripe_start(n: usize, index: usize, count: usize) -> usize {
        (n * index.checked_rem(count).unwrap_or(0))
            .checked_div(count)
            .unwrap_or(0)
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

/// `0..n` starting at `start` (mod n) and wrapping.
fn rotated(n: usize, start: usize) -> Vec<usize> {
    let start = start.checked_rem(n).unwrap_or(0);
    (start..n).chain(0..start).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(n: usize, set: &[usize]) -> ChunkBits {
        let mut b = ChunkBits::new(n);
        set.iter().for_each(|&i| b.set(i));
        b
    }

    #[test]
    fn full_sources_share_the_work_and_each_chunk_is_handed_out_once() {
        let mut s = Scheduler::new(6, &ChunkBits::new(6), 2, 0);
        s.set_holdings(0, ChunkBits::full(6), ChunkBits::new(6));
        s.set_holdings(1, ChunkBits::full(6), ChunkBits::new(6));
        let mut got = vec![
            s.next_for(0).unwrap(),
            s.next_for(1).unwrap(),
            s.next_for(0).unwrap(),
        ];
        got.extend([
            s.next_for(1).unwrap(),
            s.next_for(1).unwrap(),
            s.next_for(1).unwrap(),
        ]);
        got.sort();
        assert_eq!(got, [0, 1, 2, 3, 4, 5]);
        assert_eq!(s.next_for(0), None);
    }

    #[test]
    fn joiners_start_on_different_stripes_and_skip_what_peers_hold() {
        assert_eq!(Scheduler::stripe_start(12, 1, 3), 4);
        let mut s = Scheduler::new(12, &ChunkBits::new(12), 2, 4);
        s.set_holdings(0, ChunkBits::full(12), ChunkBits::new(12));
        s.set_holdings(1, bits(12, &[4, 5]), bits(12, &[7]));
        assert_eq!(s.next_for(0), Some(6), "origin skips chunks the peer has");
        assert_eq!(s.next_for(0), Some(8), "and chunks the peer is fetching");
        for i in [9, 10, 11, 0, 1, 2, 3] {
            assert_eq!(s.next_for(0), Some(i));
        }
        assert_eq!(
            s.next_for(0),
            None,
            "endgame waits while the source is busy"
        );
        assert_eq!(s.next_for(1), Some(4), "the peer serves what it has");
        (0..12)
            .filter(|i| ![4, 5, 7].contains(i))
            .for_each(|i| s.complete(i));
        assert_eq!(
            s.next_for(0),
            Some(5),
            "an idle full source helps in the endgame"
        );
        assert_eq!(s.next_for(0), None, "one chunk at a time");
        assert_eq!(s.next_for(1), None);
    }

    #[test]
    fn a_full_source_sends_what_a_joiner_holds_only_once_nothing_is_left_only_it_has() {
        // 40 chunks: this joiner verified 0..20; its fellow (source 1) holds 20..39 and is
        // still fetching 39 — from the existing member (source 0), for all we know.
        let mut s = Scheduler::new(40, &ChunkBits::new(40), 2, 0);
        s.set_holdings(0, ChunkBits::full(40), ChunkBits::new(40));
        let fellow: Vec<usize> = (20..39).collect();
        s.set_holdings(1, bits(40, &fellow), bits(40, &[39]));
        (0..20).for_each(|i| s.complete(i));
        assert_eq!(
            s.next_for(0),
            None,
            "chunk 39 has not left the member yet: its uplink is not spare"
        );
        let all: Vec<usize> = (20..40).collect();
        s.set_holdings(1, bits(40, &all), ChunkBits::new(40));
        assert_eq!(s.next_for(0), Some(20), "now it helps");
        assert_eq!(s.next_for(0), None, "one chunk at a time");
    }

    #[test]
    fn once_every_source_told_the_joiner_stripes_among_the_joiners_found() {
        // Source 0 is an existing member, 1 and 2 are fellow joiners; 12 chunks.
        let mut s = Scheduler::new(12, &ChunkBits::new(12), 3, 4);
        s.set_holdings(0, ChunkBits::full(12), ChunkBits::new(12));
        s.set_holdings(1, ChunkBits::new(12), ChunkBits::new(12));
        assert_eq!(s.fellow_joiners(), None, "source 2 has not told yet");
        s.set_holdings(2, bits(12, &[0]), ChunkBits::new(12));
        assert_eq!(s.fellow_joiners(), Some(vec![1, 2]));
        // This joiner is the last of three: its stripe starts at 8.
        s.restripe(2, 3);
        assert_eq!(s.fellow_joiners(), None, "once");
        assert_eq!(s.next_for(0), Some(8));
        let rest: Vec<usize> = std::iter::from_fn(|| s.next_for(0)).collect();
        assert_eq!(rest, [9, 10, 11, 1, 2, 3, 4, 5, 6, 7], "0 is with a peer");
        // A dead source that never told does not hold it up.
        let mut s = Scheduler::new(4, &ChunkBits::new(4), 2, 0);
        s.set_holdings(0, ChunkBits::full(4), ChunkBits::new(4));
        assert_eq!(s.fellow_joiners(), None);
        s.lose(1);
        assert_eq!(s.fellow_joiners(), Some(vec![]));
    }

    #[test]
    fn a_lost_source_returns_its_chunks_to_the_queue() {
        let mut s = Scheduler::new(3, &bits(3, &[0]), 2, 0);
        assert_eq!(s.remaining(), 2);
        s.set_holdings(0, ChunkBits::full(3), ChunkBits::new(3));
        s.set_holdings(1, ChunkBits::full(3), ChunkBits::new(3));
        assert_eq!(s.next_for(0), Some(1));
        assert_eq!(s.next_for(0), Some(2));
        assert_eq!(s.next_for(1), None);
        assert_eq!(s.lose(0), 2);
        assert_eq!(s.next_for(0), None);
        assert_eq!(s.next_for(1), Some(1));
        s.complete(1);
        assert_eq!(s.next_for(1), Some(2));
        s.complete(2);
        assert!(s.is_done());
    }

    #[test]
    fn a_corrupt_chunk_is_refetched_elsewhere_and_repeat_offenders_are_dropped() {
        let mut s = Scheduler::new(4, &ChunkBits::new(4), 2, 0);
        s.set_holdings(0, ChunkBits::full(4), ChunkBits::new(4));
        assert_eq!(s.next_for(0), Some(0));
        assert_eq!(s.corrupt(0, 0), AfterCorrupt::Keep);
        assert_eq!(
            s.next_for(0),
            Some(1),
            "never the same chunk from the same source"
        );
        assert_eq!(s.unfetchable(), None, "source 1 has not answered yet");
        s.set_holdings(1, ChunkBits::full(4), ChunkBits::new(4));
        assert_eq!(s.next_for(1), Some(0));
        assert_eq!(s.corrupt(0, 1), AfterCorrupt::Keep);
        assert_eq!(s.unfetchable(), Some(0));
        assert_eq!(s.corrupt(1, 0), AfterCorrupt::Keep);
        s.next_for(0);
        assert_eq!(s.corrupt(2, 0), AfterCorrupt::Drop);
    }
}
