//! Demultiplexing of received data frames. Each connection's reader task pushes payloads
//! keyed by (peer endpoint, communicator id, tag); collectives pop them in order with a
//! deadline. A dead peer or an aborted communicator wakes every waiter with the reason, so
//! nothing waits longer than it must.
//!
//! Bounded: an authenticated peer can still send frames for communicators or tags nobody
//! receives, so the mailbox caps the bytes it holds, the (peer, communicator, tag) queues
//! and the communicators with abort notices ([`MailboxFull`]); a link whose data would pass
//! a cap is closed instead of growing the agent's memory.
//!
//! Size: the unit tests of spinning, parking, deaths, aborts and the caps (half the file)
//! share the private state they inspect.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::spin::SpinPolicy;

/// (peer endpoint id, communicator id, tag).
pub type Key = (u64, u64, u64);

/// One received data frame.
#[derive(Debug)]
pub struct Msg {
    pub epoch: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopError {
    Timeout,
    /// The link to the peer is gone; the reason says how.
    PeerDead(String),
    /// A peer aborted the communicator (the first notice received).
    Aborted(Notice),
}

/// An abort notice from a peer: who sent it, whom it blames (endpoint ids), why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub from: u64,
    pub blame: Option<u64>,
    pub reason: String,
}

/// Why a frame was not queued: the mailbox holds its most already.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailboxFull {
    #[error("{queued} bytes queued and {more} more would pass the cap of {cap} bytes")]
    Bytes {
        queued: usize,
        more: usize,
        cap: usize,
    },
    #[error("{0} receive queues open: no room for another")]
    Queues(usize),
    #[error("abort notices held for {0} communicators: no room for another")]
    Aborts(usize),
}

/// Bytes of received, not yet taken data a mailbox holds at most by default (a large
/// pipelined collective runs ahead by tens of MiB; see `POOL_MAX_BYTES`).
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 1 << 30;
/// Receive queues ((peer, communicator, tag) keys) open at once.
pub const MAX_QUEUES: usize = 1 << 16;
/// Communicators with abort notices remembered at once.
pub const MAX_ABORTED: usize = 1024;

#[derive(Default)]
struct Slot {
    queue: VecDeque<Msg>,
    notify: Arc<Notify>,
    waiters: usize,
}

#[derive(Default)]
struct State {
    slots: HashMap<Key, Slot>,
    dead: HashMap<u64, String>,
    /// Per communicator, every abort notice: (from endpoint, blamed endpoint, reason).
    aborted: HashMap<u64, Vec<Notice>>,
    /// Sum of the queued payloads' lengths.
    queued_bytes: usize,
}

#[derive(Default)]
pub struct Mailbox {
    state: Mutex<State>,
    /// How long a receiver polls before it parks (`EndpointConfig::spin`, adapted).
    spin: SpinPolicy,
    /// Recycled receive buffers: large fresh allocations cost page faults on every frame.
    pool: Mutex<Pool>,
    /// The most queued bytes (0: [`DEFAULT_MAX_QUEUED_BYTES`]).
    max_queued_bytes: usize,
}

/// Buffers below this size are not worth pooling.
const POOL_MIN: usize = 64 << 10;
/// Bounds on what the pool keeps. A large pipelined collective has many segments in flight
/// at once (the reader runs ahead of the reduction: tens of MiB for a 64 MiB all-reduce on
/// loopback); a pool smaller than that frees and refaults pages on every operation.
const POOL_MAX_BYTES: usize = 64 << 20;
const POOL_MAX_BUFFERS: usize = 256;

#[derive(Default)]
struct Pool {
    bufs: Vec<Vec<u8>>,
    /// Sum of the pooled buffers' capacities.
    bytes: usize,
}

impl Mailbox {
    /// A mailbox whose receivers poll for up to `spin` before they park.
    pub fn with_spin(spin: std::time::Duration) -> Mailbox {
        Mailbox {
            spin: SpinPolicy::new(spin),
            ..Mailbox::default()
        }
    }

    /// The same mailbox holding at most `bytes` of queued data.
    pub fn with_max_queued_bytes(mut self, bytes: usize) -> Mailbox {
        self.max_queued_bytes = bytes;
        self
    }

    fn cap(&self) -> usize {
        if self.max_queued_bytes == 0 {
            DEFAULT_MAX_QUEUED_BYTES
        } else {
            self.max_queued_bytes
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the maps inconsistent (each update is
        // a single insert/remove), so recover from poisoning instead of propagating it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty buffer with room for `len` bytes, reused when one fits.
    pub fn buffer(&self, len: usize) -> Vec<u8> {
        if len >= POOL_MIN {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = pool
                .bufs
                .iter()
                .position(|v| v.capacity() >= len && v.capacity() <= 2 * len)
            {
                let mut v = pool.bufs.swap_remove(i);
                pool.bytes -= v.capacity();
                v.clear();
                return v;
            }
        }
        Vec::with_capacity(len)
    }

    /// Returns a buffer for reuse by [`Mailbox::buffer`].
    pub fn recycle(&self, v: Vec<u8>) {
        if v.capacity() >= POOL_MIN {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            if pool.bytes + v.capacity() <= POOL_MAX_BYTES && pool.bufs.len() < POOL_MAX_BUFFERS {
                pool.bytes += v.capacity();
                pool.bufs.push(v);
            }
        }
    }

    /// Queues a frame for `key`, unless that would pass a cap.
    pub fn push(&self, key: Key, msg: Msg) -> Result<(), MailboxFull> {
        let mut st = self.lock();
        let (cap, more) = (self.cap(), msg.data.len());
        if st.queued_bytes + more > cap {
            return Err(MailboxFull::Bytes {
                queued: st.queued_bytes,
                more,
                cap,
            });
        }
        if st.slots.len() >= MAX_QUEUES && !st.slots.contains_key(&key) {
            return Err(MailboxFull::Queues(st.slots.len()));
        }
        st.queued_bytes += more;
        let slot = st.slots.entry(key).or_default();
        slot.queue.push_back(msg);
        slot.notify.notify_one();
        Ok(())
    }

    /// Marks a peer endpoint dead and wakes everyone waiting on it.
    pub fn peer_dead(&self, peer: u64, reason: String) {
        let mut st = self.lock();
        st.dead.insert(peer, reason);
        for (k, slot) in &st.slots {
            if k.0 == peer {
                slot.notify.notify_one();
            }
        }
    }

    /// A peer (endpoint `from`) aborted communicator `ctx`: wake every waiter of that ctx.
    pub fn abort_ctx(&self, ctx: u64, notice: Notice) -> Result<(), MailboxFull> {
        let mut st = self.lock();
        if st.aborted.len() >= MAX_ABORTED && !st.aborted.contains_key(&ctx) {
            return Err(MailboxFull::Aborts(st.aborted.len()));
        }
        let list = st.aborted.entry(ctx).or_default();
        if list.len() < 64 {
            list.push(notice);
        }
        for (k, slot) in &st.slots {
            if k.1 == ctx {
                slot.notify.notify_one();
            }
        }
        Ok(())
    }

    /// A new link to `peer` exists: its earlier death no longer applies.
    pub fn revive(&self, peer: u64) {
        self.lock().dead.remove(&peer);
    }

    pub fn is_dead(&self, peer: u64) -> bool {
        self.lock().dead.contains_key(&peer)
    }

    /// Abort notices received for a communicator.
    pub fn notices(&self, ctx: u64) -> Vec<Notice> {
        self.lock().aborted.get(&ctx).cloned().unwrap_or_default()
    }

    /// Forgets everything queued for a communicator (when it is dropped).
    pub fn forget_ctx(&self, ctx: u64) {
        let mut st = self.lock();
        let mut freed = 0;
        st.slots.retain(|k, s| {
            let keep = k.1 != ctx || s.waiters > 0;
            if !keep {
                freed += s.queue.iter().map(|m| m.data.len()).sum::<usize>();
            }
            keep
        });
        st.queued_bytes -= freed;
        st.aborted.remove(&ctx);
    }

    /// The next message for `key`, or why none will come; None: wait.
    fn take(st: &mut State, key: Key) -> Option<Result<Msg, PopError>> {
        if let Some(slot) = st.slots.get_mut(&key)
            && let Some(m) = slot.queue.pop_front()
        {
            if slot.queue.is_empty() && slot.waiters == 0 {
                st.slots.remove(&key);
            }
            st.queued_bytes -= m.data.len();
            return Some(Ok(m));
        }
        if let Some(reason) = st.dead.get(&key.0) {
            return Some(Err(PopError::PeerDead(reason.clone())));
        }
        if let Some(n) = st.aborted.get(&key.1).and_then(|l| l.first()) {
            return Some(Err(PopError::Aborted(n.clone())));
        }
        None
    }

    /// Next message for `key`, waiting until `deadline`. Data that arrived before a failure
    /// is still delivered first.
    pub async fn pop(&self, key: Key, deadline: Instant) -> Result<Msg, PopError> {
        if let Some(done) = Self::take(&mut self.lock(), key) {
            return done;
        }
        // Only receives that had to wait tell whether waiting by polling pays.
        let start = std::time::Instant::now();
        let got = self.wait(key, deadline).await;
        if got.is_ok() {
            self.spin.record(start.elapsed());
        }
        got
    }

    async fn wait(&self, key: Key, deadline: Instant) -> Result<Msg, PopError> {
        let spin = self.spin.budget();
        if !spin.is_zero() {
            // Poll before parking. `yield_now` lets this worker run the reader task and poll
            // the socket driver, so a reply arriving within the spin is taken without the
            // thread sleeping in epoll and being woken. The OS yield is Open MPI's
            // `mpi_yield_when_idle`: where ranks outnumber cores, the peer this rank waits
            // for may need this core; where nobody else is runnable it returns at once.
            let until = std::time::Instant::now() + spin;
            loop {
                if let Some(done) = Self::take(&mut self.lock(), key) {
                    return done;
                }
                if std::time::Instant::now() >= until || Instant::now() >= deadline {
                    break;
                }
                tokio::task::yield_now().await;
                std::thread::yield_now();
            }
        }
        loop {
            let notify = {
                let mut st = self.lock();
                if let Some(done) = Self::take(&mut st, key) {
                    return done;
                }
                let slot = st.slots.entry(key).or_default();
                slot.waiters += 1;
                slot.notify.clone()
            };
            // Unregisters the waiter even if this future is dropped mid-wait.
            let waiting = Waiting { mailbox: self, key };
            let woke = tokio::time::timeout_at(deadline, notify.notified()).await;
            drop(waiting);
            if woke.is_err() {
                // One last look: a message may have raced the deadline.
                let mut st = self.lock();
                if let Some(slot) = st.slots.get_mut(&key)
                    && let Some(m) = slot.queue.pop_front()
                {
                    st.queued_bytes -= m.data.len();
                    return Ok(m);
                }
                return Err(PopError::Timeout);
            }
        }
    }

    #[cfg(test)]
    pub fn slot_count(&self) -> usize {
        self.lock().slots.len()
    }

    #[cfg(test)]
    pub fn queued_bytes(&self) -> usize {
        self.lock().queued_bytes
    }
}

struct Waiting<'a> {
    mailbox: &'a Mailbox,
    key: Key,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut st = self.mailbox.lock();
        if let Some(slot) = st.slots.get_mut(&self.key) {
            slot.waiters -= 1;
            if slot.queue.is_empty() && slot.waiters == 0 {
                st.slots.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(2)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_spinning_receiver_takes_messages_deaths_and_deadlines_like_a_parked_one() {
        let mb = Arc::new(Mailbox::with_spin(Duration::from_millis(20)));
        // Arrives during the spin.
        let m2 = mb.clone();
        let h = tokio::spawn(async move { m2.pop((1, 1, 1), soon()).await });
        tokio::time::sleep(Duration::from_millis(2)).await;
        mb.push(
            (1, 1, 1),
            Msg {
                epoch: 1,
                data: vec![7],
            },
        )
        .unwrap();
        assert_eq!(h.await.unwrap().unwrap().data, vec![7]);
        // Arrives after the spin (the receiver parked).
        let m2 = mb.clone();
        let h = tokio::spawn(async move { m2.pop((1, 1, 2), soon()).await });
        tokio::time::sleep(Duration::from_millis(60)).await;
        mb.push(
            (1, 1, 2),
            Msg {
                epoch: 1,
                data: vec![8],
            },
        )
        .unwrap();
        assert_eq!(h.await.unwrap().unwrap().data, vec![8]);
        // A dead peer during the spin.
        let m2 = mb.clone();
        let h = tokio::spawn(async move { m2.pop((3, 1, 1), soon()).await });
        mb.peer_dead(3, "gone".into());
        assert_eq!(
            h.await.unwrap().unwrap_err(),
            PopError::PeerDead("gone".into())
        );
        // A deadline shorter than the spin.
        let t = Instant::now();
        let e = mb
            .pop((4, 1, 1), Instant::now() + Duration::from_millis(5))
            .await
            .unwrap_err();
        assert_eq!(e, PopError::Timeout);
        assert!(t.elapsed() < Duration::from_millis(500));
        assert_eq!(mb.slot_count(), 0);
    }

    #[tokio::test]
    async fn messages_arrive_in_order_and_slots_are_freed() {
        let mb = Mailbox::default();
        for i in 0..3u8 {
            mb.push(
                (1, 2, 3),
                Msg {
                    epoch: 0,
                    data: vec![i],
                },
            )
            .unwrap();
        }
        for i in 0..3u8 {
            assert_eq!(mb.pop((1, 2, 3), soon()).await.unwrap().data, vec![i]);
        }
        assert_eq!(mb.slot_count(), 0);
    }

    #[tokio::test]
    async fn a_waiter_is_woken_by_a_later_push() {
        let mb = Arc::new(Mailbox::default());
        let m2 = mb.clone();
        let h = tokio::spawn(async move { m2.pop((1, 1, 1), soon()).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        mb.push(
            (1, 1, 1),
            Msg {
                epoch: 5,
                data: vec![9],
            },
        )
        .unwrap();
        assert_eq!(h.await.unwrap().unwrap().epoch, 5);
        assert_eq!(mb.slot_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_times_out_at_its_deadline() {
        let mb = Mailbox::default();
        let r = mb
            .pop((1, 1, 1), Instant::now() + Duration::from_secs(1))
            .await;
        assert_eq!(r.unwrap_err(), PopError::Timeout);
    }

    #[tokio::test]
    async fn death_of_a_peer_wakes_its_waiters_but_not_others() {
        let mb = Arc::new(Mailbox::default());
        let m2 = mb.clone();
        let h = tokio::spawn(async move { m2.pop((7, 1, 1), soon()).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        mb.peer_dead(7, "eof".into());
        assert_eq!(
            h.await.unwrap().unwrap_err(),
            PopError::PeerDead("eof".into())
        );
        mb.abort_ctx(
            1,
            Notice {
                from: 8,
                blame: None,
                reason: "boom".into(),
            },
        )
        .unwrap();
        assert_eq!(
            mb.pop((9, 1, 2), soon()).await.unwrap_err(),
            PopError::Aborted(Notice {
                from: 8,
                blame: None,
                reason: "boom".into()
            })
        );
    }

    fn msg(len: usize) -> Msg {
        Msg {
            epoch: 1,
            data: vec![0; len],
        }
    }

    #[tokio::test]
    async fn a_peer_cannot_queue_more_than_the_cap_and_taken_data_frees_room() {
        let mb = Mailbox::default().with_max_queued_bytes(100);
        mb.push((1, 1, 1), msg(60)).unwrap();
        let full = mb.push((1, 1, 2), msg(41)).unwrap_err();
        assert_eq!(
            full,
            MailboxFull::Bytes {
                queued: 60,
                more: 41,
                cap: 100
            }
        );
        mb.push((1, 1, 2), msg(40)).unwrap();
        assert_eq!(mb.pop((1, 1, 1), soon()).await.unwrap().data.len(), 60);
        assert_eq!(mb.queued_bytes(), 40);
        mb.push((1, 1, 3), msg(60)).unwrap();
        // Forgetting a communicator gives its queued bytes back.
        mb.forget_ctx(1);
        assert_eq!(mb.queued_bytes(), 0);
        assert_eq!(mb.slot_count(), 0);
    }

    #[test]
    fn receive_queues_and_aborted_communicators_are_capped() {
        let mb = Mailbox::default();
        for tag in 0..MAX_QUEUES as u64 {
            mb.push((1, 1, tag), msg(0)).unwrap();
        }
        assert_eq!(
            mb.push((1, 1, u64::MAX), msg(0)).unwrap_err(),
            MailboxFull::Queues(MAX_QUEUES)
        );
        // An existing queue still takes data.
        mb.push((1, 1, 0), msg(1)).unwrap();
        let notice = || Notice {
            from: 2,
            blame: None,
            reason: "x".into(),
        };
        for ctx in 0..MAX_ABORTED as u64 {
            mb.abort_ctx(ctx, notice()).unwrap();
        }
        assert_eq!(
            mb.abort_ctx(u64::MAX, notice()).unwrap_err(),
            MailboxFull::Aborts(MAX_ABORTED)
        );
        mb.abort_ctx(0, notice()).unwrap();
    }
}
