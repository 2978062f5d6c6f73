//! [`Session`]: what an inference engine holds for its life — the agent client, the
//! serving and prepared communicators ([`crate::epochs`]), the worker's endpoint, and the
//! load it reports. The engine's loop is: [`Session::prepare`] (waits for the agent's
//! placement of a newer epoch and builds its communicator beside the serving one),
//! [`Session::switch`] at a safe point of its choosing (the old communicator is destroyed
//! there), [`Session::report_load`] as its queue moves, and [`Session::drain`] on SIGTERM
//! or a `drain_requested` notice. Everything waits with a deadline.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hcomm_comm::hccl::HcclBackend;
use hcomm_comm::tcp::{Endpoint, TcpComm};
use hcomm_comm::{Communicator, CommunicatorExt, ReduceOp};
use hcomm_crds::local_api::{Assignment, WorkerBackend, WorkerComm, WorkerLoad};

use crate::client::{AgentClient, WatchStream};
use crate::comm::{self, EpochComm, Placement};
use crate::epochs::{EpochRefusal, Epochs};
use crate::error::{Error, Result};

/// How often the agent's assignment is read while waiting for a placement (a local socket
/// round trip).
const PLACEMENT_POLL: Duration = Duration::from_millis(50);

/// How long the HCCL switch may wait for the background build beyond what it took.
const HCCL_SWITCH_WAIT: Duration = Duration::from_secs(5);

/// One engine process's link to its agent and its communicators.
pub struct Session {
    client: AgentClient,
    epochs: Mutex<Epochs<EpochComm>>,
    /// The endpoint and the address it is bound at.
    endpoint: tokio::sync::Mutex<Option<Arc<Endpoint>>>,
    hccl: Mutex<Option<Arc<HcclBackend>>>,
    load: Mutex<WorkerLoad>,
    /// Serialises prepare and switch (the epoch rules are checked, then a build runs).
    turn: tokio::sync::Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Session {
    pub fn new(client: AgentClient) -> Session {
        Session {
            client,
            epochs: Mutex::new(Epochs::default()),
            endpoint: tokio::sync::Mutex::new(None),
            hccl: Mutex::new(None),
            load: Mutex::new(WorkerLoad::default()),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// The agent client (for `watch`, `weights_ready`, `serving`).
    pub fn client(&self) -> &AgentClient {
        &self.client
    }

    /// The member's assignment (an [`Error::AgentRefused`] until the agent verified it).
    pub async fn assignment(&self) -> Result<Assignment> {
        self.client.assignment().await
    }

    /// Opens the agent's notice stream.
    pub async fn watch(&self) -> Result<WatchStream> {
        self.client.watch().await
    }

    /// `serving`: the weights are loaded and the engine takes traffic.
    pub async fn serving(&self) -> Result<()> {
        self.client.serving().await
    }

    /// `cannot_serve`: what the engine needs before traffic (its communicator, say) failed
    /// for good; a member still joining is failed with `reason` and replaced.
    pub async fn cannot_serve(&self, reason: &str) -> Result<()> {
        self.client.cannot_serve(reason).await
    }

    /// Waits (up to `timeout`) until the agent places this worker in an epoch newer than
    /// the serving and prepared ones; returns the assignment carrying that placement.
    pub async fn next_placement(&self, timeout: Duration) -> Result<(Assignment, WorkerComm)> {
        let wait = async {
            loop {
                match self.client.assignment().await {
                    Ok(a) => {
                        if let Some(c) = a.comm.clone()
                            && lock(&self.epochs).wants(c.epoch)
                        {
                            return Ok((a, c));
                        }
                    }
                    // Not verified yet: the normal wait before a join.
                    Err(Error::AgentRefused { .. }) => {}
                    Err(e) => return Err(e),
                }
                tokio::time::sleep(PLACEMENT_POLL).await;
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| Error::Timeout {
                what: "placement in a newer epoch",
                after: timeout,
            })?
    }

    /// Waits for the next epoch's placement (up to `timeout`) and builds its communicator
    /// beside the serving one; every member of the epoch does the same at about the same
    /// time (the agents tell them together). Returns the prepared epoch. The serving
    /// communicator keeps serving until [`Session::switch`].
    pub async fn prepare(&self, timeout: Duration) -> Result<u64> {
        let _turn = self.turn.lock().await;
        let (assignment, placement) = self.next_placement(timeout).await?;
        let p = Placement::parse(&placement)?;
        lock(&self.epochs).check(p.epoch)?;
        // Members that moved on to a newer epoch never come to this one's rendezvous: the
        // build is dropped as soon as the agent says so.
        let built = tokio::select! {
            built = self.build(&assignment, &p) => built?,
            newer = self.placed_beyond(p.epoch) => {
                tracing::info!(epoch = p.epoch, newer, "epoch superseded while being built");
                return Err(EpochRefusal::Superseded { epoch: p.epoch, newer }.into());
            }
        };
        let replaced = lock(&self.epochs).prepare(p.epoch, built)?;
        if let Some(old) = replaced {
            tracing::info!(epoch = old.epoch, "a newer epoch replaced the prepared one");
        }
        tracing::info!(epoch = p.epoch, rank = p.rank, world = p.world, backend = ?p.backend, "epoch prepared");
        Ok(p.epoch)
    }

    /// Builds the placement's communicators (TCP, and HCCL beside it for `hccl`).
    async fn build(&self, assignment: &Assignment, p: &Placement) -> Result<EpochComm> {
        let hccl = match p.backend {
            WorkerBackend::Tcp => None,
            // First, as it needs no peer: a node without the runtime fails here at once.
            WorkerBackend::Hccl => Some(self.hccl_backend(assignment, p)?),
        };
        let ep = self.endpoint_for(p).await?;
        let tcp = comm::tcp(ep, p, &assignment.group).await?;
        Ok(match hccl {
            None => EpochComm::Tcp(tcp),
            Some(backend) => {
                let pending = comm::hccl_prepare(&backend, &tcp, p).await?;
                EpochComm::Hccl {
                    bootstrap: tcp,
                    pending: Some(pending),
                }
            }
        })
    }

    /// Returns once the agent places this worker in an epoch newer than `epoch` (never
    /// returns otherwise; failed reads are retried, as the build has its own deadline).
    async fn placed_beyond(&self, epoch: u64) -> u64 {
        loop {
            tokio::time::sleep(PLACEMENT_POLL).await;
            if let Ok(Some(c)) = self.client.assignment().await.map(|a| a.comm)
                && c.epoch > epoch
            {
                return c.epoch;
            }
        }
    }

    /// The safe point: the prepared communicator serves from now on and the old one is
    /// destroyed (collectives still running on it finish on their own handle first).
    pub async fn switch(&self) -> Result<u64> {
        let _turn = self.turn.lock().await;
        let hccl = lock(&self.hccl).clone();
        // An HCCL build is installed in the backend first; the epoch rules move only if it
        // succeeds, so a failed build leaves the old epoch serving.
        let pending = match lock(&self.epochs).prepared_mut() {
            None => return Err(EpochRefusal::NothingPrepared.into()),
            Some(EpochComm::Hccl { pending, .. }) => pending.take(),
            Some(EpochComm::Tcp(_)) => None,
        };
        if let (Some(pending), Some(backend)) = (pending, hccl) {
            let manager = Arc::clone(backend.epochs());
            let switched =
                tokio::task::spawn_blocking(move || manager.switch(pending, HCCL_SWITCH_WAIT))
                    .await
                    .map_err(|e| Error::Invalid(format!("HCCL switch task: {e}")))
                    .and_then(|r| r.map_err(Error::from));
            if let Err(e) = switched {
                // Its build is gone: the epoch must be prepared again.
                lock(&self.epochs).discard_prepared();
                return Err(e);
            }
        }
        let (epoch, old) = lock(&self.epochs).switch()?;
        if let Some(old) = old {
            tracing::info!(epoch = old.epoch, "old epoch's communicator destroyed");
        }
        tracing::info!(epoch, "switched");
        Ok(epoch)
    }

    /// The serving epoch and the prepared one.
    pub fn epochs(&self) -> (Option<u64>, Option<u64>) {
        let e = lock(&self.epochs);
        (e.serving_epoch(), e.prepared_epoch())
    }

    /// Ranks in the serving epoch (the same for its TCP and HCCL communicators).
    pub fn serving_world(&self) -> Result<usize> {
        Ok(lock(&self.epochs).serving()?.tcp().world_size())
    }

    /// The serving epoch's TCP communicator (the data path on `tcp`).
    pub fn serving_tcp(&self) -> Result<Arc<TcpComm>> {
        Ok(Arc::clone(lock(&self.epochs).serving()?.tcp()))
    }

    /// The HCCL backend, once an `hccl` epoch was prepared: engines holding device tensors
    /// run their collectives on `backend.epochs().lock_current()`.
    pub fn hccl(&self) -> Option<Arc<HcclBackend>> {
        lock(&self.hccl).clone()
    }

    /// Sum all-reduce of `buf` on the serving communicator: the TCP engine's, or on
    /// `backend: hccl` the HCCL one (staged through device memory; engines holding device
    /// tensors use [`Session::hccl`] directly).
    pub async fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        let serving = lock(&self.epochs)
            .serving()
            .map(|c| (c.backend(), Arc::clone(c.tcp())))?;
        match serving {
            (WorkerBackend::Tcp, c) => Ok(c.all_reduce_typed(buf, ReduceOp::Sum).await?),
            (WorkerBackend::Hccl, _) => {
                let comm = self
                    .hccl()
                    .and_then(|b| b.serving())
                    .ok_or(EpochRefusal::NothingServing)?;
                Ok(comm.all_reduce_typed(buf, ReduceOp::Sum).await?)
            }
        }
    }

    /// The serving communicator's health: on `backend: hccl`, `HcclGetCommAsyncError` (an
    /// error on the device that no call returned) and whether a failed collective aborted
    /// it; on `tcp` a failed collective already said so. `Ok` before the first switch.
    pub async fn health_check(&self) -> Result<()> {
        match self.hccl() {
            Some(b) => Ok(b.health_check().await?),
            None => Ok(()),
        }
    }

    /// Reports requests in flight and queued (keeps the draining flag).
    pub async fn report_load(&self, in_flight: u64, queue_depth: u64) -> Result<()> {
        let load = {
            let mut l = lock(&self.load);
            l.in_flight = in_flight;
            l.queue_depth = queue_depth;
            *l
        };
        self.client.report_load(load).await
    }

    /// Drain me: from now on the engine takes no new work ([`Session::draining`]), and the
    /// agent hears it with the current load; later [`Session::report_load`] calls are the
    /// drain's progress, down to zero in flight.
    pub async fn drain(&self) -> Result<()> {
        let load = {
            let mut l = lock(&self.load);
            l.draining = true;
            *l
        };
        self.client.report_load(load).await
    }

    /// Whether [`Session::drain`] was called.
    pub fn draining(&self) -> bool {
        lock(&self.load).draining
    }

    /// Leaves the domain: both communicators are destroyed (the HCCL ones through the
    /// backend) and the endpoint closed.
    pub async fn leave(&self) {
        let _turn = self.turn.lock().await;
        let gone = lock(&self.epochs).leave();
        if let Some(b) = lock(&self.hccl).as_ref() {
            b.epochs().leave();
        }
        *self.endpoint.lock().await = None;
        tracing::info!(communicators = gone.len(), "left the domain");
    }

    async fn endpoint_for(&self, p: &Placement) -> Result<Arc<Endpoint>> {
        let mut ep = self.endpoint.lock().await;
        if let Some(e) = ep.as_ref().filter(|e| e.listen_addr() == p.bind) {
            return Ok(Arc::clone(e));
        }
        let e = comm::endpoint(p).await?;
        *ep = Some(Arc::clone(&e));
        Ok(e)
    }

    fn hccl_backend(&self, a: &Assignment, p: &Placement) -> Result<Arc<HcclBackend>> {
        let mut h = lock(&self.hccl);
        if let Some(b) = h.as_ref() {
            return Ok(Arc::clone(b));
        }
        // The member's first process drives its first device (logical id).
        let device = a.processes.first().map_or(0, |pr| pr.device_id as i32);
        let b = Arc::new(comm::hccl_backend(&a.group, device, p)?);
        *h = Some(Arc::clone(&b));
        Ok(b)
    }
}
