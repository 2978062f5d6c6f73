//! Admission for every TCP listener of a node (link probe, chunk server, comm acceptor,
//! metrics): who may hold a connection slot, and for how long.
//!
//! Why one piece for all of them: each listener used to cap only its total (probe 64,
//! chunk server 64, comm 256) and most held a slot until a generous deadline, so one host
//! opening a few dozen idle connections took every slot and the node's real peers were
//! refused — its probes failed and peers recorded the node Down. Here a connection is
//! always accepted and then admitted or closed at once, so the listen backlog never
//! fills; the cap is per peer address first (a flood from one address can only take that
//! address's slots) and global second (bounded memory and tasks), and every slot is freed
//! by a deadline the listener enforces. Refusals are counted by reason for metrics.
//!
//! The per-address cap alone does not stop a flood from many addresses: 32 addresses at 16
//! each fill a total of 512. So the addresses the node knows as its peers (the members'
//! nodes named by its rank tables, [`Guard::set_known`]) have a pool of their own: strangers
//! share [`Limits::total`], known peers another [`Limits::total`], each address still within
//! [`Limits::per_peer`]. A flood from any number of unknown addresses then leaves every real
//! peer its slots.
//!
//! [`Admission`] is the pure accounting (unit-tested); [`Guard`] wraps it for concurrent
//! use and hands out [`Slot`]s that release themselves when dropped.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The caps and deadlines of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections one peer address may hold at once.
    pub per_peer: usize,
    /// Connections unknown addresses together may hold at once; known peers
    /// ([`Guard::set_known`]) may hold as many again.
    pub total: usize,
    /// A connection that has not proved itself (handshake, request line) within this is
    /// closed.
    pub handshake: Duration,
    /// A connection that sends nothing for this long is closed.
    pub idle: Duration,
}

/// Why a connection was closed without being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    /// Its address already holds [`Limits::per_peer`] connections.
    #[error("the peer address holds its share of connections already")]
    PerPeer,
    /// The listener holds [`Limits::total`] connections of the peer's kind (unknown
    /// addresses, or known peers).
    #[error("the listener holds its most connections already")]
    Total,
    /// It did not complete its handshake or request within the deadline.
    #[error("no handshake or request within the deadline")]
    Deadline,
    /// It sent nothing for the idle deadline.
    #[error("idle for longer than the deadline")]
    Idle,
}

impl Refusal {
    /// Every reason, in label order.
    pub const ALL: [Refusal; 4] = [
        Refusal::PerPeer,
        Refusal::Total,
        Refusal::Deadline,
        Refusal::Idle,
    ];

    /// A short fixed name (metric label).
    pub fn label(self) -> &'static str {
        match self {
            Refusal::PerPeer => "per_peer_cap",
            Refusal::Total => "total_cap",
            Refusal::Deadline => "deadline",
            Refusal::Idle => "idle",
        }
    }

    fn index(self) -> usize {
        match self {
            Refusal::PerPeer => 0,
            Refusal::Total => 1,
            Refusal::Deadline => 2,
            Refusal::Idle => 3,
        }
    }
}

/// Whether an address was a known peer when its slot was taken (its slot goes back to
/// that pool, whatever the known set is by then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerKind {
    Known,
    Stranger,
}

/// Connections held, per peer address and per pool (pure).
#[derive(Debug, Default)]
pub struct Admission {
    per_peer: HashMap<IpAddr, usize>,
    known: HashSet<IpAddr>,
    known_held: usize,
    strangers_held: usize,
}

impl Admission {
    /// Takes a slot for `peer`, or says why not. The per-peer cap is checked first, so a
    /// flooding address is named as such even when it also filled its pool.
    pub fn admit(&mut self, peer: IpAddr, limits: &Limits) -> Result<PeerKind, Refusal> {
        let held = self.per_peer.get(&peer).copied().unwrap_or(0);
        if held >= limits.per_peer.max(1) {
            return Err(Refusal::PerPeer);
        }
        let kind = if self.known.contains(&peer) {
            PeerKind::Known
        } else {
            PeerKind::Stranger
        };
        let pool = self.pool(kind);
        if *pool >= limits.total.max(1) {
            return Err(Refusal::Total);
        }
        *pool += 1;
        *self.per_peer.entry(peer).or_insert(0) += 1;
        Ok(kind)
    }

    /// Gives back a slot `peer` took as `kind` (an address with no slot left is
    /// forgotten, so the table holds only current peers).
    pub fn release(&mut self, peer: IpAddr, kind: PeerKind) {
        let Some(n) = self.per_peer.get_mut(&peer) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            self.per_peer.remove(&peer);
        }
        let pool = self.pool(kind);
        *pool = pool.saturating_sub(1);
    }

    /// The count of slots held in `kind`'s pool.
    fn pool(&mut self, kind: PeerKind) -> &mut usize {
        match kind {
            PeerKind::Known => &mut self.known_held,
            PeerKind::Stranger => &mut self.strangers_held,
        }
    }

    /// Replaces the known peers' addresses (slots already held keep their pool).
    pub fn set_known(&mut self, known: HashSet<IpAddr>) {
        self.known = known;
    }

    /// Slots held by `peer`.
    pub fn held_by(&self, peer: IpAddr) -> usize {
        self.per_peer.get(&peer).copied().unwrap_or(0)
    }

    /// Slots held in total (both pools).
    pub fn total(&self) -> usize {
        self.known_held + self.strangers_held
    }

    /// Peer addresses holding a slot.
    pub fn peers(&self) -> usize {
        self.per_peer.len()
    }
}

/// Counters of one listener.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerCounts {
    /// Connections admitted.
    pub admitted: u64,
    /// Connections closed unserved, by [`Refusal::ALL`] order.
    pub refused: [u64; 4],
    /// Connections holding a slot now.
    pub open: usize,
}

impl ListenerCounts {
    /// Refusals for one reason.
    pub fn refused(&self, reason: Refusal) -> u64 {
        self.refused[reason.index()]
    }
}

/// One listener's admission, shared by its accept loop and connection tasks.
#[derive(Debug)]
pub struct Guard {
    name: &'static str,
    limits: Limits,
    state: Mutex<Admission>,
    admitted: AtomicU64,
    refused: [AtomicU64; 4],
}

impl Guard {
    /// A guard for the listener called `name` (metric label).
    pub fn new(name: &'static str, limits: Limits) -> Arc<Guard> {
        Arc::new(Guard {
            name,
            limits,
            state: Mutex::new(Admission::default()),
            admitted: AtomicU64::new(0),
            refused: Default::default(),
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Sets the addresses of the node's known peers, which take slots from their own pool
    /// (see the module's documentation).
    pub fn set_known(&self, known: impl IntoIterator<Item = IpAddr>) {
        self.lock().set_known(known.into_iter().collect());
    }

    /// Admits a connection from `peer`, or counts and returns why not (the caller closes
    /// the connection at once).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refusal> {
        let r = self.lock().admit(peer, &self.limits);
        match r {
            Ok(kind) => {
                self.admitted.fetch_add(1, Ordering::Relaxed);
                Ok(Slot {
                    guard: self.clone(),
                    peer,
                    kind,
                })
            }
            Err(reason) => {
                self.count(reason);
                tracing::debug!(listener = self.name, %peer, reason = reason.label(), "connection refused");
                Err(reason)
            }
        }
    }

    /// Counts a connection closed for `reason` after it was admitted (a deadline).
    pub fn count(&self, reason: Refusal) {
        self.refused[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn counts(&self) -> ListenerCounts {
        ListenerCounts {
            admitted: self.admitted.load(Ordering::Relaxed),
            refused: std::array::from_fn(|i| self.refused[i].load(Ordering::Relaxed)),
            open: self.lock().total(),
        }
    }

    /// Runs `work` (the handshake or first request of an admitted connection) under the
    /// handshake deadline; a miss is counted as [`Refusal::Deadline`].
    pub async fn within_handshake<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Refusal> {
        match tokio::time::timeout(self.limits.handshake, work).await {
            Ok(v) => Ok(v),
            Err(_) => {
                self.count(Refusal::Deadline);
                Err(Refusal::Deadline)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Admission> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A held connection slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    guard: Arc<Guard>,
    peer: IpAddr,
    kind: PeerKind,
}

impl Slot {
    pub fn peer(&self) -> IpAddr {
        self.peer
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.guard.lock().release(self.peer, self.kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        per_peer: 2,
        total: 3,
        handshake: Duration::from_secs(1),
        idle: Duration::from_secs(1),
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_address_takes_only_its_share_and_others_still_get_in() {
        let mut a = Admission::default();
        assert_eq!(a.admit(ip(1), &LIMITS), Ok(PeerKind::Stranger));
        assert_eq!(a.admit(ip(1), &LIMITS), Ok(PeerKind::Stranger));
        for _ in 0..1000 {
            assert_eq!(a.admit(ip(1), &LIMITS), Err(Refusal::PerPeer));
        }
        assert_eq!(a.admit(ip(2), &LIMITS), Ok(PeerKind::Stranger));
        assert_eq!(a.held_by(ip(1)), 2);
        assert_eq!(a.total(), 3);
    }

    #[test]
    fn the_total_cap_holds_across_addresses_and_released_slots_are_reused() {
        let mut a = Admission::default();
        for last in 1..=3 {
            assert_eq!(a.admit(ip(last), &LIMITS), Ok(PeerKind::Stranger));
        }
        assert_eq!(a.admit(ip(4), &LIMITS), Err(Refusal::Total));
        a.release(ip(2), PeerKind::Stranger);
        assert_eq!(a.peers(), 2, "an address with no slot is forgotten");
        assert_eq!(a.admit(ip(4), &LIMITS), Ok(PeerKind::Stranger));
        // Releasing an address that holds nothing changes nothing.
        a.release(ip(9), PeerKind::Stranger);
        assert_eq!(a.total(), 3);
    }

    #[test]
    fn a_flood_from_many_addresses_leaves_the_known_peers_their_own_slots() {
        let limits = Limits { total: 4, ..LIMITS };
        let mut a = Admission::default();
        a.set_known([ip(200), ip(201)].into_iter().collect());
        // Strangers fill their pool from 1000 addresses.
        let mut admitted = 0;
        for i in 0..1000u32 {
            let stranger = IpAddr::from([10, 1, (i / 250) as u8, (i % 250) as u8]);
            if a.admit(stranger, &limits).is_ok() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, limits.total);
        // Every known peer still gets its share, and no more.
        for peer in [ip(200), ip(201)] {
            for _ in 0..limits.per_peer {
                assert_eq!(a.admit(peer, &limits), Ok(PeerKind::Known));
            }
            assert_eq!(a.admit(peer, &limits), Err(Refusal::PerPeer));
        }
        // The known pool has its own total too.
        a.set_known([ip(200), ip(201), ip(202)].into_iter().collect());
        assert_eq!(a.admit(ip(202), &limits), Err(Refusal::Total));
        assert_eq!(a.total(), 2 * limits.total);
    }

    #[test]
    fn a_slot_goes_back_to_the_pool_it_came_from_after_the_known_set_changes() {
        let mut a = Admission::default();
        a.set_known([ip(9)].into_iter().collect());
        assert_eq!(a.admit(ip(9), &LIMITS), Ok(PeerKind::Known));
        // The peer leaves the rank tables while its connection is open.
        a.set_known(HashSet::new());
        for last in 1..=3 {
            assert_eq!(a.admit(ip(last), &LIMITS), Ok(PeerKind::Stranger));
        }
        a.release(ip(9), PeerKind::Known);
        assert_eq!(a.total(), 3);
        assert_eq!(
            a.admit(ip(4), &LIMITS),
            Err(Refusal::Total),
            "strangers' pool still full"
        );
        assert_eq!(
            a.admit(ip(9), &LIMITS),
            Err(Refusal::Total),
            "now a stranger"
        );
    }

    #[test]
    fn slots_free_themselves_and_refusals_are_counted_by_reason() {
        let g = Guard::new("test", LIMITS);
        let s1 = g.admit(ip(1)).unwrap();
        let _s2 = g.admit(ip(1)).unwrap();
        assert_eq!(g.admit(ip(1)).unwrap_err(), Refusal::PerPeer);
        assert_eq!(g.counts().open, 2);
        drop(s1);
        assert_eq!(g.counts().open, 1);
        let _s3 = g.admit(ip(1)).unwrap();
        let c = g.counts();
        assert_eq!(c.admitted, 3);
        assert_eq!(c.refused(Refusal::PerPeer), 1);
        assert_eq!(c.refused(Refusal::Total), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handshake_past_its_deadline_is_counted() {
        let g = Guard::new("test", LIMITS);
        let r = g.within_handshake(std::future::pending::<()>()).await;
        assert_eq!(r, Err(Refusal::Deadline));
        assert_eq!(g.counts().refused(Refusal::Deadline), 1);
        assert_eq!(g.within_handshake(async { 7 }).await, Ok(7));
    }
}
