//! One communicator initialisation at a time per device, process-wide. Concurrent
//! `HcclCommInitRootInfo` / `HcclCreateSubCommConfig` calls on one device race for the same
//! device resources (notify IDs, buffers, ports from `HCCL_IF_BASE_PORT`); make-before-break
//! builds the next epoch while another may still be building, so the builds queue here.

use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex};

static BUSY: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static RELEASED: Condvar = Condvar::new();

/// Held while one communicator of `device` is being initialised.
#[derive(Debug)]
pub struct DeviceInitGuard {
    device: i32,
}

/// Waits until no other communicator of `device` is being initialised in this process.
pub fn lock_device(device: i32) -> DeviceInitGuard {
    let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
    while busy.contains(&device) {
        busy = RELEASED.wait(busy).unwrap_or_else(|e| e.into_inner());
    }
    busy.insert(device);
    DeviceInitGuard { device }
}

impl Drop for DeviceInitGuard {
    fn drop(&mut self) {
        BUSY.lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.device);
        RELEASED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Runs `threads` initialisations on the devices given; the most that overlapped.
    fn max_overlap(devices: &[i32]) -> usize {
        let now = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = devices
            .iter()
            .map(|&d| {
                let (now, max) = (Arc::clone(&now), Arc::clone(&max));
                std::thread::spawn(move || {
                    let _g = lock_device(d);
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(150));
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        max.load(Ordering::SeqCst)
    }

    #[test]
    fn inits_on_one_device_never_overlap() {
        assert_eq!(max_overlap(&[901, 901, 901, 901]), 1);
    }

    #[test]
    fn inits_on_different_devices_run_together() {
        assert!(max_overlap(&[911, 912, 913]) > 1);
    }
}
