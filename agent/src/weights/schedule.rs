//! The fetch scheduler: which chunk to ask which source for next. Pure state, no I/O (the
//! workers in `fetch` drive it), so the policy is tested on its own.
//!
//! Policy:
//! - A source is *full* (holds the whole set: an existing member) or *partial* (a fellow
//!   joiner, whose verified chunks we learn from its `Have` bitmap, polled).
//! - Full sources are asked in this joiner's stripe order (joiner `j` of `k` owns chunks
//!   `j·n/k..(j+1)·n/k`, asked from the start; then every other chunk in an order of its
//!   own, shuffled: `order::striped_order`), skipping chunks a live partial source already
//!   holds or is fetching.
//!   `j` and `k` are first a guess (the member's place in the rank table; an early sync,
//!   begun before that table, only starts at a place spread by the member's index:
//!   `Place`), then, once every source answered whether it holds the whole set, this
//!   joiner's place among the sources that do not plus itself (`restripe_once_told`,
//!   ordered by address: every joiner of the swarm computes the same list). The rank
//!   table's places alone leave the existing members' places nobody's stripe: every joiner
//!   that finished its own went on to the same last unclaimed stretch and asked for the
//!   same chunks within one `Have` poll of the others (issue 20). So k joiners pull
//!   disjoint stripes from the existing members and the rest from each other: every chunk
//!   leaves the existing members about once and the joiners' links carry the copies —
//!   adding k members costs about one transfer (see `mod.rs`, "Several joiners").
//! - Partial sources are asked for any needed chunk they hold.
//! - Work stealing: a worker asks for its next chunk only when it has room in its
//!   pipeline, so faster sources simply take more chunks.
//! - A chunk that came back corrupt or `Missing` goes back to the queue and is never asked
//!   of that source again; a lost source's outstanding chunks go back to the queue.
//!
//! Picking scans this joiner's order from places the scheduler keeps — past the verified
//! chunks at its front, past what a full source may not take first, and per source past
//! what it does not hold — each moved back only when a chunk is needed again or a source
//! tells of chunks it did not hold. So a fetch's picks cost about O(chunks) in all where
//! scanning from the start cost O(chunks²): a 700 GB set is 358,400 chunks of 2 MiB
//! (`examples/schedule_bench.rs`, docs/benchmarks.md).

use std::collections::HashSet;
use std::net::IpAddr;

use super::bitset::ChunkBits;

#[path = "schedule_order.rs"]
mod order;
pub use order::Place;
#[cfg(test)]
use order::stripe_start;
use order::{ranks, rotated, spread_start, striped_order};

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
    /// Chunks in flight from this source (its `InFlight` states, counted as they change).
    flying: usize,
    /// Positions of the order before this one hold no needed chunk this source holds, and
    /// its picks scan from here: a fellow joiner's picks passed this joiner's own stripe,
    /// which fellows rarely hold, at every pick. Moved back to a chunk's place whenever a
    /// chunk is needed again or the source tells it holds a chunk it did not.
    from: usize,
    holdings: Holdings,
    /// Chunks this source must not be asked for again (it sent garbage or lacked them).
    bad: HashSet<usize>,
    corrupt: u32,
}

impl SourceView {
    /// A live source that has not told what it holds.
    fn untold() -> SourceView {
        SourceView {
            alive: true,
            flying: 0,
            from: 0,
            holdings: Holdings::Unknown,
            bad: HashSet::new(),
            corrupt: 0,
        }
    }
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
    /// Where the first order starts: the member's place in the rank table as a first
    /// stripe, or a start of its own that stays so unless fellow joiners are found.
    pub place: Place,
    /// Shuffles the chunks outside this joiner's stripe (`order::striped_order`), or picks
    /// the start when the place is [`Place::Unknown`]; random in a fetch, fixed in tests.
    pub seed: u64,
}

/// Scheduler state of one fetch.
#[derive(Debug, Clone)]
pub struct Scheduler {
    chunks: Vec<ChunkState>,
    order: Vec<usize>,
    /// Each chunk's position in `order`.
    rank: Vec<usize>,
    /// Positions of `order` before this one hold verified chunks only (a verified chunk
    /// stays so), and every scan starts here. Scanning from the start made a fetch's picks
    /// O(chunks²) in all: ~1.3·10⁹ steps for a 100 GB set of 2 MiB chunks.
    settled: usize,
    /// Positions of `order` before this one hold no chunk a full source's first choice
    /// may take: each chunk is verified, in flight, or held or fetched by a live fellow
    /// joiner. A full source that finished this joiner's stripe scanned every chunk the
    /// fellows pass around at each pick (O(chunks) each, most of the fetch); set back to
    /// `settled` whenever that may stop being true (a chunk given back, a fellow lost or
    /// telling less than before).
    screened: usize,
    /// The verified chunks (the `Done` states as bits).
    done: ChunkBits,
    /// The chunks in flight (the `InFlight` states as bits), kept as they change: a worker
    /// advertises them with every batch it asks for, and building them from the states
    /// each time was O(chunks) per batch.
    flying: ChunkBits,
    sources: Vec<SourceView>,
    /// The sources' addresses, by index (for the stripe among the joiners found).
    addresses: Vec<IpAddr>,
    /// This joiner's address while its stripe is still the first guess; `None` once it
    /// was set from the joiners found (or if it never can be).
    own_until_restriped: Option<IpAddr>,
    /// This joiner's address, for a restripe after sources were added ([`Scheduler::add_source`]).
    own: Option<IpAddr>,
    /// Whether the first order was the rank table's stripe ([`Scheduler::restripe_once_told`]).
    guessed: bool,
    seed: u64,
    remaining: usize,
}

impl Scheduler {
    /// `n` chunks, `held` already verified locally, fetched from `swarm`'s sources.
    pub fn new(n: usize, held: &ChunkBits, swarm: Swarm) -> Scheduler {
        let order = match swarm.place {
            Place::Stripe { index, count } => striped_order(n, index, count, swarm.seed),
            Place::Spread(k) => rotated(n, spread_start(n, k)),
            Place::Unknown => rotated(n, (swarm.seed % n.max(1) as u64) as usize),
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
            rank: ranks(&order),
            order,
            settled: 0,
            screened: 0,
            done: held.clone(),
            flying: ChunkBits::new(n),
            sources: vec![SourceView::untold(); swarm.sources.len()],
            addresses: swarm.sources,
            own_until_restriped: swarm.own,
            own: swarm.own,
            guessed: matches!(swarm.place, Place::Stripe { .. }),
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
        if joiners.len() == 1 && !self.guessed {
            // Found alone and never given a stripe: a joiner whose fellows are not known
            // yet (an early sync, before the rank table that names them). Striped as the
            // first of one, every such joiner asked the existing members for the same
            // chunks in the same order, and each of those chunks left the member once per
            // joiner; the start of its own it has ([`Place`]) keeps them apart.
            self.own_until_restriped = None;
            return;
        }
        let index = joiners.iter().position(|ip| *ip == own).unwrap_or(0);
        tracing::debug!(
            index,
            joiners = joiners.len(),
            "striping among the joiners found"
        );
        let n = self.chunks.len();
        self.order = striped_order(n, index, joiners.len(), self.seed);
        self.rank = ranks(&self.order);
        self.settled = 0;
        self.screened = 0;
        self.sources.iter_mut().for_each(|s| s.from = 0);
        self.own_until_restriped = None;
    }

    /// A source learned while the fetch runs (fellow joiners named by a rank table that
    /// came after the fetch began); returns its index. Nothing it holds is known until it
    /// tells, and once every source told this joiner stripes again among the joiners
    /// found, as at the start: the chunks in flight stay where they are.
    pub fn add_source(&mut self, ip: IpAddr) -> usize {
        self.sources.push(SourceView::untold());
        self.addresses.push(ip);
        self.own_until_restriped = self.own;
        self.sources.len() - 1
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
        let now = if bits.is_full() {
            Holdings::Full
        } else {
            Holdings::Partial(bits, coming)
        };
        // What a fellow has or gets counts only while it is partial and tells no less.
        let kept = match (&self.sources[src].holdings, &now) {
            (Holdings::Partial(h0, c0), Holdings::Partial(h, c)) => {
                h0.within(h, c) && c0.within(h, c)
            }
            (Holdings::Partial(..), Holdings::Full) => false,
            _ => true,
        };
        if !kept {
            self.screened = 0;
        }
        let from = match (&self.sources[src].holdings, &now) {
            (Holdings::Partial(h0, _), Holdings::Partial(h, _)) => h
                .added_since(h0)
                .map(|i| self.rank[i])
                .fold(self.sources[src].from, usize::min),
            _ => 0,
        };
        self.sources[src].from = from;
        self.sources[src].holdings = now;
        self.restripe_once_told();
    }

    /// Chunks in flight from any source (what this joiner advertises as coming).
    pub fn in_flight(&self) -> ChunkBits {
        self.flying.clone()
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

    /// Every chunk is verified here or held by a live fellow joiner.
    fn joiners_hold_all(&self) -> bool {
        let parts: Vec<&ChunkBits> = std::iter::once(&self.done)
            .chain(self.sources.iter().filter_map(|s| match &s.holdings {
                Holdings::Partial(held, _) if s.alive => Some(held),
                _ => None,
            }))
            .collect();
        ChunkBits::union_is_full(self.chunks.len(), &parts)
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
        while self
            .order
            .get(self.settled)
            .is_some_and(|&i| self.chunks[i] == ChunkState::Done)
        {
            self.settled += 1;
        }
        let pick = if self.is_full(src) {
            // Endgame: once every needed chunk is with a fellow joiner, a full source still
            // helps (a peer may be slow or die), but one chunk at a time, so members do not
            // send many copies of what the joiners already pass around — and only once
            // the joiners hold every chunk between them (the members' uplinks have no
            // chunk left that only they can send; helping earlier made the existing member
            // send 6-8 % of the set twice while its last chunks were still on their way:
            // issue 20), or when few chunks are left (a slow fellow joiner's last ones).
            let idle = self.sources[src].flying == 0
                && (self.remaining <= ENDGAME_CHUNKS * self.alive() || self.joiners_hold_all());
            let (first, stop) = self.first_unshared(src, self.screened.max(self.settled));
            self.screened = stop;
            match first {
                Some(i) => Some(i),
                None if idle => self.first_needed(src),
                None => None,
            }
        } else {
            self.first_needed(src)
        }?;
        self.set_state(pick, ChunkState::InFlight(src));
        Some(pick)
    }

    /// The first needed chunk in this joiner's order that `src` holds (scanned from the
    /// source's [`SourceView::from`], which moves up to it).
    fn first_needed(&mut self, src: usize) -> Option<usize> {
        let from = self.sources[src].from.max(self.settled);
        let at = self.order[from..]
            .iter()
            .position(|&i| self.chunks[i] == ChunkState::Needed && self.holds(src, i))
            .map(|p| from + p);
        self.sources[src].from = at.unwrap_or(self.order.len());
        at.map(|p| self.order[p])
    }

    /// From position `from` of the order: the first needed chunk `src` holds that no live
    /// fellow joiner has or gets, and the position of the first needed chunk no fellow has
    /// or gets, held by `src` or not (where [`Scheduler::screened`] may move to).
    fn first_unshared(&self, src: usize, from: usize) -> (Option<usize>, usize) {
        let mut stop = None;
        for (at, &i) in self.order.iter().enumerate().skip(from) {
            if self.chunks[i] != ChunkState::Needed || self.a_peer_has_or_gets(i) {
                continue;
            }
            let stop = *stop.get_or_insert(at);
            if self.holds(src, i) {
                return (Some(i), stop);
            }
        }
        (None, stop.unwrap_or(self.order.len()))
    }

    /// Chunk `i` arrived from `src` and verified.
    pub fn complete(&mut self, i: usize) {
        if self.chunks[i] != ChunkState::Done {
            self.set_state(i, ChunkState::Done);
            self.remaining -= 1;
        }
    }

    fn requeue(&mut self, i: usize) {
        if self.chunks[i] != ChunkState::Done {
            self.set_state(i, ChunkState::Needed);
            self.screened = 0;
            let r = self.rank[i];
            self.sources.iter_mut().for_each(|s| s.from = s.from.min(r));
        }
    }

    /// Moves chunk `i` to `to`, the in-flight bits and counts with it.
    fn set_state(&mut self, i: usize, to: ChunkState) {
        if let ChunkState::InFlight(s) = self.chunks[i] {
            self.flying.clear(i);
            self.sources[s].flying -= 1;
        }
        if let ChunkState::InFlight(s) = to {
            self.flying.set(i);
            self.sources[s].flying += 1;
        }
        if to == ChunkState::Done {
            self.done.set(i);
        }
        self.chunks[i] = to;
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
        // What it had or got no longer counts as a fellow's.
        self.screened = 0;
        let n = self.sources[src].flying;
        for i in 0..self.chunks.len() {
            if self.chunks[i] == ChunkState::InFlight(src) {
                self.requeue(i);
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

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
