//! How an endpoint binds and authenticates ([`EndpointConfig`]), and what it reports
//! ([`EndpointStats`], [`Rejection`]).

use std::sync::Arc;
use std::time::Duration;

use super::iface::BindSpec;
use crate::frame::DEFAULT_MAX_FRAME;
use crate::listen::{Guard, Limits};

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
    /// Admission of incoming connections (per-peer and total caps on handshakes in
    /// progress, see [`crate::listen`]). `None`: the endpoint makes its own with
    /// [`COMM_LIMITS`]; pass one shared guard to cap a node's endpoints together and read
    /// its counters.
    pub admission: Option<Arc<Guard>>,
    /// Received data the endpoint holds for receives not yet posted, at most; a link that
    /// would pass it is closed (`mailbox::MailboxFull`).
    pub max_queued_bytes: usize,
}

/// Admission of an endpoint's incoming connections: a slot is held only until the
/// handshake completes (authenticated links are bounded by the link table instead), so
/// the caps bound strangers. 16 handshakes per peer address are far more than one node's
/// members dial at once; 256 in total as before. A handshake gets at most 10 s after the
/// TCP accept (or the connect timeout, if shorter): the dialler's longer connect timeout
/// covers waiting for the listener to appear, not a slow handshake.
pub const COMM_LIMITS: Limits = Limits {
    per_peer: 16,
    total: 256,
    handshake: Duration::from_secs(10),
    idle: Duration::from_secs(10),
};

/// The environment variable that sets [`EndpointConfig::spin`], in microseconds.
pub const SPIN_ENV: &str = "HCOMM_SPIN_US";
/// [`EndpointConfig::spin`] unless `HCOMM_SPIN_US` says otherwise: a few small-message
/// round trips on loopback or within a rack. Against no polling, fixed 30 or 100 µs and
/// adaptive 50 µs, it was the fastest or within 6 % of it at 4 KiB for 2, 4 and 8 ranks on
/// 2 cores (docs/benchmarks/collectives-notes.md, "4 KiB latency").
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
            .field("max_queued_bytes", &self.max_queued_bytes)
            .field("admission", &self.admission.as_ref().map(|g| g.name()))
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
            admission: None,
            max_queued_bytes: super::mailbox::DEFAULT_MAX_QUEUED_BYTES,
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
