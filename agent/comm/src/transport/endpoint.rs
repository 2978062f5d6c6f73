//! [`Endpoint`]: listener, link pool, mailbox and accept loop of one process in a group.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::connection::{self, Connection, effective_buffer, tune};
use super::handshake::{self, HsError};
use super::iface::BindSpec;
use super::mailbox::Mailbox;
use super::rendezvous::{self, Sessions};
use crate::api::{CommError, ErrorContext};
use crate::auth::{self, Purpose};
use crate::bootstrap::RootInfo;
use crate::frame::DEFAULT_MAX_FRAME;

/// How an endpoint binds and authenticates.
#[derive(Clone)]
pub struct EndpointConfig {
    pub bind: BindSpec,
    /// Listener port; 0 picks a free one.
    pub port: u16,
    /// The group secret (never sent; see `crate::auth`).
    pub secret: Vec<u8>,
    /// Deadline for reaching a peer or the root and completing the handshake.
    pub connect_timeout: Duration,
    /// SO_SNDBUF/SO_RCVBUF for every link (None: kernel autotuning; also used when the
    /// kernel's `net.core.[rw]mem_max` is below the request).
    pub socket_buffer: Option<usize>,
    /// Largest accepted frame payload.
    pub max_frame: usize,
    /// The most a receive polls for its data before the task parks (default: `HCOMM_SPIN_US`
    /// microseconds, else [`DEFAULT_SPIN`]; zero never polls). Parking costs a thread
    /// wake-up per message, which dominates small-message latency; polling costs CPU, and
    /// where ranks outnumber cores it takes the core a peer needs. So polling yields the
    /// core at every turn and adapts: a receive polls only while recent receives waited
    /// no longer than this (`transport::spin`). Measured in docs/benchmarks.md.
    pub spin: Duration,
}

/// The environment variable that sets [`EndpointConfig::spin`], in microseconds.
pub const SPIN_ENV: &str = "HCOMM_SPIN_US";
/// [`EndpointConfig::spin`] unless `HCOMM_SPIN_US` says otherwise: a few small-message
/// round trips on loopback or within a rack. Against no polling, fixed 30 or 100 µs and
/// adaptive 50 µs, it was the fastest or within 6 % of it at 4 KiB for 2, 4 and 8 ranks on
/// 2 cores (agent/comm/bench/analysis.md, "4 KiB latency").
pub const DEFAULT_SPIN: Duration = Duration::from_micros(100);

impl std::fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("bind", &self.bind)
            .field("port", &self.port)
            .field("secret", &"<redacted>")
            .field("connect_timeout", &self.connect_timeout)
            .field("socket_buffer", &self.socket_buffer)
            .field("max_frame", &self.max_frame)
            .field("spin", &self.spin)
            .finish()
    }
}

impl EndpointConfig {
    pub fn new(bind: BindSpec, secret: impl Into<Vec<u8>>) -> Self {
        EndpointConfig {
            bind,
            port: 0,
            secret: secret.into(),
            connect_timeout: Duration::from_secs(10),
            socket_buffer: Some(4 << 20),
            max_frame: DEFAULT_MAX_FRAME,
            spin: std::env::var(SPIN_ENV)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .map_or(DEFAULT_SPIN, Duration::from_micros),
        }
    }
}

/// A refused handshake, kept for diagnosis (the refusing side's half of a named error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub category: &'static str,
    pub message: String,
}

/// Counters for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Links this endpoint dialled successfully.
    pub dialed: u64,
    /// Links this endpoint accepted successfully.
    pub accepted: u64,
    /// Handshakes refused (wrong secret, stale epoch, malformed).
    pub rejected: u64,
    /// Links currently open.
    pub open: usize,
}

pub(crate) struct Inner {
    pub id: u64,
    pub listen: SocketAddr,
    pub local_ip: IpAddr,
    pub local_desc: String,
    pub cfg: EndpointConfig,
    /// `cfg.socket_buffer` if the kernel allows it (see `effective_buffer`).
    buffer: Option<usize>,
    epoch: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Connection>>>,
    conns_changed: Notify,
    next_conn: AtomicU64,
    pub mail: Arc<Mailbox>,
    tasks: Mutex<Vec<AbortHandle>>,
    pub sessions: Sessions,
    rejections: Mutex<Vec<Rejection>>,
    dialed: AtomicU64,
    accepted: AtomicU64,
    rejected: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single map operation: a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One process's network identity in a group; shared (`Arc`) by all its communicators.
/// Dropping the last reference closes the listener and every link.
pub struct Endpoint {
    pub(crate) inner: Arc<Inner>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for t in lock(&self.inner.tasks).drain(..) {
            t.abort();
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Endpoint({:016x} at {})",
            self.inner.id, self.inner.local_desc
        )
    }
}

impl Endpoint {
    /// Binds the listener on the configured interface and starts accepting links.
    pub async fn bind(cfg: EndpointConfig) -> Result<Arc<Endpoint>, CommError> {
        let (ip, desc) = cfg.bind.resolve()?;
        let iface_err = |e: std::io::Error| CommError::Interface {
            spec: desc.clone(),
            reason: format!("cannot listen: {e}"),
        };
        let sock = if ip.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(iface_err)?;
        let buffer = effective_buffer(cfg.socket_buffer);
        if let Some(b) = buffer {
            // Accepted sockets inherit the receive buffer from the listener.
            let _ = sock.set_recv_buffer_size(b as u32);
            let _ = sock.set_send_buffer_size(b as u32);
        }
        sock.set_reuseaddr(true).map_err(iface_err)?;
        sock.bind(SocketAddr::new(ip, cfg.port))
            .map_err(iface_err)?;
        let listener = sock.listen(1024).map_err(iface_err)?;
        let listen = listener.local_addr().map_err(iface_err)?;
        let local_desc = match &cfg.bind {
            BindSpec::Addr(_) => listen.to_string(),
            BindSpec::Interface(_) => format!("{} port {}", desc, listen.port()),
        };
        let spin = cfg.spin;
        let inner = Arc::new(Inner {
            id: auth::random_u64(),
            listen,
            local_ip: ip,
            local_desc,
            cfg,
            buffer,
            epoch: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            conns_changed: Notify::new(),
            next_conn: AtomicU64::new(1),
            mail: Arc::new(Mailbox::with_spin(spin)),
            tasks: Mutex::new(Vec::new()),
            sessions: Sessions::default(),
            rejections: Mutex::new(Vec::new()),
            dialed: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(Arc::downgrade(&inner), listener));
        inner.track(accept.abort_handle());
        tracing::debug!(endpoint = inner.id, listen = %inner.listen, "endpoint bound");
        Ok(Arc::new(Endpoint { inner }))
    }

    /// A fresh bootstrap handle served by this endpoint (hand it to every rank out of band).
    pub fn create_root_info(&self) -> RootInfo {
        RootInfo {
            addr: self.inner.listen,
            id: auth::random(),
        }
    }

    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.listen
    }

    /// Interface and address, as named in errors.
    pub fn local_description(&self) -> &str {
        &self.inner.local_desc
    }

    /// The newest epoch this endpoint takes part in; links from older epochs are refused.
    pub fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    /// Raises the endpoint's epoch (never lowers it).
    pub fn advance_epoch(&self, epoch: u64) {
        self.inner.epoch.fetch_max(epoch, Ordering::AcqRel);
    }

    pub fn stats(&self) -> EndpointStats {
        EndpointStats {
            dialed: self.inner.dialed.load(Ordering::Relaxed),
            accepted: self.inner.accepted.load(Ordering::Relaxed),
            rejected: self.inner.rejected.load(Ordering::Relaxed),
            open: lock(&self.inner.conns).len(),
        }
    }

    /// Handshakes this endpoint refused, oldest first.
    pub fn rejections(&self) -> Vec<Rejection> {
        lock(&self.inner.rejections).clone()
    }

    /// Dials another endpoint directly (tests and diagnostics; communicators do this
    /// themselves at init).
    pub async fn dial(&self, addr: SocketAddr, epoch: u64) -> Result<u64, CommError> {
        let deadline = Instant::now() + self.inner.cfg.connect_timeout;
        let ctx = self.inner.ctx("dial", epoch, None, Some(addr));
        Ok(self.inner.dial(addr, epoch, deadline, ctx).await?.id)
    }
}

impl Inner {
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn track(&self, h: AbortHandle) {
        let mut t = lock(&self.tasks);
        t.retain(|h| !h.is_finished());
        t.push(h);
    }

    pub fn ctx(
        &self,
        op: &str,
        epoch: u64,
        peer_rank: Option<usize>,
        peer_addr: Option<SocketAddr>,
    ) -> ErrorContext {
        ErrorContext {
            op: op.to_string(),
            epoch,
            peer_rank,
            peer_addr: peer_addr.map(|a| a.to_string()),
            local: self.local_desc.clone(),
        }
    }

    pub(crate) fn reject(&self, category: &'static str, message: String) {
        tracing::warn!(endpoint = self.id, category, %message, "handshake refused");
        self.rejected.fetch_add(1, Ordering::Relaxed);
        let mut r = lock(&self.rejections);
        if r.len() >= 64 {
            r.remove(0);
        }
        r.push(Rejection { category, message });
    }

    /// Last refusal, if any, to explain a rendezvous or link timeout.
    pub fn last_rejection(&self) -> Option<Rejection> {
        lock(&self.rejections).last().cloned()
    }

    pub fn conn(&self, peer_endpoint: u64) -> Option<Arc<Connection>> {
        lock(&self.conns).get(&peer_endpoint).cloned()
    }

    /// Waits until a link to `peer_endpoint` exists (the peer dials us).
    pub async fn wait_conn(
        &self,
        peer_endpoint: u64,
        deadline: Instant,
    ) -> Option<Arc<Connection>> {
        loop {
            let notified = self.conns_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(c) = self.conn(peer_endpoint) {
                return Some(c);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.conn(peer_endpoint);
            }
        }
    }

    /// Installs an authenticated stream as the link to `peer_endpoint` and starts its reader.
    fn install(
        self: &Arc<Self>,
        stream: TcpStream,
        peer_endpoint: u64,
        peer_addr: SocketAddr,
    ) -> Arc<Connection> {
        let (rd, wr) = stream.into_split();
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Connection::new(id, wr));
        {
            let mut conns = lock(&self.conns);
            if let Some(existing) = conns.get(&peer_endpoint) {
                // Both sides dialled at once (two communicators built concurrently): keep
                // the first link; the duplicate closes when dropped.
                return existing.clone();
            }
            conns.insert(peer_endpoint, conn.clone());
        }
        self.mail.revive(peer_endpoint);
        let mail = self.mail.clone();
        let weak = Arc::downgrade(self);
        let max = self.cfg.max_frame;
        let reader = tokio::spawn(async move {
            let end = connection::read_loop(rd, peer_endpoint, mail.clone(), max).await;
            let reason = format!("link {id} to {peer_addr}: {end}");
            tracing::debug!(%reason, "link closed");
            if let Some(inner) = weak.upgrade() {
                let mut conns = lock(&inner.conns);
                if conns.get(&peer_endpoint).is_some_and(|c| c.id == id) {
                    conns.remove(&peer_endpoint);
                }
            }
            mail.peer_dead(peer_endpoint, reason);
        });
        self.track(reader.abort_handle());
        self.conns_changed.notify_waiters();
        conn
    }

    /// Opens a TCP stream from the local interface to `addr`, retrying refused connections
    /// until `deadline` (the peer may not be listening yet).
    pub async fn connect_stream(
        &self,
        addr: SocketAddr,
        deadline: Instant,
        ctx: &ErrorContext,
    ) -> Result<TcpStream, CommError> {
        let started = Instant::now();
        loop {
            let attempt = async {
                let sock = if addr.is_ipv4() {
                    TcpSocket::new_v4()?
                } else {
                    TcpSocket::new_v6()?
                };
                if let Some(b) = self.buffer {
                    let _ = sock.set_send_buffer_size(b as u32);
                    let _ = sock.set_recv_buffer_size(b as u32);
                }
                if self.local_ip.is_ipv4() == addr.is_ipv4() {
                    sock.bind(SocketAddr::new(self.local_ip, 0))?;
                }
                sock.connect(addr).await
            };
            let err = match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(s)) => {
                    tune(&s, self.buffer);
                    return Ok(s);
                }
                Ok(Err(e)) => e,
                Err(_) => std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", started.elapsed()),
                ),
            };
            let retry = matches!(
                err.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
            );
            if !retry || Instant::now() + Duration::from_millis(50) >= deadline {
                return Err(CommError::Unreachable {
                    ctx: Box::new(ctx.clone()),
                    source: err,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Dials and authenticates a peer link for `epoch`, or returns the existing one.
    pub async fn dial(
        self: &Arc<Self>,
        addr: SocketAddr,
        epoch: u64,
        deadline: Instant,
        ctx: ErrorContext,
    ) -> Result<Arc<Connection>, CommError> {
        let mut stream = self.connect_stream(addr, deadline, &ctx).await?;
        let listen = self.listen.to_string();
        let secret = self.cfg.secret.clone();
        let hs = handshake::connect(&mut stream, &secret, Purpose::Peer, self.id, &listen, epoch);
        let acc = match tokio::time::timeout_at(deadline, hs).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return Err(hs_error(e, ctx)),
            Err(_) => {
                return Err(CommError::Timeout {
                    ctx: Box::new(ErrorContext {
                        op: format!("{} (handshake)", ctx.op),
                        ..ctx
                    }),
                    after: self.cfg.connect_timeout,
                });
            }
        };
        if acc.endpoint == self.id {
            return Err(CommError::Protocol {
                ctx: Box::new(ctx),
                reason: "dialled our own endpoint (two ranks share one endpoint?)".into(),
            });
        }
        self.dialed.fetch_add(1, Ordering::Relaxed);
        Ok(self.install(stream, acc.endpoint, addr))
    }
}

/// Maps a handshake failure to the named error.
pub(crate) fn hs_error(e: HsError, ctx: ErrorContext) -> CommError {
    let ctx = Box::new(ctx);
    match e {
        HsError::Io(source) => match source.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                CommError::PeerClosed {
                    ctx,
                    detail: format!("during handshake: {source}"),
                }
            }
            _ => CommError::Io { ctx, source },
        },
        HsError::Frame(f) => CommError::Protocol {
            ctx,
            reason: f.to_string(),
        },
        HsError::Auth(reason) => CommError::Auth { ctx, reason },
        HsError::Stale { local, remote } => CommError::StaleEpoch {
            ctx,
            local_epoch: local,
            remote_epoch: remote,
        },
        HsError::Protocol(reason) => CommError::Protocol { ctx, reason },
    }
}

/// Handshakes in progress at once; more connections wait in the listen backlog, so a flood
/// of strangers cannot exhaust memory or tasks.
const MAX_HANDSHAKES: usize = 256;

async fn accept_loop(inner: std::sync::Weak<Inner>, listener: tokio::net::TcpListener) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, addr)) = listener.accept().await else {
            // EMFILE and friends: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Some(inner) = inner.upgrade() else { return };
        let task = tokio::spawn(handle_incoming(inner.clone(), stream, addr, permit));
        inner.track(task.abort_handle());
    }
}

async fn handle_incoming(
    inner: Arc<Inner>,
    mut stream: TcpStream,
    addr: SocketAddr,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    tune(&stream, inner.buffer);
    let secret = inner.cfg.secret.clone();
    let hs = handshake::accept(&mut stream, &secret, inner.id, inner.epoch());
    let connected = match tokio::time::timeout(inner.cfg.connect_timeout, hs).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let err = hs_error(e, inner.ctx("accept", inner.epoch(), None, Some(addr)));
            inner.reject(err.category(), err.to_string());
            return;
        }
        Err(_) => {
            inner.reject(
                "timeout",
                format!("handshake from {addr} did not complete in time"),
            );
            return;
        }
    };
    drop(permit);
    match connected.hello.purpose {
        Purpose::Peer => {
            inner.accepted.fetch_add(1, Ordering::Relaxed);
            let peer_addr = connected.hello.listen.parse().unwrap_or(addr);
            inner.install(stream, connected.hello.endpoint, peer_addr);
        }
        Purpose::Rendezvous => {
            rendezvous::serve(&inner, stream, addr, connected.epoch).await;
        }
    }
}
