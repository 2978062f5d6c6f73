//! The [`Communicator`] implementation of [`TcpComm`]: argument checks (before any traffic),
//! algorithm choice, one tracing span per collective (group, epoch, rank, sizes, algorithm),
//! then the executor from `collectives`.

use tracing::Instrument;

use super::collectives as c;
use super::comm::TcpComm;
use crate::api::{Algorithm, CommError, Communicator, DataType, ReduceOp, VLayout};
use crate::schedule::select;

impl TcpComm {
    fn check_rank(&self, op: &str, what: &str, r: usize) -> Result<(), CommError> {
        if r >= self.world {
            return Err(CommError::invalid(
                op,
                format!("{what} {r} not below world size {}", self.world),
            ));
        }
        Ok(())
    }

    fn span(&self, op: &'static str, bytes: usize, algo: Algorithm) -> tracing::Span {
        tracing::debug_span!("collective", op, group = %self.group, epoch = self.epoch,
            rank = self.rank, world = self.world, bytes, algo = algo.name())
    }

    /// All-reduce with an explicit algorithm for this call (benchmarks, crossover measurement).
    pub async fn all_reduce_with(
        &self,
        buf: &mut [u8],
        dtype: DataType,
        rop: ReduceOp,
        algo: Algorithm,
    ) -> Result<(), CommError> {
        dtype.element_count("all_reduce", buf.len())?;
        let algo = select::all_reduce(algo, buf.len(), self.world);
        let op = self
            .begin("all_reduce", &[dtype.name(), rop.name(), algo.name()])
            .await?;
        let span = self.span("all_reduce", buf.len(), algo);
        let res = match algo {
            Algorithm::HalvingDoubling => {
                c::halving_doubling_all_reduce(&op, buf, dtype, rop)
                    .instrument(span)
                    .await
            }
            Algorithm::Tree => {
                c::tree_all_reduce(&op, buf, dtype, rop, self.seg_bytes)
                    .instrument(span)
                    .await
            }
            _ => {
                c::ring_all_reduce(&op, buf, dtype, rop, self.seg_bytes)
                    .instrument(span)
                    .await
            }
        };
        op.finish(res).await
    }

    /// Broadcast with an explicit algorithm for this call.
    pub async fn broadcast_with(
        &self,
        buf: &mut [u8],
        root: usize,
        algo: Algorithm,
    ) -> Result<(), CommError> {
        self.check_rank("broadcast", "root", root)?;
        let algo = select::rooted(algo, buf.len(), self.world);
        let op = self
            .begin("broadcast", &[&root.to_string(), algo.name()])
            .await?;
        let span = self.span("broadcast", buf.len(), algo);
        let res = match algo {
            Algorithm::Tree => c::tree_broadcast(&op, buf, root).instrument(span).await,
            _ => {
                c::chain_broadcast(&op, buf, root, self.seg_bytes)
                    .instrument(span)
                    .await
            }
        };
        op.finish(res).await
    }

    /// Reduce with an explicit algorithm for this call.
    pub async fn reduce_with(
        &self,
        buf: &mut [u8],
        dtype: DataType,
        rop: ReduceOp,
        root: usize,
        algo: Algorithm,
    ) -> Result<(), CommError> {
        dtype.element_count("reduce", buf.len())?;
        self.check_rank("reduce", "root", root)?;
        let algo = select::rooted(algo, buf.len(), self.world);
        let op = self
            .begin(
                "reduce",
                &[dtype.name(), rop.name(), &root.to_string(), algo.name()],
            )
            .await?;
        let span = self.span("reduce", buf.len(), algo);
        let res = match algo {
            Algorithm::Tree => {
                c::tree_reduce(&op, buf, dtype, rop, root)
                    .instrument(span)
                    .await
            }
            _ => {
                c::chain_reduce(&op, buf, dtype, rop, root, self.seg_bytes)
                    .instrument(span)
                    .await
            }
        };
        op.finish(res).await
    }

    /// All-gather with an explicit algorithm for this call (`Tree`: Bruck's, for small
    /// messages; `Ring`: segmented and pipelined).
    pub async fn all_gather_with(
        &self,
        send: &[u8],
        recv: &mut [u8],
        algo: Algorithm,
    ) -> Result<(), CommError> {
        if recv.len() != send.len() * self.world {
            return Err(CommError::invalid(
                "all_gather",
                format!(
                    "receive buffer is {} bytes, expected world size {} x {}",
                    recv.len(),
                    self.world,
                    send.len()
                ),
            ));
        }
        let algo = select::all_gather(algo, recv.len(), self.world);
        let op = self.begin("all_gather", &[algo.name()]).await?;
        let span = self.span("all_gather", send.len(), algo);
        let res = match algo {
            Algorithm::Tree => c::bruck_all_gather(&op, send, recv).instrument(span).await,
            _ => {
                c::ring_all_gather(&op, send, recv, self.seg_bytes)
                    .instrument(span)
                    .await
            }
        };
        op.finish(res).await
    }

    /// Reduce-scatter with an explicit algorithm for this call (`Tree`: a recursive-doubling
    /// all-reduce of the input, for small messages; `Ring`: segmented and pipelined).
    pub async fn reduce_scatter_with(
        &self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        rop: ReduceOp,
        algo: Algorithm,
    ) -> Result<(), CommError> {
        dtype.element_count("reduce_scatter", recv.len())?;
        if send.len() != recv.len() * self.world {
            return Err(CommError::invalid(
                "reduce_scatter",
                format!(
                    "send buffer is {} bytes, expected world size {} x {}",
                    send.len(),
                    self.world,
                    recv.len()
                ),
            ));
        }
        let algo = select::reduce_scatter(algo, send.len(), self.world);
        let op = self
            .begin("reduce_scatter", &[dtype.name(), rop.name(), algo.name()])
            .await?;
        let span = self.span("reduce_scatter", send.len(), algo);
        let res = match algo {
            Algorithm::Tree => {
                c::tree_reduce_scatter(&op, send, recv, dtype, rop, self.seg_bytes)
                    .instrument(span)
                    .await
            }
            _ => {
                c::ring_reduce_scatter(&op, send, recv, dtype, rop, self.seg_bytes)
                    .instrument(span)
                    .await
            }
        };
        op.finish(res).await
    }
}

impl Communicator for TcpComm {
    fn backend(&self) -> &'static str {
        "tcp"
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
        self.all_reduce_with(buf, dtype, op, self.algo).await
    }

    async fn all_gather(&self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        self.all_gather_with(send, recv, self.algo).await
    }

    async fn reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        rop: ReduceOp,
    ) -> Result<(), CommError> {
        self.reduce_scatter_with(send, recv, dtype, rop, self.algo)
            .await
    }

    async fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
        self.broadcast_with(buf, root, self.algo).await
    }

    async fn reduce(
        &self,
        buf: &mut [u8],
        dtype: DataType,
        rop: ReduceOp,
        root: usize,
    ) -> Result<(), CommError> {
        self.reduce_with(buf, dtype, rop, root, self.algo).await
    }

    async fn all_to_all(&self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        let n = self.world;
        if send.len() != recv.len() || !send.len().is_multiple_of(n) {
            return Err(CommError::invalid(
                "all_to_all",
                format!(
                    "send ({}) and receive ({}) must be equal and divisible by world size {n}",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        let m = send.len() / n;
        let regs: Vec<_> = (0..n).map(|i| i * m..(i + 1) * m).collect();
        let op = self.begin("all_to_all", &[]).await?;
        let span = self.span("all_to_all", send.len(), Algorithm::Auto);
        let res = c::all_to_all_regions(&op, send, &regs, recv, &regs)
            .instrument(span)
            .await;
        op.finish(res).await
    }

    async fn all_to_all_v(
        &self,
        send: &[u8],
        send_layout: &VLayout,
        recv: &mut [u8],
        recv_layout: &VLayout,
        dtype: DataType,
    ) -> Result<(), CommError> {
        let (n, es) = (self.world, dtype.size());
        let name = "all_to_all_v";
        let sregs = c::regions(name, send_layout, n, es, send.len(), false)?;
        let rregs = c::regions(name, recv_layout, n, es, recv.len(), true)?;
        if sregs[self.rank].len() != rregs[self.rank].len() {
            return Err(CommError::invalid(
                name,
                "this rank's send count to itself differs from its receive count from itself",
            ));
        }
        let op = self.begin(name, &[dtype.name()]).await?;
        let span = self.span(name, send.len(), Algorithm::Auto);
        let res = c::all_to_all_regions(&op, send, &sregs, recv, &rregs)
            .instrument(span)
            .await;
        op.finish(res).await
    }

    async fn send(&self, buf: &[u8], peer: usize, tag: u32) -> Result<(), CommError> {
        self.check_rank("send", "peer", peer)?;
        let op = self.begin_p2p("send", tag)?;
        let res = op.send(peer, buf).await;
        op.finish(res).await
    }

    async fn recv(&self, buf: &mut [u8], peer: usize, tag: u32) -> Result<(), CommError> {
        self.check_rank("recv", "peer", peer)?;
        let op = self.begin_p2p("recv", tag)?;
        let res = op.recv_into(peer, buf).await;
        op.finish(res).await
    }

    async fn barrier(&self) -> Result<(), CommError> {
        let op = self.begin("barrier", &[]).await?;
        let mut token = [0u8; 1];
        let res = c::tree_all_reduce(&op, &mut token, DataType::U8, ReduceOp::Max, 1)
            .instrument(self.span("barrier", 0, Algorithm::Tree))
            .await;
        op.finish(res).await
    }
}
