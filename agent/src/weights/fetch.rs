//! The joiner side: fetch a weights set by manifest digest from a list of sources and
//! install it atomically. The policy lives in `schedule` (pure); this file drives the
//! fetch, `worker` talks to one source, `conn` opens authenticated connections.
//!
//! 1. Manifest: asked of each source in turn until one returns bytes that hash to the
//!    requested digest and parse as a canonical manifest.
//! 2. The store preallocates (or resumes) the staging files; already-verified chunks are
//!    not fetched again.
//! 3. One worker per source, all at once: it keeps `parallelism` requests in flight (to a
//!    fellow joiner `partial_parallelism`), taking the next chunk from the shared
//!    scheduler whenever a slot frees (work stealing), hashes every chunk and writes it
//!    in place. Partial sources (other
//!    joiners) are polled for their `Have` bitmap. A worker that fails (refused, reset,
//!    timed out, too many corrupt chunks) gives its chunks back and the others carry on.
//! 4. When every chunk is verified: fsync, rename staging → `versions/<hex>`, swap
//!    the request's link (`FetchRequest::link`). If sources run out first: [`WeightsError::NoSources`] listing them.
//!
//! Every network wait has a deadline ([`Timeouts`]); on top, a fetch that makes no
//! progress for `Timeouts::stall` ends with [`WeightsError::Timeout`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::bitset::ChunkBits;
use super::conn::{open, read_response, send, unexpected};
use super::digest::Digest;
use super::error::{Result, SourceFailure, Subject, WeightsError, blocking_failed};
use super::manifest::Manifest;
use super::progress::{Progress, ProgressSnapshot, SyncEvent};
use super::protocol::{Request, Response};
use super::request::Ctx;
pub use super::request::{FetchRequest, Timeouts};
use super::schedule::{Scheduler, Swarm};
use super::store::WeightSet;
use super::worker::worker;

/// The outcome of a successful fetch.
#[derive(Debug, Clone)]
pub struct FetchReport {
    pub digest: Digest,
    /// The installed version directory (what the request's link now points to).
    pub path: PathBuf,
    pub progress: ProgressSnapshot,
}

/// Fetches `req.manifest_digest`, installs it and points `req.link` at it.
pub async fn fetch(mut req: FetchRequest, progress: Progress) -> Result<FetchReport> {
    let digest = req.manifest_digest;
    let store = req.dest.clone();
    if store.is_complete(&digest) {
        store.activate(&digest, &req.link)?;
        let path = store.version_dir(&digest);
        return Ok(FetchReport {
            digest,
            path,
            progress: progress.snapshot(),
        });
    }
    let mut tried = Vec::new();
    let (manifest, bytes, from) = fetch_manifest(&req, &mut tried).await?;
    let (set, resumed) = blocking({
        let store = store.clone();
        move || store.begin(manifest, bytes)
    })
    .await?;
    progress.record(SyncEvent::ManifestVerified {
        source: from,
        chunks: set.table.len(),
        bytes: set.table.unique_bytes(),
        resumed_chunks: resumed,
    });
    tracing::info!(weights = %digest, chunks = set.table.len(), resumed, sources = req.sources.len(), "fetching weights");
    let n = set.table.len();
    let held = held_bits(&set);
    let more = req.more_sources.take();
    let swarm = Swarm {
        sources: req.sources.iter().map(SocketAddr::ip).collect(),
        own: req.bind,
        place: req.place,
        seed: rand::random(),
    };
    let ctx = Arc::new(Ctx {
        sched: Mutex::new(Scheduler::new(n, &held, swarm)),
        req,
        set,
        changed: Notify::new(),
        progress: progress.clone(),
        last_progress: Mutex::new(Instant::now()),
    });
    run_workers(&ctx, tried, more).await?;
    let set = ctx.set.clone();
    let path = blocking(move || store.finalize(&set)).await?;
    ctx.req.dest.activate(&digest, &ctx.req.link)?;
    let snap = progress.snapshot();
    progress.record(SyncEvent::Completed {
        bytes: snap.bytes_fetched,
        elapsed: snap.elapsed,
    });
    tracing::info!(weights = %digest, path = %path.display(), bytes = snap.bytes_fetched, "weights installed");
    Ok(FetchReport {
        digest,
        path,
        progress: progress.snapshot(),
    })
}

fn held_bits(set: &WeightSet) -> ChunkBits {
    let mut b = ChunkBits::new(set.table.len());
    (0..set.table.len())
        .filter(|&i| set.is_held(i))
        .for_each(|i| b.set(i));
    b
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(blocking_failed)?
}

/// Asks each source in turn for the manifest until one verifies.
async fn fetch_manifest(
    req: &FetchRequest,
    tried: &mut Vec<SourceFailure>,
) -> Result<(Manifest, Vec<u8>, SocketAddr)> {
    let mut mismatch = None;
    let mut auth_failures = Vec::new();
    for &src in &req.sources {
        let attempt = async {
            let mut s = open(req, src).await?;
            let ask = Request::GetManifest(req.manifest_digest).encode();
            send(
                &mut s,
                &ask,
                src,
                req.timeouts.response,
                "asking for the manifest",
            )
            .await?;
            match read_response(&mut s, src, req.timeouts.response, "the manifest").await? {
                Response::Manifest { bytes, .. } => {
                    let actual = Digest::of(&bytes);
                    if actual != req.manifest_digest {
                        return Err(WeightsError::DigestMismatch {
                            subject: Subject::Manifest,
                            peer: Some(src),
                            expected: req.manifest_digest,
                            actual,
                        });
                    }
                    let m = Manifest::parse(&bytes)?;
                    Ok((m, bytes))
                }
                Response::Missing(_) => Err(WeightsError::protocol(
                    Some(src),
                    "does not hold this weights set",
                )),
                other => Err(unexpected(src, &other)),
            }
        };
        match attempt.await {
            Ok((m, b)) => return Ok((m, b, src)),
            Err(e) => {
                tracing::warn!(source = %src, error = %e, "manifest not obtained from source");
                tried.push(SourceFailure {
                    source: src,
                    reason: e.to_string(),
                });
                match e {
                    WeightsError::DigestMismatch { .. } => {
                        mismatch.get_or_insert(e);
                    }
                    WeightsError::Auth { .. } => auth_failures.push(e),
                    _ => {}
                }
            }
        }
    }
    // A source that sent the wrong manifest is the more important news; so is a secret
    // that every source refused (a configuration error, not an outage).
    if let Some(e) = mismatch {
        return Err(e);
    }
    if !auth_failures.is_empty() && auth_failures.len() == tried.len() {
        return Err(auth_failures.remove(0));
    }
    Err(WeightsError::NoSources {
        manifest: req.manifest_digest,
        remaining_chunks: 0,
        tried: tried.clone(),
    })
}

/// Runs one worker per source, and one per source learned on `more`, until the set is
/// complete, sources run out, or it stalls.
async fn run_workers(
    ctx: &Arc<Ctx>,
    mut tried: Vec<SourceFailure>,
    mut more: Option<watch::Receiver<Vec<SocketAddr>>>,
) -> Result<()> {
    let mut workers = Workers::default();
    for (i, &src) in ctx.req.sources.iter().enumerate() {
        workers.spawn(ctx, i, src);
    }
    let check = ctx.req.timeouts.have_poll.max(Duration::from_millis(50));
    loop {
        {
            let s = ctx.sched.lock().expect("scheduler lock");
            if s.is_done() {
                break;
            }
            if let Some(i) = s.unfetchable() {
                let info = &ctx.set.table.chunks[i];
                return Err(WeightsError::NoSources {
                    manifest: ctx.req.manifest_digest,
                    remaining_chunks: s.remaining(),
                    tried: failures(
                        &tried,
                        format!(
                            "no live source has a good copy of chunk #{i} ({})",
                            info.digest
                        ),
                    ),
                });
            }
            if workers.set.is_empty() {
                return Err(WeightsError::NoSources {
                    manifest: ctx.req.manifest_digest,
                    remaining_chunks: s.remaining(),
                    tried,
                });
            }
        }
        let idle = ctx.last_progress.lock().expect("progress lock").elapsed();
        if idle > ctx.req.timeouts.stall {
            return Err(WeightsError::Timeout {
                what: format!(
                    "progress on weights {} (no chunk verified)",
                    ctx.req.manifest_digest
                ),
                peer: None,
                after: ctx.req.timeouts.stall,
            });
        }
        tokio::select! {
            // Sources learned first: the last source lost just after new ones were sent
            // must not end the fetch for want of sources.
            biased;
            sources = next_sources(&mut more) => {
                for src in sources {
                    workers.learned(ctx, src);
                }
            }
            _ = ctx.changed.notified() => {}
            Some(done) = workers.set.join_next() => {
                if let Ok((src, Err(e))) = done {
                    tried.push(SourceFailure { source: src, reason: e.to_string() });
                }
            }
            _ = tokio::time::sleep(check) => {}
        }
    }
    workers.set.shutdown().await;
    Ok(())
}

/// The workers of a fetch, one per source.
#[derive(Default)]
struct Workers {
    set: JoinSet<(SocketAddr, Result<()>)>,
    /// Every source a worker was started for.
    asked: Vec<SocketAddr>,
}

impl Workers {
    fn spawn(&mut self, ctx: &Arc<Ctx>, i: usize, src: SocketAddr) {
        self.asked.push(src);
        let ctx = ctx.clone();
        self.set
            .spawn(async move { (src, worker(&ctx, i, src).await) });
    }

    /// Adds `src` to the scheduler and starts its worker, unless it is asked already.
    fn learned(&mut self, ctx: &Arc<Ctx>, src: SocketAddr) {
        if self.asked.contains(&src) {
            return;
        }
        tracing::info!(source = %src, "a source joined the fetch under way");
        let i = ctx
            .sched
            .lock()
            .expect("scheduler lock")
            .add_source(src.ip());
        self.spawn(ctx, i, src);
    }
}

/// The next list of sources sent on `more`; never, once its sender is gone (or without
/// one).
async fn next_sources(more: &mut Option<watch::Receiver<Vec<SocketAddr>>>) -> Vec<SocketAddr> {
    if let Some(rx) = more
        && rx.changed().await.is_ok()
    {
        return rx.borrow_and_update().clone();
    }
    *more = None;
    std::future::pending().await
}

fn failures(tried: &[SourceFailure], note: String) -> Vec<SourceFailure> {
    let mut t = tried.to_vec();
    if t.is_empty() {
        t.push(SourceFailure {
            source: SocketAddr::from(([0, 0, 0, 0], 0)),
            reason: note,
        });
    } else {
        t[0].reason = format!("{}; {note}", t[0].reason);
    }
    t
}
