//! [`HcclCommunicator`]: one epoch's [`Communicator`] on the HCCL backend. Every call is a
//! job for the backend's device thread, staged through device memory (copy in, collective,
//! copy out); a handle of an epoch the process has left fails with a stale-epoch error.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use crate::api::{CommError, Communicator, DataType, ReduceOp, VLayout};

use super::HcclError;
use super::epoch::{EpochComm, EpochManager};
use super::ffi::{Api, DeviceBuffer};
use super::mapping::{hccl_data_type, hccl_reduce_op, reduction_data_type};
use super::slot::Epoched;
use super::types::HcclDataType;

/// Work for the backend's device thread (bound once to the device).
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// One epoch's communicator on the HCCL backend.
#[derive(Debug)]
pub struct HcclCommunicator {
    pub(super) epoch: u64,
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) device: i32,
    pub(super) op_timeout: Duration,
    pub(super) manager: Arc<EpochManager>,
    pub(super) jobs: mpsc::Sender<Job>,
}

/// Host bytes staged to the device and back.
struct Staged {
    send: DeviceBuffer,
    recv: DeviceBuffer,
}

impl HcclCommunicator {
    /// Runs `f` on the device thread against this epoch's communicator.
    async fn run<R, F>(&self, op: &'static str, f: F) -> Result<R, CommError>
    where
        R: Send + 'static,
        F: FnOnce(&EpochComm, &Arc<Api>, Duration) -> Result<R, HcclError> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let manager = Arc::clone(&self.manager);
        let (epoch, timeout) = (self.epoch, self.op_timeout);
        let job: Job = Box::new(move || {
            let guard = manager.lock_current();
            let result = match guard.as_ref() {
                Some(cur) if cur.epoch() == epoch => f(cur, manager.api(), timeout),
                Some(cur) => Err(HcclError::InvalidArgument(format!(
                    "stale epoch: this communicator serves epoch {epoch}, the process switched to {}",
                    cur.epoch()
                ))),
                None => Err(HcclError::InvalidArgument(format!(
                    "epoch {epoch} has left the domain"
                ))),
            };
            let _ = tx.send(result);
        });
        let fail = |e: HcclError| e.into_comm_error(op, self.epoch, self.device);
        self.jobs
            .send(job)
            .map_err(|_| fail(HcclError::BuilderPanicked { epoch: self.epoch }))?;
        rx.await
            .map_err(|_| fail(HcclError::BuilderPanicked { epoch: self.epoch }))?
            .map_err(fail)
    }

    fn stage(api: &Arc<Api>, data: &[u8], recv_len: usize) -> Result<Staged, HcclError> {
        let mut send = api.malloc(data.len())?;
        send.copy_from_host(data)?;
        Ok(Staged {
            send,
            recv: api.malloc(recv_len)?,
        })
    }

    fn elements(op: &str, len: usize, dtype: DataType) -> Result<u64, CommError> {
        Ok(dtype.element_count(op, len)? as u64)
    }
}

impl Communicator for HcclCommunicator {
    fn backend(&self) -> &'static str {
        "hccl"
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn epoch(&self) -> u64 {
        self.epoch
    }

    async fn all_reduce(
        &self,
        buf: &mut [u8],
        dtype: DataType,
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let count = Self::elements("all_reduce", buf.len(), dtype)?;
        if count == 0 {
            return Ok(());
        }
        let data = buf.to_vec();
        let out = self
            .run("all_reduce", move |c, api, t| {
                let ht = reduction_data_type(dtype, "HcclAllReduce")?;
                let mut s = Self::stage(api, &data, data.len())?;
                c.comm().all_reduce(
                    &s.send,
                    &mut s.recv,
                    count,
                    ht,
                    hccl_reduce_op(op),
                    c.stream(),
                    Some(t),
                )?;
                let mut out = data;
                s.recv.copy_to_host(&mut out)?;
                Ok(out)
            })
            .await?;
        buf.copy_from_slice(&out);
        Ok(())
    }

    async fn all_gather(&self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        if recv.len() != send.len() * self.world {
            return Err(CommError::invalid(
                "all_gather",
                "recv.len() must be world_size * send.len()",
            ));
        }
        if send.is_empty() {
            return Ok(());
        }
        let (data, recv_len) = (send.to_vec(), recv.len());
        let out = self
            .run("all_gather", move |c, api, t| {
                let mut s = Self::stage(api, &data, recv_len)?;
                c.comm().all_gather(
                    &s.send,
                    &mut s.recv,
                    data.len() as u64,
                    HcclDataType::Int8,
                    c.stream(),
                    Some(t),
                )?;
                let mut out = vec![0u8; recv_len];
                s.recv.copy_to_host(&mut out)?;
                Ok(out)
            })
            .await?;
        recv.copy_from_slice(&out);
        Ok(())
    }

    async fn reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: ReduceOp,
    ) -> Result<(), CommError> {
        if send.len() != recv.len() * self.world {
            return Err(CommError::invalid(
                "reduce_scatter",
                "send.len() must be world_size * recv.len()",
            ));
        }
        let count = Self::elements("reduce_scatter", recv.len(), dtype)?;
        if count == 0 {
            return Ok(());
        }
        let (data, recv_len) = (send.to_vec(), recv.len());
        let out = self
            .run("reduce_scatter", move |c, api, t| {
                let ht = reduction_data_type(dtype, "HcclReduceScatter")?;
                let mut s = Self::stage(api, &data, recv_len)?;
                c.comm().reduce_scatter(
                    &s.send,
                    &mut s.recv,
                    count,
                    ht,
                    hccl_reduce_op(op),
                    c.stream(),
                    Some(t),
                )?;
                let mut out = vec![0u8; recv_len];
                s.recv.copy_to_host(&mut out)?;
                Ok(out)
            })
            .await?;
        recv.copy_from_slice(&out);
        Ok(())
    }

    async fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
        if buf.is_empty() {
            return Ok(());
        }
        let data = buf.to_vec();
        let out = self
            .run("broadcast", move |c, api, t| {
                let mut d = api.malloc(data.len())?;
                d.copy_from_host(&data)?;
                c.comm().broadcast(
                    &mut d,
                    data.len() as u64,
                    HcclDataType::Int8,
                    root as u32,
                    c.stream(),
                    Some(t),
                )?;
                let mut out = data;
                d.copy_to_host(&mut out)?;
                Ok(out)
            })
            .await?;
        buf.copy_from_slice(&out);
        Ok(())
    }

    async fn reduce(
        &self,
        buf: &mut [u8],
        dtype: DataType,
        op: ReduceOp,
        root: usize,
    ) -> Result<(), CommError> {
        let count = Self::elements("reduce", buf.len(), dtype)?;
        if count == 0 {
            return Ok(());
        }
        let data = buf.to_vec();
        let out = self
            .run("reduce", move |c, api, t| {
                let ht = reduction_data_type(dtype, "HcclReduce")?;
                let hop = hccl_reduce_op(op);
                let mut s = Self::stage(api, &data, data.len())?;
                match c.comm().reduce(
                    &s.send,
                    &mut s.recv,
                    count,
                    ht,
                    hop,
                    root as u32,
                    c.stream(),
                    Some(t),
                ) {
                    // Releases without HcclReduce: all-reduce, and only the root keeps it.
                    Err(HcclError::Unavailable { .. }) => c.comm().all_reduce(
                        &s.send,
                        &mut s.recv,
                        count,
                        ht,
                        hop,
                        c.stream(),
                        Some(t),
                    )?,
                    other => other?,
                }
                let mut out = data;
                if c.comm().rank() as usize == root {
                    s.recv.copy_to_host(&mut out)?;
                }
                Ok(out)
            })
            .await?;
        buf.copy_from_slice(&out);
        Ok(())
    }

    async fn all_to_all(&self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        if send.len() != recv.len() || !send.len().is_multiple_of(self.world) {
            return Err(CommError::invalid(
                "all_to_all",
                "equal send/recv lengths divisible by world_size",
            ));
        }
        let layout = VLayout::packed(vec![send.len() / self.world; self.world]);
        self.all_to_all_v(send, &layout, recv, &layout.clone(), DataType::U8)
            .await
    }

    async fn all_to_all_v(
        &self,
        send: &[u8],
        send_layout: &VLayout,
        recv: &mut [u8],
        recv_layout: &VLayout,
        dtype: DataType,
    ) -> Result<(), CommError> {
        let n = self.world;
        if send_layout.counts.len() != n || recv_layout.counts.len() != n {
            return Err(CommError::invalid(
                "all_to_all_v",
                format!("layouts need {n} entries"),
            ));
        }
        if send_layout.extent() * dtype.size() > send.len()
            || recv_layout.extent() * dtype.size() > recv.len()
        {
            return Err(CommError::invalid(
                "all_to_all_v",
                "layout exceeds the buffer",
            ));
        }
        let to_u64 = |v: &[usize]| v.iter().map(|x| *x as u64).collect::<Vec<_>>();
        let (sc, sd) = (to_u64(&send_layout.counts), to_u64(&send_layout.displs));
        let (rc, rd) = (to_u64(&recv_layout.counts), to_u64(&recv_layout.displs));
        let (data, mut out) = (send.to_vec(), recv.to_vec());
        let ht = hccl_data_type(dtype);
        let out = self
            .run("all_to_all_v", move |c, api, t| {
                let mut s = Self::stage(api, &data, out.len())?;
                s.recv.copy_from_host(&out)?; // keep bytes outside the layout unchanged
                c.comm().all_to_all_v(
                    &s.send,
                    &sc,
                    &sd,
                    &mut s.recv,
                    &rc,
                    &rd,
                    ht,
                    c.stream(),
                    Some(t),
                )?;
                s.recv.copy_to_host(&mut out)?;
                Ok(out)
            })
            .await?;
        recv.copy_from_slice(&out);
        Ok(())
    }

    /// HCCL has no tags: messages to one peer match in issue order, which is also what the
    /// tag-ordered TCP backend guarantees; the tag is not checked here.
    async fn send(&self, buf: &[u8], peer: usize, _tag: u32) -> Result<(), CommError> {
        if buf.is_empty() {
            return Ok(());
        }
        let data = buf.to_vec();
        self.run("send", move |c, api, t| {
            let mut d = api.malloc(data.len())?;
            d.copy_from_host(&data)?;
            c.comm().send(
                &d,
                data.len() as u64,
                HcclDataType::Int8,
                peer as u32,
                c.stream(),
                Some(t),
            )
        })
        .await
    }

    async fn recv(&self, buf: &mut [u8], peer: usize, _tag: u32) -> Result<(), CommError> {
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        let out = self
            .run("recv", move |c, api, t| {
                let mut d = api.malloc(len)?;
                c.comm().recv(
                    &mut d,
                    len as u64,
                    HcclDataType::Int8,
                    peer as u32,
                    c.stream(),
                    Some(t),
                )?;
                let mut out = vec![0u8; len];
                d.copy_to_host(&mut out)?;
                Ok(out)
            })
            .await?;
        buf.copy_from_slice(&out);
        Ok(())
    }

    async fn barrier(&self) -> Result<(), CommError> {
        self.run("barrier", move |c, api, t| {
            match c.comm().barrier(c.stream(), Some(t)) {
                // Releases without HcclBarrier: a one-element all-reduce is a barrier.
                Err(HcclError::Unavailable { .. }) => {
                    let mut s = Self::stage(api, &[0u8; 4], 4)?;
                    let (ty, op) = (HcclDataType::Int32, hccl_reduce_op(ReduceOp::Sum));
                    c.comm()
                        .all_reduce(&s.send, &mut s.recv, 1, ty, op, c.stream(), Some(t))
                }
                other => other,
            }
        })
        .await
    }
}
