//! [`Inner`]: the shared state of one endpoint — its link pool, mailbox, rendezvous
//! sessions and counters — and how links are dialled, installed and awaited. The
//! [`Endpoint`](super::Endpoint) handle, the accept loop and rendezvous all work on it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::config::{EndpointConfig, Rejection};
use super::connection::{self, Connection, tune};
use super::handshake::{self, HsError};
use super::mailbox::Mailbox;
use super::sessions::Sessions;
use crate::api::{CommError, ErrorContext};
use crate::auth::Purpose;

pub(crate) struct Inner {
    pub id: u64,
    pub listen: SocketAddr,
    pub local_ip: IpAddr,
    pub local_desc: String,
    pub cfg: EndpointConfig,
    /// `cfg.socket_buffer` if the kernel allows it (see `effective_buffer`).
    pub(super) buffer: Option<usize>,
    pub(super) epoch: AtomicU64,
    pub(super) conns: Mutex<HashMap<u64, Arc<Connection>>>,
    pub(super) conns_changed: Notify,
    pub(super) next_conn: AtomicU64,
    pub mail: Arc<Mailbox>,
    pub(super) tasks: Mutex<Vec<AbortHandle>>,
    pub sessions: Sessions,
    pub(super) rejections: Mutex<Vec<Rejection>>,
    pub(super) dialed: AtomicU64,
    pub(super) accepted: AtomicU64,
    pub(super) rejected: AtomicU64,
    /// Admission of incoming connections until their handshake completes.
    pub(super) admission: Arc<crate::listen::Guard>,
}

/// Links one endpoint holds at most: one per peer endpoint, and a group has at most
/// `bootstrap::MAX_WORLD` ranks.
pub(crate) const MAX_LINKS: usize = crate::bootstrap::MAX_WORLD;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single map operation: a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub(super) fn track(&self, h: AbortHandle) {
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

    /// Installs an authenticated stream as the link to `peer_endpoint` and starts its reader,
    /// unless the endpoint holds [`MAX_LINKS`] links already (an authenticated peer inventing
    /// endpoint ids must not grow the table without bound).
    pub(super) fn install(
        self: &Arc<Self>,
        stream: TcpStream,
        peer_endpoint: u64,
        peer_addr: SocketAddr,
    ) -> Result<Arc<Connection>, CommError> {
        let (rd, wr) = stream.into_split();
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Connection::new(id, wr));
        {
            let mut conns = lock(&self.conns);
            if let Some(existing) = conns.get(&peer_endpoint) {
                // Both sides dialled at once (two communicators built concurrently): keep
                // the first link; the duplicate closes when dropped.
                return Ok(existing.clone());
            }
            if conns.len() >= MAX_LINKS {
                return Err(CommError::Limit {
                    ctx: Box::new(self.ctx("install link", self.epoch(), None, Some(peer_addr))),
                    reason: format!("{} links open, the most an endpoint holds", conns.len()),
                });
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
        Ok(conn)
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
                Ok(Ok(s)) if connected_to_itself(&s) => std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "nothing listens there (the socket connected to itself)",
                ),
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
        self.install(stream, acc.endpoint, addr)
    }
}

/// A dial to a port on this host where nothing listens can pick that very port as its
/// source port; Linux then connects the socket to itself (TCP simultaneous open). It must
/// count as a refusal to retry, not as a peer whose handshake reads our own hello back.
fn connected_to_itself(s: &TcpStream) -> bool {
    matches!((s.local_addr(), s.peer_addr()), (Ok(a), Ok(b)) if a == b)
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
