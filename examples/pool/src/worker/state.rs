//! What the worker knows and counts, shared by the HTTP handlers and the agent link.
//!
//! Admission (may a request start?) and the in-flight count live in ONE watch value, so
//! "drain requested" and "one more request admitted" are ordered: once the drain flag is
//! set no request is admitted, and every change (including the drain itself) wakes the
//! reporter that tells the agent.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde::Serialize;
use tokio::sync::watch;

use hcomm_crds::local_api::WorkerBackend;
use hcomm_worker::Assignment;

/// The digest a worker reports for a group without `spec.weights`.
pub const NO_WEIGHTS: &str = "none";

/// Admission state: requests in flight and whether a drain was requested.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Admission {
    pub inflight: u64,
    pub draining: bool,
}

/// The weights this worker serves, pinned at load time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedWeights {
    /// The real version directory (the agent's `current` symlink resolved), or `None` for
    /// a group without weights.
    pub dir: Option<PathBuf>,
    /// `sha256:<hex>` of the canonical manifest (what `spec.weights.digest` holds), or
    /// [`NO_WEIGHTS`].
    pub digest: String,
}

/// Where the weights load stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Loading {
    Idle,
    InProgress,
    Failed(String),
}

/// The outcome of asking to start a request.
pub enum Admit {
    /// Serve it; the guard counts it in flight until dropped.
    Accepted(InflightGuard),
    /// Weights (or the assignment) not there yet.
    NotReady,
    /// A drain was requested.
    Draining,
}

/// Counters and status served by `GET /stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerStats {
    pub served: u64,
    pub rejected_not_ready: u64,
    pub rejected_draining: u64,
    pub inflight: u64,
    pub weights_digest: Option<String>,
    pub draining: bool,
    pub epoch: Option<u64>,
    /// The worker's own communicator (`backend: hccl`).
    pub comm: CommStatus,
}

/// Where the worker's own communicator stands. Only `backend: hccl` builds one (see
/// `communicator`): on `tcp` the reference worker's requests run no collective of their own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CommStatus {
    /// The epoch whose communicator serves, once its check all-reduce passed.
    pub serving_epoch: Option<u64>,
    /// Switches to a checked communicator.
    pub switches: u64,
    /// Builds, switches, checks or health checks that failed.
    pub failures: u64,
    pub last_error: Option<String>,
}

/// What one `POST /generate` answer says about who served it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub group: String,
    pub rank: u32,
    pub epoch: u64,
    pub weights_digest: String,
    /// The data path it served on: `hccl` or `tcp`.
    pub comm: &'static str,
}

/// The worker's shared state.
pub struct WorkerState {
    pub pod: String,
    pub role: String,
    admission: watch::Sender<Admission>,
    assignment: Mutex<Option<Assignment>>,
    weights: OnceLock<LoadedWeights>,
    loading: Mutex<Loading>,
    served: AtomicU64,
    rejected_not_ready: AtomicU64,
    rejected_draining: AtomicU64,
    comm: watch::Sender<CommStatus>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WorkerState {
    pub fn new(pod: impl Into<String>, role: impl Into<String>) -> Arc<WorkerState> {
        Arc::new(WorkerState {
            pod: pod.into(),
            role: role.into(),
            admission: watch::channel(Admission::default()).0,
            assignment: Mutex::new(None),
            weights: OnceLock::new(),
            loading: Mutex::new(Loading::Idle),
            served: AtomicU64::new(0),
            rejected_not_ready: AtomicU64::new(0),
            rejected_draining: AtomicU64::new(0),
            comm: watch::channel(CommStatus::default()).0,
        })
    }

    /// Ready to serve: the assignment is known, the weights are loaded and, on
    /// `backend: hccl`, an HCCL communicator serves (checked by an all-reduce).
    pub fn is_ready(&self) -> bool {
        let backend = lock(&self.assignment).as_ref().map(|a| a.backend);
        self.weights.get().is_some()
            && match backend {
                None => false,
                Some(WorkerBackend::Tcp) => true,
                Some(WorkerBackend::Hccl) => self.comm.borrow().serving_epoch.is_some(),
            }
    }

    /// Waits until [`WorkerState::is_ready`] (woken by the communicator's progress; the
    /// weights and the assignment come before it is asked).
    pub async fn ready(&self) {
        let mut rx = self.comm.subscribe();
        while !self.is_ready() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// The group's data-path backend, once assigned.
    pub fn backend(&self) -> Option<WorkerBackend> {
        lock(&self.assignment).as_ref().map(|a| a.backend)
    }

    /// Records a switch to a checked communicator.
    pub fn comm_serving(&self, epoch: u64) {
        self.comm.send_modify(|c| {
            c.serving_epoch = Some(epoch);
            c.switches += 1;
        });
    }

    /// Records a failure of the communicator path (the serving one, if any, stays).
    pub fn comm_failed(&self, error: String) {
        self.comm.send_modify(|c| {
            c.failures += 1;
            c.last_error = Some(error);
        });
    }

    /// The communicator's state.
    pub fn comm(&self) -> CommStatus {
        self.comm.borrow().clone()
    }

    /// Admits a request or says why not, counting rejections.
    pub fn admit(self: &Arc<Self>) -> Admit {
        let ready = self.is_ready();
        let mut verdict = Admit::NotReady;
        self.admission.send_if_modified(|a| {
            if a.draining {
                verdict = Admit::Draining;
                false
            } else if !ready {
                false
            } else {
                a.inflight += 1;
                verdict = Admit::Accepted(InflightGuard {
                    state: Arc::clone(self),
                });
                true
            }
        });
        match &verdict {
            Admit::NotReady => {
                self.rejected_not_ready.fetch_add(1, Ordering::Relaxed);
            }
            Admit::Draining => {
                self.rejected_draining.fetch_add(1, Ordering::Relaxed);
            }
            Admit::Accepted(_) => {}
        }
        verdict
    }

    /// Stops admitting new work (the agent's `drain_requested`, or SIGTERM). Wakes the
    /// reporter even if the count did not change, so the agent hears the count promptly.
    pub fn request_drain(&self) {
        self.admission.send_modify(|a| a.draining = true);
    }

    /// Watches admission state (the in-flight reporter).
    pub fn subscribe(&self) -> watch::Receiver<Admission> {
        self.admission.subscribe()
    }

    /// Current admission state.
    pub fn admission(&self) -> Admission {
        *self.admission.borrow()
    }

    pub fn set_assignment(&self, a: Assignment) {
        *lock(&self.assignment) = Some(a);
    }

    /// The agent's `epoch_changed`.
    pub fn set_epoch(&self, epoch: u64) {
        if let Some(a) = lock(&self.assignment).as_mut() {
            a.epoch = epoch;
        }
    }

    pub fn assignment(&self) -> Option<Assignment> {
        lock(&self.assignment).clone()
    }

    /// Claims the one weights load: true if the caller should load now (nothing loaded,
    /// no load running; a failed load may be retried).
    pub fn begin_load(&self) -> bool {
        if self.weights.get().is_some() {
            return false;
        }
        let mut l = lock(&self.loading);
        if *l == Loading::InProgress {
            return false;
        }
        *l = Loading::InProgress;
        true
    }

    /// Records the end of a load started with [`WorkerState::begin_load`]. The first
    /// loaded weights are kept for the worker's life.
    pub fn finish_load(&self, result: Result<LoadedWeights, String>) {
        let mut l = lock(&self.loading);
        match result {
            Ok(w) => {
                let _ = self.weights.set(w);
                *l = Loading::Idle;
            }
            Err(e) => *l = Loading::Failed(e),
        }
    }

    /// The pinned weights, once loaded.
    pub fn weights(&self) -> Option<&LoadedWeights> {
        self.weights.get()
    }

    /// The last load failure, if the weights are not loaded.
    pub fn load_error(&self) -> Option<String> {
        match &*lock(&self.loading) {
            Loading::Failed(e) if self.weights.get().is_none() => Some(e.clone()),
            _ => None,
        }
    }

    /// Who serves (for the answer to `/generate`), once ready.
    pub fn identity(&self) -> Option<Identity> {
        let w = self.weights.get()?;
        let a = lock(&self.assignment).clone()?;
        let comm = match a.backend {
            WorkerBackend::Tcp => "tcp",
            WorkerBackend::Hccl => "hccl",
        };
        Some(Identity {
            group: a.group,
            rank: a.rank,
            epoch: a.epoch,
            weights_digest: w.digest.clone(),
            comm,
        })
    }

    /// Counts one request answered 200.
    pub fn count_served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> WorkerStats {
        let a = self.admission();
        WorkerStats {
            served: self.served.load(Ordering::Relaxed),
            rejected_not_ready: self.rejected_not_ready.load(Ordering::Relaxed),
            rejected_draining: self.rejected_draining.load(Ordering::Relaxed),
            inflight: a.inflight,
            weights_digest: self.weights.get().map(|w| w.digest.clone()),
            draining: a.draining,
            epoch: lock(&self.assignment).as_ref().map(|a| a.epoch),
            comm: self.comm(),
        }
    }
}

/// Counts one admitted request in flight until dropped (also when the client goes away
/// and the handler is cancelled).
pub struct InflightGuard {
    state: Arc<WorkerState>,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.state
            .admission
            .send_modify(|a| a.inflight = a.inflight.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready_state() -> Arc<WorkerState> {
        let s = WorkerState::new("w-0", "decode");
        s.set_assignment(Assignment {
            group: "g".into(),
            rank: 1,
            epoch: 3,
            ..Default::default()
        });
        assert!(s.begin_load());
        s.finish_load(Ok(LoadedWeights {
            dir: None,
            digest: NO_WEIGHTS.into(),
        }));
        s
    }

    #[test]
    fn nothing_is_admitted_before_the_weights_are_loaded() {
        let s = WorkerState::new("w-0", "decode");
        s.set_assignment(Assignment::default());
        assert!(matches!(s.admit(), Admit::NotReady));
        assert!(s.begin_load());
        assert!(!s.begin_load(), "one load at a time");
        s.finish_load(Err("boom".into()));
        assert_eq!(s.load_error().as_deref(), Some("boom"));
        assert!(s.begin_load(), "a failed load may be retried");
        assert_eq!(s.stats().rejected_not_ready, 1);
    }

    #[test]
    fn in_flight_follows_guards_and_a_drain_stops_admission() {
        let s = ready_state();
        let mut rx = s.subscribe();
        let Admit::Accepted(g1) = s.admit() else {
            panic!("ready state must admit")
        };
        let Admit::Accepted(g2) = s.admit() else {
            panic!("ready state must admit")
        };
        assert_eq!(rx.borrow_and_update().inflight, 2);
        s.request_drain();
        assert!(rx.has_changed().unwrap(), "a drain wakes the reporter");
        assert!(matches!(s.admit(), Admit::Draining));
        drop(g1);
        drop(g2);
        let st = s.stats();
        assert_eq!(
            (st.inflight, st.draining, st.rejected_draining),
            (0, true, 1)
        );
        assert!(!s.begin_load(), "loaded weights are pinned");
        s.set_epoch(9);
        assert_eq!(s.identity().unwrap().epoch, 9);
    }

    #[test]
    fn on_hccl_a_worker_is_ready_only_once_a_checked_communicator_serves() {
        let s = ready_state();
        assert_eq!(s.identity().unwrap().comm, "tcp");
        s.set_assignment(Assignment {
            backend: WorkerBackend::Hccl,
            ..s.assignment().unwrap()
        });
        assert!(
            !s.is_ready(),
            "weights loaded, but no HCCL communicator yet"
        );
        assert!(matches!(s.admit(), Admit::NotReady));
        s.comm_failed("epoch 1: check all-reduce timed out".into());
        assert!(!s.is_ready(), "a failed build serves nothing");
        s.comm_serving(2);
        assert!(s.is_ready());
        assert_eq!(s.identity().unwrap().comm, "hccl");
        let c = s.stats().comm;
        assert_eq!((c.serving_epoch, c.switches, c.failures), (Some(2), 1, 1));
        s.comm_failed("health check: async error".into());
        assert!(
            s.is_ready(),
            "the serving communicator stays until a newer one replaces it"
        );
    }
}
