//! HCCL memory accounting. Every communicator takes device memory for its buffers,
//! `HCCL_BUFFSIZE` MB twice over (ASCEND.md §5: input and output buffers; 200 MB each by
//! default), and make-before-break keeps several epochs' communicators alive at once. The
//! budget counts them: a communicator is built only after its share is reserved, and a
//! refusal names what it needed, what is held and the limit. Pure (atomics only), so it is
//! tested without HCCL; [`HcclMemoryStats`] is what a metric exports.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::HcclError;

/// HCCL's default `HCCL_BUFFSIZE` in MB.
pub const DEFAULT_BUFFER_SIZE_MB: u32 = 200;
/// Buffers of `HCCL_BUFFSIZE` each communicator allocates.
const BUFFERS_PER_COMMUNICATOR: u64 = 2;

#[derive(Debug, Default)]
struct Counters {
    reserved: AtomicU64,
    live: AtomicUsize,
    refusals: AtomicU64,
}

/// The HCCL memory of one process (one device), shared by its epoch manager's builds.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    buffer_size_mb: u32,
    limit: Option<u64>,
    counters: Arc<Counters>,
}

/// A reservation for one live communicator; released when dropped (after the communicator
/// was destroyed, since it is the communicator holder's last field).
#[derive(Debug)]
pub struct BudgetToken {
    bytes: u64,
    counters: Arc<Counters>,
}

impl Drop for BudgetToken {
    fn drop(&mut self) {
        self.counters
            .reserved
            .fetch_sub(self.bytes, Ordering::SeqCst);
        self.counters.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HcclMemoryStats {
    /// Communicators alive (serving, base, building, retiring).
    pub live_communicators: usize,
    /// Bytes they hold (`live_communicators` × [`Self::per_communicator_bytes`]).
    pub reserved_bytes: u64,
    /// Bytes one communicator takes.
    pub per_communicator_bytes: u64,
    /// The limit; `None`: not limited.
    pub budget_bytes: Option<u64>,
    /// Communicators refused for lack of budget so far.
    pub refusals: u64,
    /// Device bytes leaked on purpose after a failed collective (process-wide).
    pub quarantined_bytes: u64,
}

impl MemoryBudget {
    /// `buffer_size_mb` as the communicators are configured (`hcclBufferSize`,
    /// `HCCL_BUFFSIZE`); `limit_bytes`: the most all of them may take together.
    pub fn new(buffer_size_mb: u32, limit_bytes: Option<u64>) -> Self {
        Self {
            buffer_size_mb,
            limit: limit_bytes,
            counters: Arc::default(),
        }
    }

    /// The configured buffer size in MB.
    pub fn buffer_size_mb(&self) -> u32 {
        self.buffer_size_mb
    }

    /// Bytes one communicator takes.
    pub fn per_communicator_bytes(&self) -> u64 {
        u64::from(self.buffer_size_mb) * 1024 * 1024 * BUFFERS_PER_COMMUNICATOR
    }

    /// Reserves one communicator's share, or refuses with the numbers.
    pub fn reserve(&self) -> Result<BudgetToken, HcclError> {
        let needed = self.per_communicator_bytes();
        let c = &self.counters;
        let mut current = c.reserved.load(Ordering::SeqCst);
        loop {
            if let Some(limit) = self.limit
                && current + needed > limit
            {
                c.refusals.fetch_add(1, Ordering::SeqCst);
                return Err(HcclError::MemoryBudgetExceeded {
                    needed,
                    reserved: current,
                    live: c.live.load(Ordering::SeqCst),
                    budget: limit,
                });
            }
            match c.reserved.compare_exchange(
                current,
                current + needed,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        c.live.fetch_add(1, Ordering::SeqCst);
        Ok(BudgetToken {
            bytes: needed,
            counters: Arc::clone(c),
        })
    }

    /// The counters now.
    pub fn stats(&self) -> HcclMemoryStats {
        HcclMemoryStats {
            live_communicators: self.counters.live.load(Ordering::SeqCst),
            reserved_bytes: self.counters.reserved.load(Ordering::SeqCst),
            per_communicator_bytes: self.per_communicator_bytes(),
            budget_bytes: self.limit,
            refusals: self.counters.refusals.load(Ordering::SeqCst),
            quarantined_bytes: super::ffi::quarantined_device_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1024 * 1024;

    #[test]
    fn each_communicator_takes_twice_the_buffer_size() {
        assert_eq!(
            MemoryBudget::new(200, None).per_communicator_bytes(),
            400 * MB
        );
    }

    #[test]
    fn a_communicator_past_the_budget_is_refused_with_the_numbers() {
        let budget = MemoryBudget::new(100, Some(500 * MB));
        let first = budget.reserve().unwrap();
        let _second = budget.reserve().expect("400 MB of 500 fit");
        match budget.reserve().unwrap_err() {
            HcclError::MemoryBudgetExceeded {
                needed,
                reserved,
                live,
                budget,
            } => {
                assert_eq!(
                    (needed, reserved, live, budget),
                    (200 * MB, 400 * MB, 2, 500 * MB)
                );
            }
            other => panic!("expected a budget refusal, got {other}"),
        }
        drop(first);
        let stats = budget.stats();
        assert_eq!(
            (stats.live_communicators, stats.reserved_bytes),
            (1, 200 * MB)
        );
        assert_eq!(stats.refusals, 1);
        budget
            .reserve()
            .expect("room again once an old communicator is gone");
    }

    #[test]
    fn without_a_limit_nothing_is_refused_but_everything_is_counted() {
        let budget = MemoryBudget::new(1, None);
        let tokens: Vec<_> = (0..5).map(|_| budget.reserve().unwrap()).collect();
        assert_eq!(budget.stats().reserved_bytes, 10 * MB);
        drop(tokens);
        assert_eq!(budget.stats().live_communicators, 0);
    }
}
