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

    /// Connects to `addr` and completes the handshake for `purpose`, within `deadline`.
    /// A connection the acceptor closes before it answers ([`HsError::NotAdmitted`]) is
    /// tried again, as a refused connect is: a node's listener admits a bounded number of
    /// handshakes per peer address at once (`crate::listen`), and when every member of a
    /// wide group dials every other at an epoch, one node's members exceed that for a
    /// moment (eight members dialling eight took 64 slots of 16, and the refused ones
    /// failed their join). A refusal the acceptor states (wrong secret, stale epoch) is
    /// final.
    pub(crate) async fn connect_admitted(
        &self,
        addr: SocketAddr,
        deadline: Instant,
        ctx: &ErrorContext,
        purpose: Purpose,
        epoch: u64,
    ) -> Result<(TcpStream, handshake::Accepted), CommError> {
        let listen = self.listen.to_string();
        let mut pause = NOT_ADMITTED_PAUSE;
        loop {
            let mut stream = self.connect_stream(addr, deadline, ctx).await?;
            let hs = handshake::connect(
                &mut stream,
                &self.cfg.secret,
                purpose,
                self.id,
                &listen,
                epoch,
            );
            match tokio::time::timeout_at(deadline, hs).await {
                Ok(Ok(acc)) => return Ok((stream, acc)),
                Ok(Err(HsError::NotAdmitted(_))) if Instant::now() + pause < deadline => {
                    // Jittered, so the refused dialers of one node do not come back as one.
                    let jitter =
                        Duration::from_micros(u64::from(crate::auth::random::<1>()[0]) * 200);
                    tokio::time::sleep(pause + jitter).await;
                    pause = (pause * 2).min(NOT_ADMITTED_PAUSE_MAX);
                }
                Ok(Err(e)) => return Err(hs_error(e, ctx.clone())),
                Err(_) => {
                    return Err(CommError::Timeout {
                        ctx: Box::new(ErrorContext {
                            op: format!("{} (handshake)", ctx.op),
                            ..ctx.clone()
                        }),
                        after: self.cfg.connect_timeout,
                    });
                }
            }
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
        let (stream, acc) = self
            .connect_admitted(addr, deadline, &ctx, Purpose::Peer, epoch)
            .await?;
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

/// First pause before a dial the acceptor did not admit is tried again; it doubles up to
/// [`NOT_ADMITTED_PAUSE_MAX`].
const NOT_ADMITTED_PAUSE: Duration = Duration::from_millis(20);
const NOT_ADMITTED_PAUSE_MAX: Duration = Duration::from_millis(500);

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
        HsError::NotAdmitted(source) => CommError::PeerClosed {
            ctx,
            detail: format!(
                "before answering the handshake (not admitted: the listener's connection caps \
                 were full until the deadline, or it is stopping): {source}"
            ),
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
