//! The chunk server: a member holding verified chunks (a complete set, or a joiner part-way
//! through its own fetch) serves them to joiners over TCP on its data address.
//!
//! Like mini-redis, it takes its listener and a shutdown future. Every connection is
//! accepted at once and admitted under per-address and total caps (`hcomm_comm::listen`,
//! [`LIMITS`]) or closed, so a stranger's idle connections take only their address's
//! slots and never leave real joiners waiting in the backlog; every connection first
//! passes the group-secret handshake (`auth`: the client proves its group's secret, the
//! [`Authority`] says which sets that group may fetch), then answers pipelined requests
//! about those sets only (`authorize`) in order (`protocol`), opening and reading ahead the
//! next chunk while the current one is written. A chunk goes from the page cache to the
//! socket with `sendfile` (`sendfile`), never through user space: it was verified when it
//! was stored and every joiner verifies it as it arrives. With `verify_on_read` a chunk is
//! re-read and re-hashed first instead, and one that no longer matches (disk corruption)
//! is withdrawn and answered `Missing`.
//! On shutdown it stops accepting and aborts and joins every connection task.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hcomm_comm::listen::{Guard, Limits, Refusal};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

use super::auth::{self, Authority, GroupSecret, SharedSecret};
use super::authorize::Allowed;
use super::bitset::ChunkBits;
use super::digest::Digest;
use super::error::{Result, WeightsError};
use super::protocol::{
    FrameError, MAX_REQUEST_FRAME, Request, Response, chunk_head, read_frame, write_chunk,
};
use super::sendfile::ChunkFile;
use super::store::{ChunkLocation, WeightStore, read_chunk};

/// How a [`ChunkServer`] behaves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Who may connect and what each group may fetch.
    pub authority: Arc<dyn Authority>,
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections one peer address may hold at once.
    pub max_per_peer: usize,
    /// The admission guard to use (the agent passes one shared with its metrics); `None`:
    /// one made from the fields above.
    pub admission: Option<Arc<Guard>>,
    /// Deadline for a client to complete the handshake.
    pub handshake_timeout: Duration,
    /// A connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Deadline for writing one response.
    pub write_timeout: Duration,
    /// Re-read and re-hash every chunk before sending it, withdrawing one that no longer
    /// matches (default false: chunks go from the page cache with `sendfile`, and the
    /// joiners' own check catches a corrupt one).
    pub verify_on_read: bool,
}

/// Default admission of the chunk server: 64 connections, 16 per peer address (a joiner
/// stripes over few connections per source), 5 s to complete the handshake, 120 s idle.
pub const LIMITS: Limits = Limits {
    per_peer: 16,
    total: 64,
    handshake: Duration::from_secs(5),
    idle: Duration::from_secs(120),
};

impl ServerConfig {
    /// One secret for every group and set ([`SharedSecret`]: tests, benchmarks); see
    /// [`ServerConfig::with_authority`].
    pub fn new(secret: GroupSecret) -> ServerConfig {
        Self::with_authority(Arc::new(SharedSecret(secret)))
    }

    /// Defaults: [`LIMITS`], 60 s per response, no re-hash on serve.
    pub fn with_authority(authority: Arc<dyn Authority>) -> ServerConfig {
        ServerConfig {
            authority,
            max_connections: LIMITS.total,
            max_per_peer: LIMITS.per_peer,
            admission: None,
            handshake_timeout: LIMITS.handshake,
            idle_timeout: LIMITS.idle,
            write_timeout: Duration::from_secs(60),
            verify_on_read: false,
        }
    }
}

/// Counters of a server (shared; read them while it runs).
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections: AtomicU64,
    pub auth_failures: AtomicU64,
    pub chunks_served: AtomicU64,
    pub bytes_served: AtomicU64,
    pub chunks_withdrawn: AtomicU64,
}

/// Serves a [`WeightStore`]'s verified chunks.
#[derive(Debug)]
pub struct ChunkServer;

impl ChunkServer {
    /// Serves until `shutdown` completes. Returns the server's counters.
    pub async fn serve(
        listener: TcpListener,
        store: WeightStore,
        config: ServerConfig,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Arc<ServerStats>> {
        Self::serve_with_stats(listener, store, config, Arc::default(), shutdown).await
    }

    /// As [`ChunkServer::serve`], updating counters the caller holds.
    pub async fn serve_with_stats(
        listener: TcpListener,
        store: WeightStore,
        config: ServerConfig,
        stats: Arc<ServerStats>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Arc<ServerStats>> {
        let local = listener.local_addr().ok();
        let admission = config.admission.clone().unwrap_or_else(|| {
            Guard::new(
                "weights",
                Limits {
                    per_peer: config.max_per_peer,
                    total: config.max_connections,
                    handshake: config.handshake_timeout,
                    idle: config.idle_timeout,
                },
            )
        });
        let config = Arc::new(config);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut shutdown => break,
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        // Per-connection errors (ECONNABORTED, EMFILE): back off briefly.
                        tracing::warn!(listen = ?local, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = admission.admit(peer.ip()) else {
                continue; // over its share: closed at once
            };
            stats.connections.fetch_add(1, Ordering::Relaxed);
            let (store, config, stats) = (store.clone(), config.clone(), stats.clone());
            let admission = admission.clone();
            conns.spawn(async move {
                let _slot = slot;
                if let Err(e) = connection(stream, peer, &store, &config, &stats).await {
                    if e.category() == "auth" {
                        stats.auth_failures.fetch_add(1, Ordering::Relaxed);
                    }
                    if matches!(&e, WeightsError::Timeout { what, .. } if what == "handshake") {
                        admission.count(Refusal::Deadline);
                    }
                    tracing::debug!(%peer, error = %e, category = e.category(), "weights connection ended");
                }
            });
            // Reap finished connections so the set does not grow without bound.
            while conns.try_join_next().is_some() {}
        }
        conns.shutdown().await;
        Ok(stats)
    }
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    store: &WeightStore,
    config: &ServerConfig,
    stats: &Arc<ServerStats>,
) -> Result<()> {
    let _ = stream.set_nodelay(true);
    let grant = timeout(
        config.handshake_timeout,
        auth::accept(&mut stream, config.authority.as_ref(), peer),
    )
    .await
    .map_err(|_| WeightsError::Timeout {
        what: "handshake".into(),
        peer: Some(peer),
        after: config.handshake_timeout,
    })??;
    let (rd, wr) = stream.split();
    let (tx, rx) = mpsc::channel(PREFETCH);
    // The writer failing ends the reader too (it may be waiting for a request that never
    // comes); the reader ending lets the writer answer what is queued, then stop.
    tokio::try_join!(
        read_requests(rd, store, config, stats, Allowed::new(grant), tx),
        write_replies(wr, peer, config, stats, rx),
    )?;
    Ok(())
}

/// Replies queued behind the one being written. One is enough to keep the link busy: the
/// next chunk is opened and read ahead (milliseconds) while the current one is on the wire;
/// answering strictly one request at a time left the link idle for that long per chunk,
/// about 4 % of a 500 Mbit/s link. Bounds a connection to two chunks in memory.
const PREFETCH: usize = 1;

/// A reply, in request order.
enum Reply {
    /// Encoded and ready to send.
    Ready(Vec<u8>),
    /// A chunk being opened (or read and re-hashed) on a blocking thread; None: not held
    /// (any more).
    Chunk(Digest, JoinHandle<Option<Body>>),
    /// A malformed request: answered with the error, then the connection ends with it.
    Refuse(String),
}

/// Reads requests until the client closes, goes idle or sends garbage, queueing a reply
/// for each (a chunk's load starts as soon as there is room in the queue).
async fn read_requests(
    mut rd: ReadHalf<'_>,
    store: &WeightStore,
    config: &ServerConfig,
    stats: &Arc<ServerStats>,
    mut allowed: Allowed,
    tx: mpsc::Sender<Reply>,
) -> Result<()> {
    loop {
        let frame = timeout(config.idle_timeout, read_frame(&mut rd, MAX_REQUEST_FRAME)).await;
        let req = match frame {
            Err(_) | Ok(Err(FrameError::Closed)) => return Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok((k, p))) => Request::decode(k, &p).map_err(|e| e.to_string()),
        };
        // The writer is gone: its error ends the connection.
        let Ok(slot) = tx.reserve().await else {
            return Ok(());
        };
        let req = match req {
            Ok(Request::GetManifest(set) | Request::Have(set))
                if allowed.refuse_set(&set).is_some() =>
            {
                Err(allowed.refuse_set(&set).unwrap_or_default())
            }
            r => r,
        };
        let req = match req {
            Ok(r) => r,
            Err(e) => {
                slot.send(Reply::Refuse(e));
                return Ok(());
            }
        };
        slot.send(match req {
            Request::GetManifest(set) => Reply::Ready(
                match store.manifest_bytes(&set) {
                    Some(bytes) => Response::Manifest {
                        set,
                        bytes: bytes.to_vec(),
                    },
                    None => Response::Missing(set),
                }
                .encode(),
            ),
            Request::Have(set) => Reply::Ready(
                match (store.have(&set), store.coming(&set)) {
                    (Some(bits), Some(coming)) => have_bits(set, &bits, &coming),
                    _ => Response::Missing(set),
                }
                .encode(),
            ),
            Request::GetChunk(chunk) if !allowed.chunk(store, &chunk) => {
                Reply::Ready(Response::Missing(chunk).encode())
            }
            Request::GetChunk(chunk) => {
                let (store, stats) = (store.clone(), stats.clone());
                let verify = config.verify_on_read;
                Reply::Chunk(
                    chunk,
                    tokio::spawn(async move { load(&store, chunk, verify, &stats).await }),
                )
            }
        });
    }
}

/// A loaded chunk's bytes.
enum Body {
    /// Read (and re-hashed) into memory.
    Read(Vec<u8>),
    /// Open, to be sent from the page cache.
    File(ChunkFile),
}

/// Writes the queued replies in order, each within the write timeout.
async fn write_replies(
    mut wr: WriteHalf<'_>,
    peer: SocketAddr,
    config: &ServerConfig,
    stats: &ServerStats,
    mut rx: mpsc::Receiver<Reply>,
) -> Result<()> {
    while let Some(reply) = rx.recv().await {
        let refused = match &reply {
            Reply::Refuse(e) => Some(e.clone()),
            _ => None,
        };
        let write = async {
            match reply {
                Reply::Ready(bytes) => wr.write_all(&bytes).await,
                Reply::Refuse(e) => wr.write_all(&Response::Error(e).encode()).await,
                Reply::Chunk(chunk, load) => match load.await.ok().flatten() {
                    Some(body) => {
                        let len = match body {
                            Body::Read(data) => {
                                write_chunk(&mut wr, &chunk, &data).await?;
                                data.len() as u64
                            }
                            Body::File(file) => {
                                wr.write_all(&chunk_head(&chunk, file.len())).await?;
                                file.send(wr.as_ref()).await?;
                                file.len()
                            }
                        };
                        stats.chunks_served.fetch_add(1, Ordering::Relaxed);
                        stats.bytes_served.fetch_add(len, Ordering::Relaxed);
                        Ok(())
                    }
                    None => wr.write_all(&Response::Missing(chunk).encode()).await,
                },
            }
        };
        let written =
            timeout(config.write_timeout, write)
                .await
                .map_err(|_| WeightsError::Timeout {
                    what: "writing a response".into(),
                    peer: Some(peer),
                    after: config.write_timeout,
                })?;
        if let Some(e) = refused {
            return Err(WeightsError::protocol(Some(peer), e));
        }
        written.map_err(|e| WeightsError::io(format!("write to {peer}"), None, e))?;
    }
    Ok(())
}

fn have_bits(set: Digest, bits: &ChunkBits, coming: &ChunkBits) -> Response {
    Response::HaveBits {
        set,
        chunks: bits.len() as u32,
        bits: bits.to_bytes(),
        coming: coming.to_bytes(),
    }
}

/// Opens a verified chunk on disk (retrying once: a set may have just moved from staging
/// to versions), or reads and re-hashes it if asked. `None` if not held or no longer
/// valid.
async fn load(
    store: &WeightStore,
    chunk: Digest,
    verify: bool,
    stats: &ServerStats,
) -> Option<Body> {
    for _ in 0..2 {
        let loc: ChunkLocation = store.locate(&chunk)?;
        let read = {
            let loc = loc.clone();
            tokio::task::spawn_blocking(move || {
                if !verify {
                    return Ok((Body::File(ChunkFile::open(&loc)?), true));
                }
                let data = read_chunk(&loc)?;
                let ok = loc.hash.digest(&data) == chunk;
                Ok::<_, std::io::Error>((Body::Read(data), ok))
            })
            .await
            .ok()?
        };
        match read {
            Ok((body, true)) => return Some(body),
            Ok((_, false)) => {
                tracing::error!(chunk = %chunk, path = %loc.path.display(), "stored chunk no longer matches its digest; withdrawn");
                store.forget_chunk(&loc.set, loc.index);
                stats.chunks_withdrawn.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Err(e) => {
                tracing::debug!(chunk = %chunk, error = %e, "re-reading chunk failed; retrying lookup")
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::weights::ChunkTable;
    use crate::weights::protocol::MAX_FRAME;

    /// A server on loopback over a store holding one set of three 4 KiB chunks.
    async fn serving() -> (SocketAddr, crate::weights::Manifest, std::path::PathBuf) {
        let tmp = crate::weights::test_dirs::fresh("server", "pipeline");
        let src = tmp.join("src");
        std::fs::create_dir_all(&src).unwrap();
        let data: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(src.join("w.bin"), data).unwrap();
        let m = crate::weights::Manifest::build(&src, 4096).unwrap();
        let store = WeightStore::open(tmp.join("store")).unwrap();
        store.install_dir(&src, &m.digest(), 4096).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ServerConfig::new(GroupSecret::new("k"));
        tokio::spawn(ChunkServer::serve(
            listener,
            store,
            config,
            std::future::pending(),
        ));
        (addr, m, tmp)
    }

    async fn response(s: &mut TcpStream) -> Response {
        let (k, p) = timeout(Duration::from_secs(5), read_frame(s, MAX_FRAME))
            .await
            .expect("a response within 5 s")
            .expect("a frame");
        Response::decode(k, p).expect("a response")
    }

    #[tokio::test]
    async fn pipelined_requests_are_answered_in_order_and_garbage_ends_the_connection() {
        let (addr, m, tmp) = serving().await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        auth::connect(&mut s, &GroupSecret::new("k"), &Default::default(), addr)
            .await
            .unwrap();
        let chunks = ChunkTable::new(&m).chunks;
        let absent = Digest::of(b"not held");
        // Everything at once: chunk 2, an absent chunk, chunk 0, the manifest; then a
        // request of an unknown kind.
        let mut out = Vec::new();
        for r in [
            Request::GetChunk(chunks[2].digest),
            Request::GetChunk(absent),
            Request::GetChunk(chunks[0].digest),
            Request::GetManifest(m.digest()),
        ] {
            out.extend(r.encode());
        }
        out.extend([0, 0, 0, 1, 0xee]);
        s.write_all(&out).await.unwrap();
        let got_chunk = |r: Response, want: &Digest| match r {
            Response::Chunk { chunk, data } => {
                assert_eq!(&chunk, want);
                assert_eq!(crate::weights::ChunkHash::default().digest(&data), *want);
            }
            other => panic!("expected chunk {want}, got {other:?}"),
        };
        got_chunk(response(&mut s).await, &chunks[2].digest);
        assert!(matches!(response(&mut s).await, Response::Missing(d) if d == absent));
        got_chunk(response(&mut s).await, &chunks[0].digest);
        assert!(
            matches!(response(&mut s).await, Response::Manifest { set, .. } if set == m.digest())
        );
        assert!(matches!(response(&mut s).await, Response::Error(_)));
        // Then the server hangs up.
        let mut rest = Vec::new();
        let n = timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
            .await
            .expect("closed within 5 s")
            .unwrap_or(0);
        assert_eq!(n, 0, "nothing after the error");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
