//! [`TcpComm`]: one rank's communicator at one epoch on the TCP backend — initialisation
//! (rendezvous, eager full mesh) and failure handling (a failed or cancelled
//! operation poisons the communicator and tells the peers, so nobody waits on it).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::config::CommConfig;
use crate::api::{Algorithm, CommError, ErrorContext};
use crate::auth;
use crate::frame::{Header, Kind};
use crate::transport::{Connection, Endpoint, EndpointConfig};

/// Tags at or above this are point-to-point (user tag in the low bits); below are the
/// sequence numbers of collectives.
pub(crate) const P2P_TAG: u64 = 1 << 63;

/// Where a rank of this communicator lives.
#[derive(Clone)]
pub(crate) struct Peer {
    pub endpoint: u64,
    pub addr: SocketAddr,
    /// None for ourselves.
    pub conn: Option<Arc<Connection>>,
}

/// One link of a communicator, for tests and diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub peer_rank: usize,
    pub peer_addr: SocketAddr,
    /// The endpoint-local connection id: unchanged across epochs when the link is reused.
    pub conn_id: u64,
}

/// One rank's communicator on the TCP backend. Cheap to share (`Arc`); operations take
/// `&self` and are serialised internally.
pub struct TcpComm {
    pub(crate) ep: Arc<Endpoint>,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) epoch: u64,
    pub(crate) ctx: u64,
    pub(crate) group: Arc<str>,
    pub(crate) peers: Vec<Peer>,
    pub(crate) algo: Algorithm,
    pub(crate) op_timeout: Duration,
    pub(crate) init_timeout: Duration,
    pub(crate) seg_bytes: usize,
    /// Collective sequence number; holding the lock serialises collectives.
    pub(crate) seq: tokio::sync::Mutex<u64>,
    failed: Mutex<Option<String>>,
    aborts: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    pub(super) ops: AtomicU64,
}

impl std::fmt::Debug for TcpComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpComm")
            .field("group", &self.group)
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("epoch", &self.epoch)
            .field("ctx", &format_args!("{:016x}", self.ctx))
            .finish()
    }
}

impl TcpComm {
    /// Binds a fresh endpoint and initialises on it.
    pub async fn init(ep_cfg: EndpointConfig, cfg: CommConfig) -> Result<TcpComm, CommError> {
        let ep = Endpoint::bind(ep_cfg).await?;
        Self::init_on(ep, cfg).await
    }

    /// Initialises rank `cfg.rank` of `cfg.world_size` at `cfg.epoch` on an existing
    /// endpoint: rendezvous at `cfg.root`, then links to every peer this endpoint is not yet
    /// linked to (the lower rank dials). Existing links are reused, which is how `grow` keeps
    /// the survivors' connections.
    pub async fn init_on(ep: Arc<Endpoint>, cfg: CommConfig) -> Result<TcpComm, CommError> {
        let span = tracing::info_span!("comm_init", group = %cfg.group, epoch = cfg.epoch,
            rank = cfg.rank, world = cfg.world_size);
        Self::init_inner(ep, cfg).instrument(span).await
    }

    async fn init_inner(ep: Arc<Endpoint>, cfg: CommConfig) -> Result<TcpComm, CommError> {
        cfg.validate()?;
        let algo = Algorithm::resolve(cfg.algorithm)
            .map_err(|e| CommError::invalid("init", e.to_string()))?;
        ep.advance_epoch(cfg.epoch);
        let inner = ep.inner.clone();
        let deadline = Instant::now() + cfg.init_timeout;
        let table = crate::transport::rendezvous_join(
            &inner,
            &cfg.root,
            cfg.world_size,
            cfg.rank,
            cfg.epoch,
            deadline,
        )
        .await?;
        for (i, a) in table.peers.iter().enumerate() {
            if let Some(j) = table.peers[..i]
                .iter()
                .position(|b| b.endpoint == a.endpoint)
            {
                return Err(CommError::invalid(
                    "init",
                    format!("ranks {j} and {i} share one endpoint; each rank needs its own"),
                ));
            }
        }
        let links = futures::future::try_join_all(table.peers.iter().enumerate().map(|(q, p)| {
            let inner = inner.clone();
            let epoch = cfg.epoch;
            let me = cfg.rank;
            async move {
                if q == me {
                    return Ok(None);
                }
                if let Some(c) = inner.conn(p.endpoint) {
                    return Ok(Some(c));
                }
                let connect_deadline = deadline.min(Instant::now() + inner.cfg.connect_timeout);
                if me < q {
                    let ctx = inner.ctx("connect", epoch, Some(q), Some(p.addr));
                    inner
                        .dial(p.addr, epoch, connect_deadline, ctx)
                        .await
                        .map(Some)
                } else {
                    inner
                        .wait_conn(p.endpoint, deadline)
                        .await
                        .map(Some)
                        .ok_or_else(|| {
                            let why = inner
                                .last_rejection()
                                .map(|r| format!("; last refused handshake: {}", r.message))
                                .unwrap_or_default();
                            CommError::Timeout {
                                ctx: Box::new(inner.ctx(
                                    &format!("connect (waiting for rank {q} to dial us{why})"),
                                    epoch,
                                    Some(q),
                                    Some(p.addr),
                                )),
                                after: cfg.init_timeout,
                            }
                        })
                }
            }
        }))
        .await?;
        let peers = table
            .peers
            .iter()
            .zip(links)
            .map(|(p, conn)| Peer {
                endpoint: p.endpoint,
                addr: p.addr,
                conn,
            })
            .collect();
        let ctx = auth::hash64(&[b"init", &cfg.root.id, &cfg.epoch.to_le_bytes()]);
        tracing::info!(group = %cfg.group, epoch = cfg.epoch, rank = cfg.rank,
            world = cfg.world_size, "communicator ready");
        Ok(TcpComm::assemble(ep, &cfg, algo, ctx, cfg.rank, peers))
    }

    pub(crate) fn assemble(
        ep: Arc<Endpoint>,
        cfg: &CommConfig,
        algo: Algorithm,
        ctx: u64,
        rank: usize,
        peers: Vec<Peer>,
    ) -> TcpComm {
        TcpComm {
            ep,
            rank,
            world: peers.len(),
            epoch: cfg.epoch,
            ctx,
            group: cfg.group.as_str().into(),
            peers,
            algo,
            op_timeout: cfg.op_timeout,
            init_timeout: cfg.init_timeout,
            seg_bytes: cfg.segment_bytes,
            seq: tokio::sync::Mutex::new(0),
            failed: Mutex::new(None),
            aborts: Mutex::new(Vec::new()),
            ops: AtomicU64::new(0),
        }
    }

    /// A config carrying this communicator's settings, for derived communicators.
    pub(crate) fn derived_config(&self, epoch: u64) -> CommConfig {
        let mut c = CommConfig::new(0, 0, self.ep.create_root_info(), epoch);
        c.group = self.group.to_string();
        c.algorithm = Some(self.algo);
        c.op_timeout = self.op_timeout;
        c.init_timeout = self.init_timeout;
        c.segment_bytes = self.seg_bytes;
        c
    }

    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.ep
    }

    /// The communicator id (distinct per epoch and per sub-communicator).
    pub fn context_id(&self) -> u64 {
        self.ctx
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algo
    }

    /// The links this communicator uses, by peer rank.
    pub fn links(&self) -> Vec<LinkInfo> {
        self.peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| {
                p.conn.as_ref().map(|c| LinkInfo {
                    peer_rank: r,
                    peer_addr: p.addr,
                    conn_id: c.id,
                })
            })
            .collect()
    }

    /// Address of a rank's endpoint.
    pub fn peer_addr(&self, rank: usize) -> Option<SocketAddr> {
        self.peers.get(rank).map(|p| p.addr)
    }

    /// Collectives started on this communicator.
    pub fn operations(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Why the communicator is unusable, if it is.
    pub fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn check_failed(&self, name: &str) -> Result<(), CommError> {
        if let Some(reason) = self.failure() {
            return Err(CommError::Aborted {
                ctx: Box::new(self.ctx_for(name, None)),
                reason: format!("unusable after an earlier failure: {reason}"),
            });
        }
        Ok(())
    }

    pub(crate) fn ctx_for(&self, op: &str, peer: Option<usize>) -> ErrorContext {
        ErrorContext {
            op: op.to_string(),
            epoch: self.epoch,
            peer_rank: peer,
            peer_addr: peer
                .and_then(|p| self.peers.get(p))
                .map(|p| p.addr.to_string()),
            local: self.ep.local_description().to_string(),
        }
    }

    /// Poisons the communicator and tells every peer (best effort, bounded) so that ranks
    /// waiting on us fail now instead of at their deadline.
    pub(super) fn poison(&self, tag: u64, blame: Option<usize>, reason: String) {
        {
            let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            if f.is_some() {
                return;
            }
            *f = Some(reason.clone());
        }
        tracing::warn!(group = %self.group, epoch = self.epoch, rank = self.rank, %reason,
            "communicator aborted");
        let blame_ep = blame
            .and_then(|r| self.peers.get(r))
            .map_or(0, |p| p.endpoint);
        let mut payload = blame_ep.to_le_bytes().to_vec();
        payload.extend_from_slice(format!("rank {} aborted: {reason}", self.rank).as_bytes());
        for p in &self.peers {
            let Some(conn) = p.conn.clone() else { continue };
            let h = Header::new(Kind::Abort, self.epoch, self.ctx, tag, payload.len());
            let payload = payload.clone();
            let task = tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.write_frame(h, &payload))
                    .await;
            });
            self.aborts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(task);
        }
    }

    /// Waits (bounded) until the abort notices are on the wire, so that a process exiting
    /// right after a failure still tells its peers why.
    pub(super) async fn flush_aborts(&self) {
        let tasks: Vec<_> =
            std::mem::take(&mut *self.aborts.lock().unwrap_or_else(|p| p.into_inner()));
        let _ = futures::future::join_all(tasks).await;
    }
}

impl Drop for TcpComm {
    fn drop(&mut self) {
        self.ep.inner.mail.forget_ctx(self.ctx);
    }
}
