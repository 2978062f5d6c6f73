//! Elastic epochs on HCCL, make-before-break.
//!
//! An `HcclComm` has a fixed membership: HCCL cannot add or remove a rank. So every membership
//! change (a new epoch) gets a *new* communicator, built beside the one that serves:
//!
//! 1. **Prepare** ([`EpochManager::prepare`]): a background thread binds the device, creates a
//!    fresh stream, and builds the next epoch's communicator, either
//!    - [`EpochSource::RootInfo`]: `HcclCommInitRootInfo(Config)` from a *new* root info that
//!      the new epoch's root made with `HcclGetRootInfo` and the agent handed out (works for
//!      grow and shrink on every CANN release), or
//!    - [`EpochSource::Carve`]: `HcclCreateSubCommConfig` over a subset of a pre-built *base*
//!      communicator sized for the pool's capacity (no rendezvous, so faster; needs a release
//!      that exports the symbol, and only members of the base can be used — growing past the
//!      base needs the root-info path).
//!
//!    Meanwhile the current epoch keeps running collectives.
//! 2. **Switch** ([`EpochManager::switch`]): waits (with a deadline) for the build, refuses
//!    stale epochs, then takes the lock every collective holds: that is the safe point, since
//!    no collective is in flight once the lock is ours. The new communicator becomes current.
//! 3. **Retire**: the old communicator's stream is synchronised and it is destroyed with
//!    `HcclCommDestroy`, retried on `HCCL_E_AGAIN` until a deadline, on a background thread.
//!    [`EpochManager::live_communicators`] counts live handles so a leak is visible.
//!
//! Every build first reserves its HCCL memory in the manager's [`MemoryBudget`] (refused with
//! [`HcclError::MemoryBudgetExceeded`] when over) and initialises under the device's init lock
//! (`init_lock`), so two builds on one device never run HCCL's init concurrently.
//!
//! Every rank of the new epoch switches at the same collective boundary: the agent tells all
//! members "switch after operation N" out of band (the same protocol as the TCP backend).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::HcclError;
use super::budget::{BudgetToken, DEFAULT_BUFFER_SIZE_MB, HcclMemoryStats, MemoryBudget};
use super::ffi::{Api, Comm, Stream};
use super::init_lock::lock_device;
use super::slot::{Epoched, Pending, Slot};
use super::types::{
    HCCL_COMM_CONFIG_BUFFER_SIZE, HCCL_COMM_CONFIG_COMM_NAME, HCCL_COMM_CONFIG_EXEC_TIMEOUT,
    HcclCommConfig, HcclRootInfo,
};

/// One epoch's communicator and the stream its collectives run on.
#[derive(Debug)]
pub struct EpochComm {
    epoch: u64,
    // Field order is drop order: the communicator goes before its stream, then the token.
    comm: Comm,
    stream: Stream,
    device: i32,
    op_timeout: Duration,
    destroy_deadline: Duration,
    _budget: BudgetToken,
}

impl EpochComm {
    /// The communicator.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }
    /// The stream collectives run on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
}

impl Epoched for EpochComm {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// On the retiring thread: bind the device, let in-flight work finish, then
    /// `HcclCommDestroy` (retried on `HCCL_E_AGAIN` until the deadline).
    fn retire(self) -> Result<(), HcclError> {
        let Self {
            epoch,
            comm,
            stream,
            device,
            op_timeout,
            destroy_deadline,
            _budget,
        } = self;
        let bound = comm.api().bind_thread(device);
        let synced = bound.and_then(|()| stream.synchronize(Some(op_timeout)));
        let destroyed = comm.destroy(destroy_deadline);
        drop(stream);
        tracing::info!(epoch, ok = destroyed.is_ok(), "retired HCCL communicator");
        synced.and(destroyed)
    }
}

/// How the next epoch's communicator is made.
#[derive(Debug)]
pub enum EpochSource {
    /// A new communicator from a root info (made by the new epoch's root rank).
    RootInfo {
        root: Box<HcclRootInfo>,
        world: u32,
        rank: u32,
    },
    /// A sub-communicator carved from the base communicator over these base ranks.
    Carve { base_ranks: Vec<u32> },
}

/// A communicator being built in the background.
pub type PendingEpoch = Pending<EpochComm>;

/// Settings of an [`EpochManager`].
#[derive(Debug, Clone)]
pub struct EpochSettings {
    /// Name prefix of the communicators (`<group>-e<epoch>`), e.g. the HcommGroup name.
    pub group: String,
    /// Device (logical id) this process drives.
    pub device: i32,
    /// Per-operation stream timeout.
    pub op_timeout: Duration,
    /// How long `HcclCommDestroy` may keep answering `HCCL_E_AGAIN`.
    pub destroy_deadline: Duration,
}

/// Owns the serving communicator, the optional base, and the retiring ones.
#[derive(Debug)]
pub struct EpochManager {
    api: Arc<Api>,
    settings: EpochSettings,
    slot: Slot<EpochComm>,
    base: Arc<Mutex<Option<EpochComm>>>,
    budget: MemoryBudget,
    exec_timeout: Option<Duration>,
}

impl EpochManager {
    /// A manager with no communicator yet; [`Self::prepare`] + [`Self::switch`] install the first.
    pub fn new(api: Arc<Api>, settings: EpochSettings) -> Self {
        Self {
            api,
            settings,
            slot: Slot::default(),
            base: Arc::new(Mutex::new(None)),
            budget: MemoryBudget::new(DEFAULT_BUFFER_SIZE_MB, None),
            exec_timeout: None,
        }
    }

    /// Accounts HCCL memory in `budget` (and configures communicators with its buffer size)
    /// instead of the default: 200 MB buffers, no limit.
    pub fn with_budget(mut self, budget: MemoryBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Configures communicators with this `hcclExecTimeOut` (`None`: HCCL's
    /// `HCCL_EXEC_TIMEOUT`). Whole seconds, rounded up.
    pub fn with_exec_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.exec_timeout = timeout;
        self
    }

    /// HCCL memory counters, for metrics.
    pub fn memory(&self) -> HcclMemoryStats {
        self.budget.stats()
    }

    /// `HcclGetCommAsyncError` on the serving communicator ([`HcclError::AsyncError`] when it
    /// reports one); `Ok` when no communicator serves. Call it on a thread bound to the device
    /// (the backend's [`super::HcclBackend::health_check`] does).
    pub fn check_async_error(&self) -> Result<(), HcclError> {
        match self.lock_current().as_ref() {
            Some(c) => c.comm().async_error(),
            None => Ok(()),
        }
    }

    /// The loaded libraries.
    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }

    /// Settings in force.
    pub fn settings(&self) -> &EpochSettings {
        &self.settings
    }

    /// HCCL communicators alive in this process (serving + base + building + retiring): a
    /// number that must not grow with the count of scale events.
    pub fn live_communicators(&self) -> usize {
        self.budget.stats().live_communicators
    }

    /// Root rank of a new epoch: makes the root info to hand to every member.
    pub fn new_root_info(&self) -> Result<Box<HcclRootInfo>, HcclError> {
        self.api.bind_thread(self.settings.device)?;
        self.api.get_root_info()
    }

    fn config(
        api: &Api,
        name: &str,
        buffer_size_mb: u32,
        exec_timeout: Option<Duration>,
    ) -> Box<HcclCommConfig> {
        let mut cfg = HcclCommConfig::new();
        // Only set what the release says it understands.
        let cap = api.config_capability().unwrap_or(0);
        if cap > HCCL_COMM_CONFIG_BUFFER_SIZE {
            cfg = cfg.with_buffer_size_mb(buffer_size_mb);
        }
        if cap > HCCL_COMM_CONFIG_COMM_NAME {
            cfg = cfg.with_comm_name(name);
        }
        if let Some(t) = exec_timeout
            && cap > HCCL_COMM_CONFIG_EXEC_TIMEOUT
        {
            let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
            cfg = cfg.with_exec_timeout_secs(i32::try_from(secs).unwrap_or(i32::MAX));
        }
        cfg
    }

    /// Starts building `epoch`'s communicator on a background thread; the current epoch keeps
    /// serving meanwhile.
    pub fn prepare(&self, epoch: u64, source: EpochSource) -> PendingEpoch {
        let api = Arc::clone(&self.api);
        let base = Arc::clone(&self.base);
        let budget = self.budget.clone();
        let exec_timeout = self.exec_timeout;
        let settings = self.settings.clone();
        Pending::spawn(epoch, move || {
            let token = budget.reserve()?;
            api.bind_thread(settings.device)?;
            let name = format!("{}-e{epoch}", settings.group);
            let stream = api.create_stream()?;
            let mb = budget.buffer_size_mb();
            let _init = lock_device(settings.device);
            let comm = match source {
                EpochSource::RootInfo { root, world, rank } => {
                    let cfg = Self::config(&api, &name, mb, exec_timeout);
                    api.comm_init_root_info(world, &root, rank, Some(&cfg))?
                }
                EpochSource::Carve { base_ranks } => {
                    let guard = base.lock().unwrap_or_else(|e| e.into_inner());
                    let parent = guard.as_ref().ok_or_else(|| {
                        HcclError::InvalidArgument("no base communicator to carve from".into())
                    })?;
                    let mut cfg = Self::config(&api, &name, mb, exec_timeout);
                    api.create_sub_comm(parent.comm(), &base_ranks, epoch, &mut cfg)?
                }
            };
            Ok(EpochComm {
                epoch,
                comm,
                stream,
                device: settings.device,
                op_timeout: settings.op_timeout,
                destroy_deadline: settings.destroy_deadline,
                _budget: token,
            })
        })
    }

    /// Installs a prepared communicator as the base that later epochs are carved from
    /// (typically built once for the pool's capacity).
    pub fn set_base(&self, pending: PendingEpoch, wait: Duration) -> Result<(), HcclError> {
        let comm = pending.join(wait)?;
        let old = self
            .base
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(comm);
        if let Some(old) = old {
            self.slot.retire(old);
        }
        Ok(())
    }

    /// Make-before-break switch: waits up to `wait` for the build, then swaps at the safe point
    /// (no collective in flight) and retires the old communicator in the background.
    pub fn switch(&self, pending: PendingEpoch, wait: Duration) -> Result<(), HcclError> {
        self.slot.switch(pending, wait)
    }

    /// Leaves the domain: the current communicator is retired and nothing replaces it.
    pub fn leave(&self) {
        self.slot.leave();
    }

    /// The serving communicator, locked: collectives run while holding this guard, which is
    /// what makes [`Self::switch`] wait for a safe point.
    pub fn lock_current(&self) -> MutexGuard<'_, Option<EpochComm>> {
        self.slot.lock()
    }

    /// Waits for every retiring communicator to be destroyed; returns the first error.
    pub fn drain_retired(&self) -> Result<(), HcclError> {
        self.slot.drain_retired()
    }
}

impl Drop for EpochManager {
    fn drop(&mut self) {
        self.slot.leave();
        if let Some(base) = self.base.lock().unwrap_or_else(|e| e.into_inner()).take() {
            self.slot.retire(base);
        }
        if let Err(e) = self.slot.drain_retired() {
            tracing::error!(error = %e, "retiring HCCL communicators failed");
        }
    }
}
