//! An HTTP listener with admission and deadlines, for the metrics and probe endpoints of
//! the agent and the operator (feature `http`).
//!
//! `axum::serve` on a bare `TcpListener` keeps a connection as long as the client likes: a
//! client that opens many connections and sends nothing (or one byte now and then) holds
//! tasks and descriptors forever. [`GuardedListener`] admits every accepted connection
//! through a [`Guard`] (per-address and total caps, `hcomm_comm::listen`) and wraps it in
//! [`GuardedIo`], which fails the connection once it has moved no byte for the idle
//! deadline or has lived past its lifetime — hyper then closes it.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::listen::{Guard, Limits, Refusal, Slot};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// Admission of a metrics and probe endpoint: a scraper and the kubelet's probes keep a
/// connection or two each, so 8 per address are plenty. The total is high on purpose: the
/// kubelet's liveness probe shares this port, and a small total would let a few tenant
/// Pods (8 addresses at 8 each) fail it and restart the process; 1024 idle connections
/// cost a few MiB. A connection idle for 10 s is closed, and none lives past
/// [`SCRAPE_CONNECTION_LIFETIME`].
pub const SCRAPE_LIMITS: Limits = Limits {
    per_peer: 8,
    total: 1024,
    handshake: Duration::from_secs(10),
    idle: Duration::from_secs(10),
};
/// The most a metrics or probe connection lives (one byte now and then cannot hold a slot).
pub const SCRAPE_CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// A TCP listener whose connections are admitted by `guard` and bounded in time.
pub struct GuardedListener {
    inner: TcpListener,
    guard: Arc<Guard>,
    /// The most a connection lives, however busy.
    lifetime: Duration,
}

impl GuardedListener {
    pub fn new(inner: TcpListener, guard: Arc<Guard>, lifetime: Duration) -> GuardedListener {
        GuardedListener {
            inner,
            guard,
            lifetime,
        }
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = GuardedIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedIo, SocketAddr) {
        {
            loop {
                let (stream, peer) = match self.inner.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::debug!(listener = self.guard.name(), error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = self.guard.admit(peer.ip()) else {
                    continue; // dropped at once: over its share
                };
                let idle = self.guard.limits().idle;
                return (
                    GuardedIo::new(stream, slot, self.guard.clone(), idle, self.lifetime),
                    peer,
                );
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that fails once it is idle for `idle` or older than its lifetime.
pub struct GuardedIo {
    stream: TcpStream,
    _slot: Slot,
    guard: Arc<Guard>,
    idle: Duration,
    idle_timer: Pin<Box<Sleep>>,
    end_of_life: Pin<Box<Sleep>>,
}

impl GuardedIo {
    fn new(
        stream: TcpStream,
        slot: Slot,
        guard: Arc<Guard>,
        idle: Duration,
        lifetime: Duration,
    ) -> GuardedIo {
        GuardedIo {
            stream,
            _slot: slot,
            guard,
            idle,
            idle_timer: Box::pin(tokio::time::sleep(idle)),
            end_of_life: Box::pin(tokio::time::sleep(lifetime)),
        }
    }

    /// An error once a deadline has passed (registering the task's wake-up otherwise).
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let reason = if self.idle_timer.as_mut().poll(cx).is_ready() {
            Refusal::Idle
        } else if self.end_of_life.as_mut().poll(cx).is_ready() {
            Refusal::Deadline
        } else {
            return None;
        };
        self.guard.count(reason);
        Some(io::Error::new(io::ErrorKind::TimedOut, reason.to_string()))
    }

    fn moved(&mut self) {
        let next = Instant::now() + self.idle;
        self.idle_timer.as_mut().reset(next);
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.moved();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
