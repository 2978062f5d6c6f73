//! The chunk server: a member holding verified chunks (a complete set, or a joiner part-way
//! through its own fetch) serves them to joiners over TCP on its data address.
//!
//! Like mini-redis, it takes its listener and a shutdown future; at most
//! `max_connections` connections are served at once (further ones wait in the listen
//! backlog); every connection first passes the group-secret handshake (`auth`), then
//! answers pipelined requests in order (`protocol`). Each chunk is re-read from the store
//! on disk and, unless disabled, re-hashed before it is sent: a chunk that no longer
//! matches (disk corruption) is withdrawn and answered `Missing` instead of spreading.
//! On shutdown it stops accepting and aborts and joins every connection task.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::timeout;

use super::auth::{self, GroupSecret};
use super::bitset::ChunkBits;
use super::digest::Digest;
use super::error::{Result, WeightsError};
use super::protocol::{FrameError, MAX_REQUEST_FRAME, Request, Response, read_frame, write_chunk};
use super::store::{ChunkLocation, WeightStore, read_chunk};

/// How a [`ChunkServer`] behaves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub secret: GroupSecret,
    /// Connections served at once.
    pub max_connections: usize,
    /// Deadline for a client to complete the handshake.
    pub handshake_timeout: Duration,
    /// A connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Deadline for writing one response.
    pub write_timeout: Duration,
    /// Re-hash every chunk read from disk before sending it (default true).
    pub verify_on_read: bool,
}

impl ServerConfig {
    /// Defaults: 64 connections, 5 s handshake, 120 s idle, 60 s per response, verify.
    pub fn new(secret: GroupSecret) -> ServerConfig {
        ServerConfig {
            secret,
            max_connections: 64,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(60),
            verify_on_read: true,
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
        let limit = Arc::new(Semaphore::new(config.max_connections.max(1)));
        let config = Arc::new(config);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                _ = &mut shutdown => break,
                p = limit.clone().acquire_owned() => p.expect("semaphore never closed"),
            };
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
            stats.connections.fetch_add(1, Ordering::Relaxed);
            let (store, config, stats) = (store.clone(), config.clone(), stats.clone());
            conns.spawn(async move {
                let _permit = permit;
                if let Err(e) = connection(stream, peer, &store, &config, &stats).await {
                    if e.category() == "auth" {
                        stats.auth_failures.fetch_add(1, Ordering::Relaxed);
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
    stats: &ServerStats,
) -> Result<()> {
    let _ = stream.set_nodelay(true);
    timeout(
        config.handshake_timeout,
        auth::accept(&mut stream, &config.secret, peer),
    )
    .await
    .map_err(|_| WeightsError::Timeout {
        what: "handshake".into(),
        peer: Some(peer),
        after: config.handshake_timeout,
    })??;
    loop {
        let (k, p) = match timeout(
            config.idle_timeout,
            read_frame(&mut stream, MAX_REQUEST_FRAME),
        )
        .await
        {
            Err(_) | Ok(Err(FrameError::Closed)) => return Ok(()),
            Ok(Err(e)) => {
                let _ = stream
                    .write_all(&Response::Error(e.to_string()).encode())
                    .await;
                return Err(WeightsError::protocol(Some(peer), e.to_string()));
            }
            Ok(Ok(f)) => f,
        };
        let req = match Request::decode(k, &p) {
            Ok(r) => r,
            Err(e) => {
                let _ = stream
                    .write_all(&Response::Error(e.to_string()).encode())
                    .await;
                return Err(WeightsError::protocol(Some(peer), e.to_string()));
            }
        };
        let write = async {
            match req {
                Request::GetManifest(set) => {
                    let r = match store.manifest_bytes(&set) {
                        Some(bytes) => Response::Manifest {
                            set,
                            bytes: bytes.to_vec(),
                        },
                        None => Response::Missing(set),
                    };
                    stream.write_all(&r.encode()).await
                }
                Request::Have(set) => {
                    let r = match (store.have(&set), store.coming(&set)) {
                        (Some(bits), Some(coming)) => have_bits(set, &bits, &coming),
                        _ => Response::Missing(set),
                    };
                    stream.write_all(&r.encode()).await
                }
                Request::GetChunk(chunk) => {
                    match load(store, chunk, config.verify_on_read, stats).await {
                        Some(data) => {
                            write_chunk(&mut stream, &chunk, &data).await?;
                            stats.chunks_served.fetch_add(1, Ordering::Relaxed);
                            stats
                                .bytes_served
                                .fetch_add(data.len() as u64, Ordering::Relaxed);
                            Ok(())
                        }
                        None => stream.write_all(&Response::Missing(chunk).encode()).await,
                    }
                }
            }
        };
        timeout(config.write_timeout, write)
            .await
            .map_err(|_| WeightsError::Timeout {
                what: "writing a response".into(),
                peer: Some(peer),
                after: config.write_timeout,
            })?
            .map_err(|e| WeightsError::io(format!("write to {peer}"), None, e))?;
    }
}

fn have_bits(set: Digest, bits: &ChunkBits, coming: &ChunkBits) -> Response {
    Response::HaveBits {
        set,
        chunks: bits.len() as u32,
        bits: bits.to_bytes(),
        coming: coming.to_bytes(),
    }
}

/// Reads a verified chunk from disk (retrying once: a set may have just moved from
/// staging to versions), re-hashing it if asked. `None` if not held or no longer valid.
async fn load(
    store: &WeightStore,
    chunk: Digest,
    verify: bool,
    stats: &ServerStats,
) -> Option<Vec<u8>> {
    for _ in 0..2 {
        let loc: ChunkLocation = store.locate(&chunk)?;
        let read = {
            let loc = loc.clone();
            tokio::task::spawn_blocking(move || {
                let data = read_chunk(&loc)?;
                let ok = !verify || Digest::of(&data) == chunk;
                Ok::<_, std::io::Error>((data, ok))
            })
            .await
            .ok()?
        };
        match read {
            Ok((data, true)) => return Some(data),
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
