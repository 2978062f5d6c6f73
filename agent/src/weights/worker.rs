//! One worker per source: keeps `parallelism` requests in flight to it (to a fellow joiner
//! `partial_parallelism`), takes chunks from the shared scheduler as slots free up (work
//! stealing), polls a partial source's `Have` bitmap, hashes every chunk against the
//! manifest before writing it, and on any failure gives its outstanding chunks back and
//! reports the source lost.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::bitset::ChunkBits;
use super::conn::{open, read_response, send, unexpected};
use super::digest::Digest;
use super::error::{Result, Subject, WeightsError, blocking_failed};
use super::progress::SyncEvent;
use super::protocol::{Request, Response};
use super::request::Ctx;
use super::schedule::AfterCorrupt;

/// One source's worker: on failure, gives its chunks back and reports the source lost.
pub(crate) async fn worker(ctx: &Ctx, idx: usize, src: SocketAddr) -> Result<()> {
    let r = serve_from(ctx, idx, src).await;
    if let Err(e) = &r {
        let requeued = {
            let mut sched = ctx.sched.lock().expect("scheduler lock");
            let n = sched.lose(idx);
            ctx.set.set_coming(sched.in_flight());
            n
        };
        tracing::warn!(source = %src, error = %e, requeued, "weights source lost");
        ctx.progress.record(SyncEvent::SourceLost {
            source: src,
            reason: e.to_string(),
            requeued,
        });
        ctx.changed.notify_waiters();
    }
    r
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    Chunk(usize),
    Have,
}

/// Fetches from `src` and, once it is known to be a fellow joiner, asks what it holds on
/// a connection of its own ([`poll_have_aside`]).
async fn serve_from(ctx: &Ctx, idx: usize, src: SocketAddr) -> Result<()> {
    let aside = AtomicBool::new(false);
    let chunks = serve_chunks(ctx, idx, src, &aside);
    let have = poll_have_aside(ctx, idx, src, &aside);
    tokio::pin!(chunks, have);
    tokio::select! {
        r = &mut chunks => r,
        // The poll ended (the fetch is done, or its connection failed): the chunk
        // connection polls again itself.
        () = &mut have => chunks.await,
    }
}

/// Polls a fellow joiner's `Have` on a second connection every `have_poll` while `aside`
/// says so. On the chunk connection the answer queues behind the chunks asked before it
/// (up to `parallelism` × 4 MiB on a fellow's uplink shared with every other joiner): a
/// log of eight joiners had them see each other's progress up to 0.6 s late and ask the
/// existing member for the same chunk, 15 chunks sent twice that way in one run (issue 20).
/// Returns when the fetch is done, the source is lost, or this connection fails (logged;
/// the chunk connection takes the polling back).
async fn poll_have_aside(ctx: &Ctx, idx: usize, src: SocketAddr, aside: &AtomicBool) {
    let t = ctx.req.timeouts;
    // Only fellow joiners are polled: a source is one once its first answer (on the chunk
    // connection) said it holds part of the set.
    loop {
        if polls_over(ctx, idx) {
            return;
        }
        if ctx.sched.lock().expect("scheduler lock").is_partial(idx) {
            break;
        }
        tokio::select! {
            _ = ctx.changed.notified() => {}
            _ = tokio::time::sleep(t.have_poll) => {}
        }
    }
    let mut s = match open(&ctx.req, src).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(source = %src, error = %e, "no second connection for Have polls");
            return;
        }
    };
    aside.store(true, Ordering::Relaxed);
    let polled = async {
        loop {
            if polls_over(ctx, idx) {
                return Ok(());
            }
            let ask = Request::Have(ctx.req.manifest_digest).encode();
            send(
                &mut s,
                &ask,
                src,
                t.response,
                "asking for the list of held chunks",
            )
            .await?;
            let what = "the list of held chunks";
            match read_response(&mut s, src, t.response, what).await? {
                Response::Missing(_) => {}
                other => {
                    record_have(ctx, idx, src, other)?;
                }
            }
            tokio::time::sleep(t.have_poll).await;
        }
    };
    let r: Result<()> = polled.await;
    aside.store(false, Ordering::Relaxed);
    if let Err(e) = r {
        tracing::debug!(source = %src, error = %e, "Have polls on the second connection ended");
    }
}

/// Whether the `Have` polls of source `idx` are over: the fetch is done or the source lost.
fn polls_over(ctx: &Ctx, idx: usize) -> bool {
    let sched = ctx.sched.lock().expect("scheduler lock");
    sched.is_done() || !sched.is_live(idx)
}

/// Records a `Have` answer from `src` in the scheduler; returns whether it holds the whole
/// set.
fn record_have(ctx: &Ctx, idx: usize, src: SocketAddr, resp: Response) -> Result<bool> {
    let Response::HaveBits {
        set,
        chunks,
        bits,
        coming,
    } = resp
    else {
        return Err(unexpected(src, &resp));
    };
    if set != ctx.req.manifest_digest {
        return Err(WeightsError::protocol(
            Some(src),
            "a list of held chunks for another set",
        ));
    }
    let n = ctx.set.table.len();
    let parse = |b: &[u8]| {
        (chunks as usize == n)
            .then(|| ChunkBits::from_bytes(n, b))
            .flatten()
            .ok_or_else(|| WeightsError::protocol(Some(src), "malformed chunk bitmap"))
    };
    let (bits, coming) = (parse(&bits)?, parse(&coming)?);
    let complete = bits.is_full();
    ctx.sched
        .lock()
        .expect("scheduler lock")
        .set_holdings(idx, bits, coming);
    ctx.changed.notify_waiters();
    Ok(complete)
}

async fn serve_chunks(ctx: &Ctx, idx: usize, src: SocketAddr, aside: &AtomicBool) -> Result<()> {
    let t = ctx.req.timeouts;
    let set_digest = ctx.req.manifest_digest;
    let mut s = open(&ctx.req, src).await?;
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut last_have: Option<Instant> = None;
    let mut connected = false;
    // The chunk being hashed and written while the next one is read off the socket.
    let mut accepting: Option<Accepting> = None;
    loop {
        let (batch, full, done) = {
            let mut sched = ctx.sched.lock().expect("scheduler lock");
            let mut batch = Vec::new();
            let depth = if sched.is_partial(idx) {
                ctx.req.partial_parallelism
            } else {
                ctx.req.parallelism
            };
            while pending.len() + batch.len() < depth.max(1) {
                match sched.next_for(idx) {
                    Some(i) => batch.push(i),
                    None => break,
                }
            }
            if !batch.is_empty() {
                ctx.set.set_coming(sched.in_flight());
            }
            (batch, sched.is_full(idx), sched.is_done())
        };
        if done && pending.is_empty() {
            if let Some(a) = accepting.take() {
                a.finish(ctx, idx, src).await?;
            }
            return Ok(());
        }
        let mut out = Vec::new();
        for i in batch {
            out.extend(Request::GetChunk(ctx.set.table.chunks[i].digest).encode());
            pending.push_back(Pending::Chunk(i));
        }
        let poll_due = last_have.is_none_or(|at| at.elapsed() >= t.have_poll);
        let polled_aside = connected && aside.load(Ordering::Relaxed);
        if !full && poll_due && !polled_aside && !pending.contains(&Pending::Have) {
            out.extend(Request::Have(set_digest).encode());
            pending.push_back(Pending::Have);
            last_have = Some(Instant::now());
        }
        if !out.is_empty() {
            send(&mut s, &out, src, t.response, "sending requests").await?;
        }
        let Some(expect) = pending.pop_front() else {
            if let Some(a) = accepting.take() {
                a.finish(ctx, idx, src).await?;
                continue;
            }
            // Nothing to ask this source now: wait for news (a requeue, a peer's progress).
            tokio::select! {
                _ = ctx.changed.notified() => {}
                _ = tokio::time::sleep(t.have_poll) => {}
            }
            continue;
        };
        let what = match expect {
            Pending::Chunk(i) => format!("chunk #{i}"),
            Pending::Have => "the list of held chunks".into(),
        };
        let resp = read_response(&mut s, src, t.response, &what).await?;
        match (expect, resp) {
            (Pending::Have, resp @ Response::HaveBits { .. }) => {
                let complete = record_have(ctx, idx, src, resp)?;
                if !connected {
                    connected = true;
                    ctx.progress.record(SyncEvent::SourceConnected {
                        source: src,
                        complete,
                    });
                }
            }
            (Pending::Have, Response::Missing(_)) => {
                // A fellow joiner that has not started on this set yet.
                let mut sched = ctx.sched.lock().expect("scheduler lock");
                let none = ChunkBits::new(ctx.set.table.len());
                sched.set_holdings(idx, none.clone(), none);
            }
            (Pending::Chunk(i), Response::Chunk { chunk, data })
                if chunk == ctx.set.table.chunks[i].digest =>
            {
                if let Some(a) = accepting.take() {
                    a.finish(ctx, idx, src).await?;
                }
                accepting = Some(Accepting::start(ctx, i, data));
            }
            (Pending::Chunk(i), Response::Missing(_)) => {
                ctx.sched.lock().expect("scheduler lock").missing(i, idx);
                ctx.changed.notify_waiters();
            }
            (_, other) => return Err(unexpected(src, &other)),
        }
    }
}

/// A received chunk being hashed against the manifest and written, on a blocking thread
/// started at once: the worker goes on reading the next response meanwhile, so the link
/// does not stall for the hash and the write of every chunk (at 500 Mbit/s that stall cost
/// about a tenth of the rate).
struct Accepting {
    index: usize,
    len: u64,
    task: tokio::task::JoinHandle<Result<std::result::Result<(), Digest>>>,
}

impl Accepting {
    fn start(ctx: &Ctx, i: usize, data: Vec<u8>) -> Accepting {
        let info = ctx.set.table.chunks[i].clone();
        let set = ctx.set.clone();
        let len = data.len() as u64;
        let task = tokio::task::spawn_blocking(move || {
            let actual = set.manifest.chunk_hash().digest(&data);
            if actual != info.digest || data.len() as u64 != info.len {
                return Ok(Err(actual));
            }
            set.write_chunk(i, &data).map(Ok)
        });
        Accepting {
            index: i,
            len,
            task,
        }
    }

    /// Waits for the verdict: a verified chunk is recorded, a corrupt one reported (and the
    /// source dropped when the scheduler says so).
    async fn finish(self, ctx: &Ctx, idx: usize, src: SocketAddr) -> Result<()> {
        let i = self.index;
        let verdict = self.task.await.map_err(blocking_failed)??;
        match verdict {
            Ok(()) => {
                ctx.sched.lock().expect("scheduler lock").complete(i);
                *ctx.last_progress.lock().expect("progress lock") = Instant::now();
                ctx.progress.record(SyncEvent::ChunkVerified {
                    index: i,
                    source: src,
                    bytes: self.len,
                });
            }
            Err(actual) => {
                let chunk = ctx.set.table.chunks[i].digest;
                let after = ctx.sched.lock().expect("scheduler lock").corrupt(i, idx);
                tracing::warn!(source = %src, chunk = %chunk, index = i, actual = %actual, "corrupt chunk; refetching");
                ctx.progress.record(SyncEvent::CorruptChunk {
                    index: i,
                    chunk,
                    source: src,
                    actual,
                });
                if after == AfterCorrupt::Drop {
                    ctx.changed.notify_waiters();
                    return Err(WeightsError::DigestMismatch {
                        subject: Subject::Chunk { index: i },
                        peer: Some(src),
                        expected: chunk,
                        actual,
                    });
                }
            }
        }
        ctx.changed.notify_waiters();
        Ok(())
    }
}
