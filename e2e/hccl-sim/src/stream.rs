//! ACL streams: an ordered queue of tasks run by one thread per stream, like a device stream
//! runs kernels in order. Enqueueing returns at once; `aclrtSynchronizeStream(WithTimeout)`
//! waits for the queue to drain and reports the first task error since the last
//! synchronisation. A timed-out synchronisation leaves the tasks running: on the device they
//! would keep running too, which is exactly why their buffers must not be freed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::codes::{ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, ACL_SUCCESS};

/// A task: runs on the stream's thread, returns `ACL_SUCCESS` or the `aclError` to report.
pub type Task = Box<dyn FnOnce() -> i32 + Send>;

#[derive(Debug, Default)]
struct State {
    pending: usize,
    first_error: Option<i32>,
}

/// One stream.
pub struct Stream {
    pub device: i32,
    state: Mutex<State>,
    idle: Condvar,
    queue: Mutex<Option<mpsc::Sender<Task>>>,
}

impl Stream {
    fn new(device: i32) -> Arc<Self> {
        let (tx, rx) = mpsc::channel::<Task>();
        let stream = Arc::new(Self {
            device,
            state: Mutex::new(State::default()),
            idle: Condvar::new(),
            queue: Mutex::new(Some(tx)),
        });
        let worker = Arc::clone(&stream);
        std::thread::Builder::new()
            .name("hccl-sim-stream".into())
            .spawn(move || {
                for task in rx {
                    let code = task();
                    let mut st = worker.lock();
                    st.pending -= 1;
                    if code != ACL_SUCCESS && st.first_error.is_none() {
                        st.first_error = Some(code);
                    }
                    worker.idle.notify_all();
                }
            })
            .expect("spawning a stream thread");
        stream
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tasks enqueued and not finished.
    pub fn pending(&self) -> usize {
        self.lock().pending
    }

    /// Enqueues a task; false once the stream is destroyed.
    pub fn enqueue(&self, task: Task) -> bool {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = queue.as_ref() else {
            return false;
        };
        self.lock().pending += 1;
        if tx.send(task).is_err() {
            self.lock().pending -= 1;
            return false;
        }
        true
    }

    /// Waits for the queue to drain (`None`: forever); the first error since the last call,
    /// or `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`.
    pub fn synchronize(&self, timeout: Option<Duration>) -> i32 {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.lock();
        while st.pending > 0 {
            st = match deadline {
                None => self.idle.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
                    }
                    self.idle
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        st.first_error.take().unwrap_or(ACL_SUCCESS)
    }

    /// Stops accepting tasks; the thread ends after the queued ones.
    fn close(&self) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
static STREAMS: Mutex<Option<HashMap<usize, Arc<Stream>>>> = Mutex::new(None);

fn streams() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Arc<Stream>>>> {
    STREAMS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates a stream on `device`; its handle.
pub fn create(device: i32) -> usize {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    streams()
        .get_or_insert_with(HashMap::new)
        .insert(id, Stream::new(device));
    id
}

/// The stream behind a handle.
pub fn get(id: usize) -> Option<Arc<Stream>> {
    streams().as_ref()?.get(&id).cloned()
}

/// Destroys a stream; its pending task count (non-zero is the caller's bug), or `None` for an
/// unknown handle.
pub fn destroy(id: usize) -> Option<usize> {
    let stream = streams().as_mut()?.remove(&id)?;
    let pending = stream.pending();
    stream.close();
    Some(pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronize_reports_the_first_error_once_and_times_out_on_slow_tasks() {
        let id = create(0);
        let s = get(id).unwrap();
        assert!(s.enqueue(Box::new(|| 7)));
        assert!(s.enqueue(Box::new(|| 9)));
        assert_eq!(s.synchronize(None), 7);
        assert_eq!(s.synchronize(None), ACL_SUCCESS);
        assert!(s.enqueue(Box::new(|| {
            std::thread::sleep(Duration::from_millis(300));
            ACL_SUCCESS
        })));
        assert_eq!(
            s.synchronize(Some(Duration::from_millis(20))),
            ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
        );
        assert_eq!(s.synchronize(None), ACL_SUCCESS);
        assert_eq!(destroy(id), Some(0));
        assert!(get(id).is_none());
    }
}
