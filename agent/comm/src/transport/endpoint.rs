//! [`Endpoint`]: listener, link pool, mailbox and accept loop of one process in a group.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::config::{COMM_LIMITS, EndpointConfig, EndpointStats, Rejection};
use super::connection::{effective_buffer, tune};
use super::handshake;
use super::iface::BindSpec;
use super::inner::{Inner, hs_error, lock};
use super::mailbox::Mailbox;
use super::rendezvous;
use super::sessions::Sessions;
use crate::api::CommError;
use crate::auth::{self, Purpose};
use crate::bootstrap::RootInfo;
use crate::listen::{Guard, ListenerCounts, Refusal, Slot};

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
        let max_queued = cfg.max_queued_bytes;
        let admission = cfg
            .admission
            .clone()
            .unwrap_or_else(|| Guard::new("comm", COMM_LIMITS));
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
            mail: Arc::new(Mailbox::with_spin(spin).with_max_queued_bytes(max_queued)),
            tasks: Mutex::new(Vec::new()),
            sessions: Sessions::default(),
            rejections: Mutex::new(Vec::new()),
            dialed: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            admission,
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

    /// The admission counters of the listener (connections refused by the caps or closed
    /// by the handshake deadline).
    pub fn admission(&self) -> ListenerCounts {
        self.inner.admission.counts()
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

async fn accept_loop(inner: std::sync::Weak<Inner>, listener: tokio::net::TcpListener) {
    loop {
        // Always accept, then admit or close: a full listener must not leave real peers
        // waiting in the backlog behind a stranger's idle connections.
        let Ok((stream, addr)) = listener.accept().await else {
            // EMFILE and friends: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Some(inner) = inner.upgrade() else { return };
        let Ok(slot) = inner.admission.admit(addr.ip()) else {
            continue; // dropped: the stranger sees a close
        };
        let task = tokio::spawn(handle_incoming(inner.clone(), stream, addr, slot));
        inner.track(task.abort_handle());
    }
}

async fn handle_incoming(inner: Arc<Inner>, mut stream: TcpStream, addr: SocketAddr, slot: Slot) {
    tune(&stream, inner.buffer);
    let secret = inner.cfg.secret.clone();
    let hs = handshake::accept(&mut stream, &secret, inner.id, inner.epoch());
    let deadline = inner
        .cfg
        .connect_timeout
        .min(inner.admission.limits().handshake);
    let connected = match tokio::time::timeout(deadline, hs).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let err = hs_error(e, inner.ctx("accept", inner.epoch(), None, Some(addr)));
            inner.reject(err.category(), err.to_string());
            return;
        }
        Err(_) => {
            inner.admission.count(Refusal::Deadline);
            inner.reject(
                "timeout",
                format!("handshake from {addr} did not complete in time"),
            );
            return;
        }
    };
    drop(slot);
    match connected.hello.purpose {
        Purpose::Peer => {
            inner.accepted.fetch_add(1, Ordering::Relaxed);
            let peer_addr = connected.hello.listen.parse().unwrap_or(addr);
            if let Err(e) = inner.install(stream, connected.hello.endpoint, peer_addr) {
                inner.reject(e.category(), e.to_string());
            }
        }
        Purpose::Rendezvous => {
            rendezvous::serve(&inner, stream, addr, connected.epoch).await;
        }
    }
}
