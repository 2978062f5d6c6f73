//! [`HcclBackend`]: what the agent creates once per process and device; it enters epochs
//! and hands out their [`HcclCommunicator`]s (see `communicator`).
//!
//! All HCCL and ACL calls run on one worker thread per backend, bound once to the device with
//! `aclrtSetDevice` (ACL contexts are per thread); the async trait methods hand it jobs and
//! await the answer, so no tokio worker ever blocks in HCCL. The trait takes host buffers, so
//! each call stages through device memory (copy in, collective, copy out): correct, but it is
//! the slow path; inference engines that hold device tensors use `EpochComm::comm` directly
//! with `DeviceBuffer`s.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use super::HcclError;
use super::budget::{DEFAULT_BUFFER_SIZE_MB, HcclMemoryStats, MemoryBudget};
use super::communicator::{HcclCommunicator, Job};
use super::epoch::{EpochManager, EpochSettings, EpochSource};
use super::ffi::Api;
use super::search::LibrarySearch;
use super::slot::Epoched;
use super::types::HcclRootInfo;

/// How to create the backend.
#[derive(Debug, Clone)]
pub struct HcclBackendConfig {
    /// Where to find `libhccl.so` / `libascendcl.so`.
    pub search: LibrarySearch,
    /// Logical NPU id this process drives (after `ASCEND_VISIBLE_DEVICES`).
    pub device: i32,
    /// Group name; communicators are named `<group>-e<epoch>`.
    pub group: String,
    /// Per-operation deadline (stream synchronisation timeout).
    pub op_timeout: Duration,
    /// How long `HcclCommDestroy` may answer `HCCL_E_AGAIN` before we give up (and log a leak).
    pub destroy_deadline: Duration,
    /// How long to wait for a new epoch's communicator to be built.
    pub init_timeout: Duration,
    /// HCCL's own per-collective deadline, set as each communicator's `hcclExecTimeOut`
    /// (from the spec's `comm.execTimeoutSeconds`, like the `HCCL_EXEC_TIMEOUT` the operator
    /// puts in the worker's environment); `None`: whatever `HCCL_EXEC_TIMEOUT` says (1836 s
    /// by default). The connect deadline is HCCL's `HCCL_CONNECT_TIMEOUT` environment
    /// variable only: HCCL has no per-communicator setting for it.
    pub exec_timeout: Option<Duration>,
    /// `HCCL_BUFFSIZE` in MB, set as each communicator's `hcclBufferSize` and used to account
    /// its memory (twice this per communicator).
    pub buffer_size_mb: u32,
    /// The most HCCL buffer memory this process's communicators may hold together; a new
    /// epoch past it is refused with [`HcclError::MemoryBudgetExceeded`]. `None`: no limit
    /// (still counted, see [`HcclBackend::memory`]).
    pub memory_budget_bytes: Option<u64>,
}

impl HcclBackendConfig {
    /// Defaults: libraries from `ASCEND_HOME_PATH` and the standard places, 120 s per op,
    /// 30 s to destroy, 300 s to build an epoch, HCCL's exec timeout and 200 MB buffers, no
    /// memory limit.
    pub fn new(group: impl Into<String>, device: i32) -> Self {
        Self {
            search: LibrarySearch::from_env(),
            device,
            group: group.into(),
            op_timeout: Duration::from_secs(120),
            destroy_deadline: Duration::from_secs(30),
            init_timeout: Duration::from_secs(300),
            exec_timeout: None,
            buffer_size_mb: DEFAULT_BUFFER_SIZE_MB,
            memory_budget_bytes: None,
        }
    }
}

/// The HCCL backend of one process and device.
#[derive(Debug)]
pub struct HcclBackend {
    manager: Arc<EpochManager>,
    config: HcclBackendConfig,
    jobs: mpsc::Sender<Job>,
}

impl HcclBackend {
    /// Loads the libraries, `aclInit`s and binds the device. Fails at once, with
    /// [`HcclError::LibraryNotFound`] naming the library, each path tried and
    /// `ASCEND_HOME_PATH`, where no Ascend runtime is installed.
    pub fn create(config: HcclBackendConfig) -> Result<Self, HcclError> {
        let api = Api::load(&config.search)?;
        let unavailable = api.unavailable();
        let (hccl_path, acl_path) = api.paths();
        tracing::info!(
            hccl = hccl_path,
            acl = acl_path,
            ?unavailable,
            "loaded the Ascend runtime"
        );
        api.acl_init()?;
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let worker_api = Arc::clone(&api);
        let device = config.device;
        std::thread::Builder::new()
            .name(format!("hccl-dev{device}"))
            .spawn(move || {
                let _ = ready_tx.send(worker_api.bind_thread(device));
                for job in rx {
                    job();
                }
            })
            .expect("spawning a thread");
        ready_rx
            .recv()
            .map_err(|_| HcclError::BuilderPanicked { epoch: 0 })??;
        let settings = EpochSettings {
            group: config.group.clone(),
            device,
            op_timeout: config.op_timeout,
            destroy_deadline: config.destroy_deadline,
        };
        let budget = MemoryBudget::new(config.buffer_size_mb, config.memory_budget_bytes);
        let manager = EpochManager::new(api, settings)
            .with_budget(budget)
            .with_exec_timeout(config.exec_timeout);
        Ok(Self {
            manager: Arc::new(manager),
            config,
            jobs: tx,
        })
    }

    /// The epoch manager (prepare / switch / leave, live-handle count).
    pub fn epochs(&self) -> &Arc<EpochManager> {
        &self.manager
    }

    /// HCCL memory counters (live communicators, bytes held, budget, refusals, quarantined
    /// bytes), for metrics.
    pub fn memory(&self) -> HcclMemoryStats {
        self.manager.memory()
    }

    /// Health check: `HcclGetCommAsyncError` on the serving communicator, on the device
    /// thread. [`HcclError::AsyncError`] when HCCL reports one, and
    /// [`HcclError::CommunicatorAborted`] when a failed collective destroyed it: either way
    /// the epoch must be replaced. `Ok` when healthy or when no epoch serves yet.
    pub async fn health_check(&self) -> Result<(), HcclError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let manager = Arc::clone(&self.manager);
        let job: Job = Box::new(move || {
            let result = match manager.lock_current().as_ref() {
                Some(c) if c.comm().is_aborted() => Err(HcclError::CommunicatorAborted),
                Some(c) => c.comm().async_error(),
                None => Ok(()),
            };
            let _ = tx.send(result);
        });
        self.jobs
            .send(job)
            .map_err(|_| HcclError::BuilderPanicked { epoch: 0 })?;
        rx.await
            .map_err(|_| HcclError::BuilderPanicked { epoch: 0 })?
    }

    /// A handle on the communicator that serves now, however it got there (the worker
    /// library prepares and switches through [`HcclBackend::epochs`] so that the engine picks
    /// the safe point). `None` before the first switch. Like every epoch's handle it fails
    /// with a stale-epoch error once the process switches again.
    pub fn serving(&self) -> Option<HcclCommunicator> {
        let (epoch, rank, world) = {
            let current = self.manager.lock_current();
            let c = current.as_ref()?;
            (c.epoch(), c.comm().rank(), c.comm().world())
        };
        Some(HcclCommunicator {
            epoch,
            rank: rank as usize,
            world: world as usize,
            device: self.config.device,
            op_timeout: self.config.op_timeout,
            manager: Arc::clone(&self.manager),
            jobs: self.jobs.clone(),
        })
    }

    /// Root rank of a new epoch: the root info to hand to every member out of band.
    pub fn new_root_info(&self) -> Result<Box<HcclRootInfo>, HcclError> {
        self.manager.new_root_info()
    }

    /// Builds `epoch` in the background and, once built, switches to it at the next safe
    /// point; the returned communicator serves `epoch`. Handles of older epochs then fail with
    /// a stale-epoch error instead of running on the new membership.
    pub async fn enter_epoch(
        &self,
        epoch: u64,
        source: EpochSource,
    ) -> Result<HcclCommunicator, HcclError> {
        let (world, rank) = match &source {
            EpochSource::RootInfo { world, rank, .. } => (*world as usize, *rank as usize),
            EpochSource::Carve { base_ranks } => {
                (base_ranks.len(), usize::MAX) // rank resolved after the build
            }
        };
        let pending = self.manager.prepare(epoch, source);
        let manager = Arc::clone(&self.manager);
        let wait = self.config.init_timeout;
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(manager.switch(pending, wait));
        });
        rx.await
            .map_err(|_| HcclError::BuilderPanicked { epoch })??;
        let rank = if rank == usize::MAX {
            self.manager
                .lock_current()
                .as_ref()
                .map(|c| c.comm().rank() as usize)
                .unwrap_or(0)
        } else {
            rank
        };
        Ok(HcclCommunicator {
            epoch,
            rank,
            world,
            device: self.config.device,
            op_timeout: self.config.op_timeout,
            manager: Arc::clone(&self.manager),
            jobs: self.jobs.clone(),
        })
    }
}

#[cfg(test)]
mod tests;
