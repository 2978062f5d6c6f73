//! Progress and metrics of a fetch: counters the agent publishes as Prometheus metrics, and
//! an event callback it turns into Kubernetes Events and log lines. Updated by the fetch
//! workers; read at any time with [`Progress::snapshot`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::digest::Digest;

/// Something worth telling the operator about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncEvent {
    /// The manifest was fetched from `source` and matched the expected digest.
    ManifestVerified {
        source: SocketAddr,
        chunks: usize,
        bytes: u64,
        resumed_chunks: usize,
    },
    /// A source was connected and authenticated; `complete` if it holds the whole set.
    SourceConnected { source: SocketAddr, complete: bool },
    /// A chunk arrived and hashed right.
    ChunkVerified {
        index: usize,
        source: SocketAddr,
        bytes: u64,
    },
    /// A chunk from `source` did not hash to its digest; it is fetched again elsewhere.
    CorruptChunk {
        index: usize,
        chunk: Digest,
        source: SocketAddr,
        actual: Digest,
    },
    /// A source was given up; its outstanding chunks went back to the queue.
    SourceLost {
        source: SocketAddr,
        reason: String,
        requeued: usize,
    },
    /// All chunks verified and the set installed.
    Completed { bytes: u64, elapsed: Duration },
}

/// Counters of one source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStats {
    pub bytes: u64,
    pub chunks: u64,
    pub corrupt: u64,
    /// Why the source was given up, if it was.
    pub lost: Option<String>,
}

/// A consistent copy of the counters.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressSnapshot {
    pub total_chunks: usize,
    pub total_bytes: u64,
    pub chunks_verified: usize,
    /// Bytes received over the network and verified (excludes resumed chunks).
    pub bytes_fetched: u64,
    /// Chunks found already verified in staging (not fetched again).
    pub resumed_chunks: usize,
    pub corrupt_chunks: u64,
    pub sources_lost: u64,
    pub per_source: BTreeMap<SocketAddr, SourceStats>,
    pub elapsed: Duration,
}

impl ProgressSnapshot {
    /// Network throughput so far, bytes per second.
    pub fn throughput_bps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes_fetched as f64 / s
        } else {
            0.0
        }
    }
}

type Callback = Arc<dyn Fn(&SyncEvent) + Send + Sync>;

/// Shared progress of one fetch (clone freely; clones share counters).
#[derive(Clone)]
pub struct Progress {
    state: Arc<Mutex<ProgressSnapshot>>,
    started: Instant,
    callback: Option<Callback>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("state", &self.snapshot())
            .finish()
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl Progress {
    /// Counters only.
    pub fn new() -> Progress {
        Progress {
            state: Arc::new(Mutex::new(ProgressSnapshot {
                total_chunks: 0,
                total_bytes: 0,
                chunks_verified: 0,
                bytes_fetched: 0,
                resumed_chunks: 0,
                corrupt_chunks: 0,
                sources_lost: 0,
                per_source: BTreeMap::new(),
                elapsed: Duration::ZERO,
            })),
            started: Instant::now(),
            callback: None,
        }
    }

    /// Counters plus `callback` for every [`SyncEvent`] (called on fetch tasks: keep it
    /// quick and non-blocking).
    pub fn with_callback(callback: impl Fn(&SyncEvent) + Send + Sync + 'static) -> Progress {
        Progress {
            callback: Some(Arc::new(callback)),
            ..Progress::new()
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let mut s = self.state.lock().expect("progress lock").clone();
        s.elapsed = self.started.elapsed();
        s
    }

    pub(crate) fn record(&self, event: SyncEvent) {
        {
            let mut s = self.state.lock().expect("progress lock");
            match &event {
                SyncEvent::ManifestVerified {
                    chunks,
                    bytes,
                    resumed_chunks,
                    ..
                } => {
                    s.total_chunks = *chunks;
                    s.total_bytes = *bytes;
                    s.resumed_chunks = *resumed_chunks;
                    s.chunks_verified = *resumed_chunks;
                }
                SyncEvent::SourceConnected { source, .. } => {
                    s.per_source.entry(*source).or_default();
                }
                SyncEvent::ChunkVerified { source, bytes, .. } => {
                    s.chunks_verified += 1;
                    s.bytes_fetched += bytes;
                    let src = s.per_source.entry(*source).or_default();
                    src.bytes += bytes;
                    src.chunks += 1;
                }
                SyncEvent::CorruptChunk { source, .. } => {
                    s.corrupt_chunks += 1;
                    s.per_source.entry(*source).or_default().corrupt += 1;
                }
                SyncEvent::SourceLost { source, reason, .. } => {
                    s.sources_lost += 1;
                    s.per_source.entry(*source).or_default().lost = Some(reason.clone());
                }
                SyncEvent::Completed { .. } => {}
            }
        }
        if let Some(cb) = &self.callback {
            cb(&event);
        }
    }
}
