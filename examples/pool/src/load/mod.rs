//! Steady load through the router, with a record of every request and a check of every
//! answer: the evidence that a pool scaled (or rolled weights) without failing a request
//! and without any member answering with weights it should not have.
//!
//! [`start`] runs `concurrency` request loops (closed loop, or paced to `rate` requests
//! per second in all) until the duration ends, `max_requests` were started, or
//! [`LoadRun::stop`] is called. Counters and records can be read at any time
//! ([`LoadRun::stats`], [`LoadRun::records`]); [`LoadRun::finish`] waits for the end.

pub mod digests;
pub mod stats;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::body::Bytes;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use digests::AllowedDigests;
pub use stats::{LoadStats, Outcome, PodStats, RequestRecord};

use crate::router::Dispatcher;
use stats::Aggregate;

/// What load to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Request loops running at once.
    pub concurrency: usize,
    /// Requests per second over all loops; `None`: each loop sends as soon as its last
    /// request ended.
    pub rate: Option<f64>,
    /// Stop starting requests after this long; `None`: until stopped.
    pub duration: Option<Duration>,
    /// Stop after starting this many requests (deterministic runs in tests).
    pub max_requests: Option<u64>,
    /// Deadline of one request, retries included.
    pub request_timeout: Duration,
    /// `tokens` of each generation request.
    pub tokens: u32,
    pub prompt: String,
    /// Records kept (counters count every request regardless).
    pub max_records: usize,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            concurrency: 8,
            rate: None,
            duration: None,
            max_requests: None,
            request_timeout: Duration::from_secs(10),
            tokens: 16,
            prompt: "hello".into(),
            max_records: 1_000_000,
        }
    }
}

/// The end result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub stats: LoadStats,
    pub records: Vec<RequestRecord>,
}

struct Shared {
    agg: Mutex<Aggregate>,
    started: AtomicU64,
    began: Instant,
    began_unix_ms: u64,
    max_records: usize,
}

impl Shared {
    fn agg(&self) -> MutexGuard<'_, Aggregate> {
        self.agg.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running load.
pub struct LoadRun {
    shared: Arc<Shared>,
    allowed: AllowedDigests,
    stop: watch::Sender<bool>,
    loops: Vec<JoinHandle<()>>,
}

/// Starts the load. `allowed` may be changed while it runs (keep a clone, or use
/// [`LoadRun::allowed`]).
pub fn start(dispatcher: Dispatcher, cfg: LoadConfig, allowed: AllowedDigests) -> LoadRun {
    let began = Instant::now();
    let shared = Arc::new(Shared {
        agg: Mutex::new(Aggregate::default()),
        started: AtomicU64::new(0),
        began,
        began_unix_ms: unix_ms(),
        max_records: cfg.max_records,
    });
    let (stop, stop_rx) = watch::channel(false);
    let body = Bytes::from(
        serde_json::to_vec(&serde_json::json!({"prompt": cfg.prompt, "tokens": cfg.tokens}))
            .expect("a request body serialises"),
    );
    let n = cfg.concurrency.max(1);
    // Each loop's share of the rate; loops start staggered so the rate is even.
    let pace = cfg
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(n as f64 / r));
    let end = cfg.duration.map(|d| began + d);
    let loops = (0..n)
        .map(|i| {
            let ctx = LoopCtx {
                shared: Arc::clone(&shared),
                dispatcher: dispatcher.clone(),
                allowed: allowed.clone(),
                stop: stop_rx.clone(),
                body: body.clone(),
                timeout: cfg.request_timeout,
                max_requests: cfg.max_requests,
                end,
                pace,
                first: began + pace.map(|p| p * i as u32 / n as u32).unwrap_or_default(),
            };
            tokio::spawn(ctx.run())
        })
        .collect();
    LoadRun {
        shared,
        allowed,
        stop,
        loops,
    }
}

impl LoadRun {
    /// Counters now (also while running).
    pub fn stats(&self) -> LoadStats {
        let mut s = self.shared.agg().snapshot();
        s.elapsed_s = self.shared.began.elapsed().as_secs_f64();
        s.inflight = self.shared.started.load(Ordering::Relaxed) - s.completed;
        s
    }

    /// Records of the requests ended so far, in the order they ended.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.shared.agg().records.clone()
    }

    /// Records from index `from` on (for incremental readers).
    pub fn records_since(&self, from: usize) -> Vec<RequestRecord> {
        self.shared
            .agg()
            .records
            .get(from..)
            .map(<[RequestRecord]>::to_vec)
            .unwrap_or_default()
    }

    /// The accepted digests (shared: changing it changes what the run checks).
    pub fn allowed(&self) -> &AllowedDigests {
        &self.allowed
    }

    /// When the run started, in ms since the Unix epoch.
    pub fn started_unix_ms(&self) -> u64 {
        self.shared.began_unix_ms
    }

    /// Stops starting requests; those in flight end on their own (within their timeout).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// True once every loop ended.
    pub fn is_finished(&self) -> bool {
        self.loops.iter().all(JoinHandle::is_finished)
    }

    /// Waits for the run to end (duration, `max_requests`, or [`LoadRun::stop`]).
    pub async fn finish(self) -> LoadReport {
        for l in self.loops {
            let _ = l.await;
        }
        let mut stats = self.shared.agg().snapshot();
        stats.elapsed_s = self.shared.began.elapsed().as_secs_f64();
        let records = std::mem::take(&mut self.shared.agg().records);
        LoadReport { stats, records }
    }
}

struct LoopCtx {
    shared: Arc<Shared>,
    dispatcher: Dispatcher,
    allowed: AllowedDigests,
    stop: watch::Receiver<bool>,
    body: Bytes,
    timeout: Duration,
    max_requests: Option<u64>,
    end: Option<Instant>,
    pace: Option<Duration>,
    first: Instant,
}

impl LoopCtx {
    async fn run(mut self) {
        let mut next = self.first;
        loop {
            if self.pace.is_some() {
                let wake = self.end.map_or(next, |e| next.min(e));
                tokio::select! {
                    _ = tokio::time::sleep_until(wake) => {}
                    _ = self.stop.wait_for(|s| *s) => return,
                }
            }
            if *self.stop.borrow() || self.end.is_some_and(|e| Instant::now() >= e) {
                return;
            }
            let id = self.shared.started.fetch_add(1, Ordering::Relaxed);
            if self.max_requests.is_some_and(|m| id >= m) {
                self.shared.started.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            let record = self.one(id).await;
            self.shared.agg().add(record, self.shared.max_records);
            if let Some(p) = self.pace {
                next = (next + p).max(Instant::now());
            }
        }
    }

    async fn one(&self, id: u64) -> RequestRecord {
        let t0 = Instant::now();
        let start_unix_ms = unix_ms();
        let d = self
            .dispatcher
            .send(self.body.clone(), t0 + self.timeout)
            .await;
        let latency_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let answer = d.answer.as_ref();
        let status = answer.map(|a| a.status);
        let body: Option<serde_json::Value> = answer
            .filter(|a| a.status == 200)
            .and_then(|a| serde_json::from_slice(&a.body).ok());
        let field = |k: &str| body.as_ref().and_then(|b| b.get(k));
        let digest = field("weights_digest")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let pod = field("pod")
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .or_else(|| answer.map(|a| a.endpoint.label()));
        let outcome = if !d.ok() {
            Outcome::Failed
        } else if self.allowed.allows(digest.as_deref()) {
            Outcome::Served
        } else {
            Outcome::WrongDigest
        };
        let error = match outcome {
            Outcome::Failed => d.error.clone().or_else(|| {
                d.attempts
                    .last()
                    .and_then(|a| a.error.clone())
                    .map(|e| format!("status {}: {e}", status.unwrap_or(0)))
            }),
            Outcome::WrongDigest => Some(format!(
                "digest {} not in {:?}",
                digest.as_deref().unwrap_or("(missing)"),
                self.allowed.snapshot().unwrap_or_default()
            )),
            Outcome::Served => None,
        };
        RequestRecord {
            id,
            start_ms: t0.duration_since(self.shared.began).as_secs_f64() * 1000.0,
            start_unix_ms,
            latency_ms,
            outcome,
            status,
            pod,
            digest,
            epoch: field("epoch").and_then(|v| v.as_u64()),
            comm: field("comm").and_then(|v| v.as_str()).map(str::to_owned),
            attempts: d.attempts.len() as u32,
            tried: d.attempts,
            error,
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
