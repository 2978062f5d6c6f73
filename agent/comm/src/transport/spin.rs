//! How long a receive polls for its data before it parks.
//!
//! Parking costs a wake-up per message: the thread sleeps in epoll and, on a VM, its idle
//! vCPU halts, so the next message pays tens of µs before it is even read. Polling saves
//! that only when the data comes soon; when it does not (ranks outnumbering cores, a
//! bandwidth-bound transfer, a peer still computing) every µs polled is CPU taken from the
//! very peer being waited for. So the budget adapts, like an adaptive mutex: receives poll
//! while the recent ones waited no longer than the budget, and park at once otherwise.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How many recent waits the average mostly reflects (an exponential moving average with
/// weight 1/N): enough that one slow message does not switch polling off.
const AVERAGE_OVER: u64 = 8;
/// A single wait counts as at most this many budgets, so that one long wait (a peer that
/// joined late, a barrier before a long computation) moves the average by at most half a
/// budget.
const WAIT_CAP: u64 = 4;

#[derive(Debug, Default)]
pub struct SpinPolicy {
    /// The most a receive polls (`EndpointConfig::spin`); zero turns polling off.
    max: Duration,
    /// Moving average of how long receives waited, in ns.
    average_wait_ns: AtomicU64,
}

impl SpinPolicy {
    pub fn new(max: Duration) -> SpinPolicy {
        SpinPolicy {
            max,
            average_wait_ns: AtomicU64::new(0),
        }
    }

    /// How long the next receive should poll before it parks.
    pub fn budget(&self) -> Duration {
        let max_ns = self.max.as_nanos() as u64;
        if max_ns > 0 && self.average_wait_ns.load(Ordering::Relaxed) <= max_ns {
            self.max
        } else {
            Duration::ZERO
        }
    }

    /// A receive that did not find its data waiting got it after `waited` (by polling or
    /// parked; a parked wait includes the wake-up, which is what polling would save).
    /// Racing updates may lose a sample, which an average can afford.
    pub fn record(&self, waited: Duration) {
        let cap = WAIT_CAP * self.max.as_nanos() as u64;
        let w = (waited.as_nanos() as u64).min(cap);
        let avg = self.average_wait_ns.load(Ordering::Relaxed);
        let next = if w >= avg {
            avg + (w - avg) / AVERAGE_OVER
        } else {
            avg - (avg - w) / AVERAGE_OVER
        };
        self.average_wait_ns.store(next, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_micros(50);

    #[test]
    fn receives_whose_data_comes_soon_keep_polling() {
        let s = SpinPolicy::new(MAX);
        for _ in 0..100 {
            s.record(Duration::from_micros(20));
        }
        assert_eq!(s.budget(), MAX);
    }

    #[test]
    fn receives_that_wait_longer_than_the_budget_stop_polling_and_resume_when_waits_shorten() {
        let s = SpinPolicy::new(MAX);
        for _ in 0..30 {
            s.record(Duration::from_micros(150));
        }
        assert_eq!(s.budget(), Duration::ZERO);
        for _ in 0..30 {
            s.record(Duration::from_micros(10));
        }
        assert_eq!(s.budget(), MAX);
    }

    #[test]
    fn one_long_wait_does_not_switch_polling_off() {
        let s = SpinPolicy::new(MAX);
        for _ in 0..20 {
            s.record(Duration::from_micros(10));
        }
        s.record(Duration::from_secs(3));
        assert_eq!(s.budget(), MAX);
    }

    #[test]
    fn a_zero_maximum_never_polls() {
        let s = SpinPolicy::new(Duration::ZERO);
        s.record(Duration::ZERO);
        assert_eq!(s.budget(), Duration::ZERO);
    }
}
