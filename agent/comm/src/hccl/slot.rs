//! The make-before-break state machine behind [`super::EpochManager`], independent of HCCL so
//! that it is tested with plain values: one serving item per epoch, the next one built on a
//! background thread, a switch at a safe point, and the old one retired in the background.

use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::HcclError;

/// Something that serves one epoch and must be torn down explicitly.
pub trait Epoched: Send + 'static {
    fn epoch(&self) -> u64;
    /// Tears down (for HCCL: synchronise the stream, `HcclCommDestroy` with retries).
    fn retire(self) -> Result<(), HcclError>;
}

/// An item being built in the background.
#[derive(Debug)]
pub struct Pending<T> {
    epoch: u64,
    handle: JoinHandle<Result<T, HcclError>>,
}

impl<T: Epoched> Pending<T> {
    /// Starts `build` on a named thread.
    pub fn spawn(
        epoch: u64,
        build: impl FnOnce() -> Result<T, HcclError> + Send + 'static,
    ) -> Self {
        let handle = std::thread::Builder::new()
            .name(format!("hccl-epoch-{epoch}"))
            .spawn(build)
            .expect("spawning a thread");
        Self { epoch, handle }
    }

    /// The epoch being built.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the build has finished (successfully or not).
    pub fn is_ready(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits up to `wait` for the build. A build that cannot finish in time is abandoned: its
    /// thread ends on its own (HCCL init has its own connect timeout) and the item, if any, is
    /// torn down by its `Drop`.
    pub fn join(self, wait: Duration) -> Result<T, HcclError> {
        let start = Instant::now();
        while !self.handle.is_finished() {
            if start.elapsed() >= wait {
                return Err(HcclError::Timeout {
                    what: format!("building epoch {}", self.epoch),
                    waited: wait,
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.handle
            .join()
            .map_err(|_| HcclError::BuilderPanicked { epoch: self.epoch })?
    }
}

/// The serving item and the ones being retired.
#[derive(Debug)]
pub struct Slot<T> {
    current: Mutex<Option<T>>,
    retiring: Mutex<Vec<JoinHandle<Result<(), HcclError>>>>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self {
            current: Mutex::new(None),
            retiring: Mutex::new(Vec::new()),
        }
    }
}

impl<T: Epoched> Slot<T> {
    /// The serving item, locked. Work on it runs while holding this guard, which is what makes
    /// [`Self::switch`] wait for a safe point (no operation in flight).
    pub fn lock(&self) -> MutexGuard<'_, Option<T>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The serving epoch.
    pub fn epoch(&self) -> Option<u64> {
        self.lock().as_ref().map(Epoched::epoch)
    }

    /// Make-before-break: refuses a stale epoch, waits up to `wait` for the build, swaps at
    /// the safe point, and retires the old item in the background.
    pub fn switch(&self, pending: Pending<T>, wait: Duration) -> Result<(), HcclError> {
        self.check_newer(pending.epoch())?;
        let next = pending.join(wait)?;
        let old = {
            let mut cur = self.lock();
            // Checked again under the lock: another switch may have won meanwhile.
            if let Some(c) = cur.as_ref()
                && next.epoch() <= c.epoch()
            {
                let (stale, serving) = (next.epoch(), c.epoch());
                drop(cur);
                self.retire(next);
                return Err(Self::stale(stale, serving));
            }
            cur.replace(next)
        };
        if let Some(old) = old {
            self.retire(old);
        }
        Ok(())
    }

    fn check_newer(&self, epoch: u64) -> Result<(), HcclError> {
        match self.epoch() {
            Some(cur) if epoch <= cur => Err(Self::stale(epoch, cur)),
            _ => Ok(()),
        }
    }

    fn stale(epoch: u64, serving: u64) -> HcclError {
        HcclError::InvalidArgument(format!(
            "stale epoch {epoch}: epoch {serving} is already serving"
        ))
    }

    /// Leaves: the serving item is retired and nothing replaces it.
    pub fn leave(&self) {
        let old = self.lock().take();
        if let Some(old) = old {
            self.retire(old);
        }
    }

    /// Retires `item` on a background thread.
    pub fn retire(&self, item: T) {
        let epoch = item.epoch();
        let handle = std::thread::Builder::new()
            .name(format!("hccl-retire-{epoch}"))
            .spawn(move || item.retire())
            .expect("spawning a thread");
        self.retiring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
    }

    /// Waits for every retirement so far; returns the first error.
    pub fn drain_retired(&self) -> Result<(), HcclError> {
        let handles = std::mem::take(&mut *self.retiring.lock().unwrap_or_else(|e| e.into_inner()));
        let mut first = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or(Err(HcclError::BuilderPanicked { epoch: 0 }));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A plain value standing in for a communicator: records its retirement.
    #[derive(Debug)]
    struct Item {
        epoch: u64,
        log: Arc<Mutex<Vec<u64>>>,
    }

    impl Epoched for Item {
        fn epoch(&self) -> u64 {
            self.epoch
        }
        fn retire(self) -> Result<(), HcclError> {
            self.log.lock().unwrap().push(self.epoch);
            Ok(())
        }
    }

    fn pending(epoch: u64, log: &Arc<Mutex<Vec<u64>>>) -> Pending<Item> {
        let log = Arc::clone(log);
        Pending::spawn(epoch, move || Ok(Item { epoch, log }))
    }

    const WAIT: Duration = Duration::from_secs(5);

    #[test]
    fn the_old_epoch_is_retired_only_after_the_new_one_serves() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let slot = Slot::default();
        slot.switch(pending(1, &log), WAIT).unwrap();
        slot.switch(pending(2, &log), WAIT).unwrap();
        slot.drain_retired().unwrap();
        assert_eq!(slot.epoch(), Some(2));
        assert_eq!(*log.lock().unwrap(), [1]);
        slot.leave();
        slot.drain_retired().unwrap();
        assert_eq!(slot.epoch(), None);
        assert_eq!(*log.lock().unwrap(), [1, 2]);
    }

    #[test]
    fn a_stale_epoch_is_refused_and_the_serving_one_is_kept() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let slot = Slot::default();
        slot.switch(pending(5, &log), WAIT).unwrap();
        let err = slot.switch(pending(5, &log), WAIT).unwrap_err();
        assert!(err.to_string().contains("stale epoch 5"), "{err}");
        assert!(slot.switch(pending(3, &log), WAIT).is_err());
        assert_eq!(slot.epoch(), Some(5));
    }

    #[test]
    fn the_switch_waits_for_the_operation_in_flight() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let slot = Arc::new(Slot::default());
        slot.switch(pending(1, &log), WAIT).unwrap();
        let in_flight = slot.lock(); // an operation holds epoch 1
        let done = Arc::new(AtomicBool::new(false));
        let (s, d, l) = (Arc::clone(&slot), Arc::clone(&done), Arc::clone(&log));
        let t = std::thread::spawn(move || {
            s.switch(pending(2, &l), WAIT).unwrap();
            d.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !done.load(Ordering::SeqCst),
            "switched under a running operation"
        );
        assert_eq!(in_flight.as_ref().map(Epoched::epoch), Some(1));
        drop(in_flight);
        t.join().unwrap();
        assert_eq!(slot.epoch(), Some(2));
    }

    #[test]
    fn a_build_that_does_not_finish_in_time_is_a_timeout_and_the_current_epoch_keeps_serving() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let slot = Slot::default();
        slot.switch(pending(1, &log), WAIT).unwrap();
        let l = Arc::clone(&log);
        let slow = Pending::spawn(2, move || {
            std::thread::sleep(Duration::from_millis(300));
            Ok(Item { epoch: 2, log: l })
        });
        let err = slot.switch(slow, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(err, HcclError::Timeout { .. }), "{err}");
        assert_eq!(slot.epoch(), Some(1));
    }

    #[test]
    fn a_failed_build_leaves_the_current_epoch_serving() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let slot = Slot::default();
        slot.switch(pending(1, &log), WAIT).unwrap();
        let failing =
            Pending::<Item>::spawn(2, || Err(HcclError::InvalidArgument("init failed".into())));
        assert!(slot.switch(failing, WAIT).is_err());
        assert_eq!(slot.epoch(), Some(1));
    }
}
