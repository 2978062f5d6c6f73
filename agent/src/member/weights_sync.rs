//! The real [`WeightsSyncer`]: the member lifecycle's Syncing phase on top of the
//! weight-sync engine (`crate::weights`).
//!
//! ```text
//! spec.weights absent            → synced, no path
//! store already holds the digest → activate it (no transfer)
//! peers in the rank table        → fetch from <peer data ip>:<--weights-port>, striped,
//!                                  every chunk verified; if NO peer serves the manifest
//!                                  (the group's first members) ↓
//! declared source (local dir)    → WeightStore::import_dir: copied, manifest of the copy
//!                                  must hash to spec.weights.digest (else DigestMismatch)
//! ```
//! Either way the set lands atomically under the node store's `versions/<hex>` (shared by
//! every group with that digest) and the group's own link,
//! `<store>/groups/<namespace>_<group>/current`, is swapped to it; that link is the
//! worker's weights path. Another group's link on the same node never moves.
//! The decisions ([`peer_sources`], [`local_source`], [`after_peers`], [`reason_of`])
//! are pure; [`EngineSyncer`] does the I/O.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::sync_warnings::SyncWarnings;
use super::weights::{
    SyncFailure, SyncFuture, WeightsOutcome, WeightsRequest, WeightsSyncer, reasons,
};
use crate::weights::{
    CurrentLink, DEFAULT_CHUNK_SIZE, Digest, FetchRequest, GroupSecret, Manifest, Progress,
    SyncEvent, Timeouts, WeightStore, WeightsError, fetch,
};

/// The chunk-server addresses of the peers that may hold the set: each peer's data
/// address at `port`, without this node (by name or address), unparseable ones skipped,
/// duplicates removed, order kept (pure).
pub fn peer_sources(
    peers: &[(String, String)],
    node: &str,
    local_ip: IpAddr,
    port: u16,
) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for (name, ip) in peers {
        let Ok(ip) = ip.trim().parse::<IpAddr>() else {
            continue;
        };
        if name == node || ip == local_ip {
            continue;
        }
        let a = SocketAddr::new(ip, port);
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// The declared source as a local directory path, if it names one: an absolute path or
/// a `file://` URL (pure; whether it exists is checked at import).
pub fn local_source(source: &str) -> Option<PathBuf> {
    let s = source.trim();
    let path = s.strip_prefix("file://").unwrap_or(s);
    Path::new(path).is_absolute().then(|| PathBuf::from(path))
}

/// The fixed reason a weights error is reported with (pure).
pub fn reason_of(e: &WeightsError) -> &'static str {
    match e {
        WeightsError::DigestMismatch { .. } => reasons::DIGEST_MISMATCH,
        WeightsError::NoSources { .. }
        | WeightsError::Timeout { .. }
        | WeightsError::Auth { .. }
        | WeightsError::Protocol { .. } => reasons::PEER_FETCH_FAILED,
        WeightsError::Io { .. } | WeightsError::Invalid(_) => reasons::SYNC_FAILED,
    }
}

/// What to do after fetching from the peers failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterPeers {
    /// No peer served the manifest: this is one of the group's first members; import.
    Import(PathBuf),
    /// Give up with (reason, message).
    Fail(&'static str, String),
}

/// Source-vs-peers decision after a failed peer fetch (pure): only when no peer served
/// the manifest (nobody holds the set yet) does the member fall back to the declared
/// source; a transfer that failed part-way is a peer failure, reported as such.
pub fn after_peers(manifest_obtained: bool, err: &WeightsError, source: &str) -> AfterPeers {
    if manifest_obtained {
        return AfterPeers::Fail(
            reason_of(err),
            format!("fetching the weights from peers failed: {err}"),
        );
    }
    match local_source(source) {
        Some(p) => AfterPeers::Import(p),
        None => AfterPeers::Fail(
            reasons::NO_SOURCE,
            format!(
                "no peer serves the weights ({err}) and the declared source {source:?} is not a local directory this agent can import"
            ),
        ),
    }
}

/// Syncs weights into one node-wide [`WeightStore`] (the one the agent's `ChunkServer`
/// serves), fetching from peers' chunk servers at `port` or importing the source, and
/// points the member's group link at the set.
pub struct EngineSyncer {
    store: WeightStore,
    port: u16,
    secret: GroupSecret,
    /// Chunk size the digest was computed with (`spec.weights.digest`).
    pub chunk_size: u64,
    pub timeouts: Timeouts,
    /// One sync per set at a time on this node (two members of a group on one node).
    locks: Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>,
}

impl EngineSyncer {
    /// `secret` must be the one every agent's chunk server uses.
    pub fn new(store: WeightStore, port: u16, secret: GroupSecret) -> EngineSyncer {
        EngineSyncer {
            store,
            port,
            secret,
            chunk_size: DEFAULT_CHUNK_SIZE,
            timeouts: Timeouts {
                connect: Duration::from_secs(3),
                ..Timeouts::default()
            },
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The store synced into.
    pub fn store(&self) -> &WeightStore {
        &self.store
    }

    fn lock_for(&self, d: &Digest) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(*d)
            .or_default()
            .clone()
    }

    fn set_bytes(&self, d: &Digest) -> u64 {
        self.store
            .manifest_bytes(d)
            .and_then(|b| Manifest::parse(&b).ok())
            .map_or(0, |m| m.total_bytes())
    }

    async fn import(
        &self,
        dir: PathBuf,
        digest: Digest,
        link: &CurrentLink,
        version: &str,
        started: Instant,
    ) -> Result<WeightsOutcome, SyncFailure> {
        let (store, chunk, l) = (self.store.clone(), self.chunk_size, link.clone());
        let d = dir.clone();
        let r = tokio::task::spawn_blocking(move || {
            if !d.is_dir() {
                return Err(WeightsError::Invalid(format!(
                    "the declared source {} is not a directory on this node",
                    d.display()
                )));
            }
            store.install_dir(&d, &digest, chunk)?;
            store.activate(&digest, &l)
        })
        .await
        .map_err(|e| SyncFailure::new(reasons::SYNC_FAILED, format!("import task: {e}")))?;
        match r {
            Ok(path) => {
                let bytes = self.set_bytes(&digest);
                tracing::info!(weights = %digest, source = %dir.display(), bytes, "weights imported from the declared source");
                Ok(WeightsOutcome {
                    path: Some(path.clone()),
                    bytes,
                    seconds: started.elapsed().as_secs_f64(),
                    message: format!(
                        "weights {version} ({digest}) imported from source {} and verified; {bytes} bytes at {}",
                        dir.display(),
                        path.display()
                    ),
                    warnings: Vec::new(),
                })
            }
            Err(e) => {
                let reason = reason_of(&e);
                let message = match &e {
                    WeightsError::DigestMismatch {
                        expected, actual, ..
                    } => format!(
                        "the weights in source {} hash to {actual}, but spec.weights.digest is {expected} (wrong digest, or the source changed); nothing was installed",
                        dir.display()
                    ),
                    _ => format!("importing weights from {} failed: {e}", dir.display()),
                };
                Err(SyncFailure::new(reason, message))
            }
        }
    }

    async fn sync_set(
        &self,
        req: &WeightsRequest,
        digest: Digest,
    ) -> Result<WeightsOutcome, SyncFailure> {
        let spec = req.spec.as_ref().expect("checked by the caller");
        let started = Instant::now();
        let link = CurrentLink::group(&req.namespace, &req.group)
            .map_err(|e| SyncFailure::new(reasons::SYNC_FAILED, e.to_string()))?;
        if self.store.is_complete(&digest) {
            let path = self
                .store
                .activate(&digest, &link)
                .map_err(|e| SyncFailure::new(reason_of(&e), e.to_string()))?;
            return Ok(WeightsOutcome {
                path: Some(path),
                bytes: 0,
                seconds: 0.0,
                message: format!(
                    "weights {} ({digest}) already held on this node and verified",
                    spec.version
                ),
                warnings: Vec::new(),
            });
        }
        let sources = peer_sources(&req.peers, &req.node, req.local_ip, self.port);
        if sources.is_empty() {
            return match local_source(&spec.source) {
                Some(dir) => {
                    self.import(dir, digest, &link, &spec.version, started)
                        .await
                }
                None => Err(SyncFailure::new(
                    reasons::NO_SOURCE,
                    format!(
                        "no peer may hold the weights and the declared source {:?} is not a local directory this agent can import",
                        spec.source
                    ),
                )),
            };
        }
        let manifest_seen = Arc::new(AtomicBool::new(false));
        let warnings: Arc<Mutex<SyncWarnings>> = Arc::default();
        let progress = {
            let (seen, warnings) = (manifest_seen.clone(), warnings.clone());
            let group = format!("{}/{}", req.namespace, req.group);
            Progress::with_callback(move |ev| match ev {
                SyncEvent::ManifestVerified { .. } => seen.store(true, Ordering::Relaxed),
                SyncEvent::CorruptChunk { index, source, .. } => {
                    tracing::warn!(%group, %source, index, "corrupt weights chunk; fetching it elsewhere");
                    warnings
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .corrupt(*index, *source);
                }
                SyncEvent::SourceLost {
                    source,
                    reason,
                    requeued,
                } => {
                    tracing::warn!(%group, %source, %reason, requeued, "weights source lost");
                    warnings.lock().unwrap_or_else(|e| e.into_inner()).lost(
                        *source,
                        reason.clone(),
                        *requeued,
                    );
                }
                _ => {}
            })
        };
        let mut fr = FetchRequest::new(
            digest,
            sources.clone(),
            self.store.clone(),
            self.secret.clone(),
        );
        fr.timeouts = self.timeouts;
        fr.bind = Some(req.local_ip);
        fr.link = link.clone();
        // One Event per reason naming every source (see `sync_warnings`).
        let taken = |w: &Arc<Mutex<SyncWarnings>>| {
            std::mem::take(&mut *w.lock().unwrap_or_else(|e| e.into_inner())).events()
        };
        match fetch(fr, progress).await {
            Ok(report) => {
                let p = &report.progress;
                let served: Vec<String> = p
                    .per_source
                    .iter()
                    .filter(|(_, s)| s.chunks > 0)
                    .map(|(a, s)| format!("{a} ({} chunks)", s.chunks))
                    .collect();
                Ok(WeightsOutcome {
                    path: Some(self.store.link_path(&link)),
                    bytes: p.bytes_fetched,
                    seconds: p.elapsed.as_secs_f64(),
                    message: format!(
                        "weights {} ({digest}) fetched from peers [{}], every chunk verified: {} bytes in {:.2} s ({} corrupt chunk(s) refetched, {} source(s) lost)",
                        spec.version,
                        served.join(", "),
                        p.bytes_fetched,
                        p.elapsed.as_secs_f64(),
                        p.corrupt_chunks,
                        p.sources_lost,
                    ),
                    warnings: taken(&warnings),
                })
            }
            Err(e) => {
                let seen = manifest_seen.load(Ordering::Relaxed);
                match after_peers(seen, &e, &spec.source) {
                    AfterPeers::Import(dir) => {
                        tracing::info!(weights = %digest, peers = ?sources, error = %e,
                            "no peer holds the weights yet; importing from the declared source");
                        let mut out = self
                            .import(dir, digest, &link, &spec.version, started)
                            .await;
                        match &mut out {
                            Ok(o) => o.warnings = taken(&warnings),
                            Err(f) => f.warnings = taken(&warnings),
                        }
                        out
                    }
                    AfterPeers::Fail(reason, message) => Err(SyncFailure {
                        reason,
                        message,
                        warnings: taken(&warnings),
                    }),
                }
            }
        }
    }
}

impl WeightsSyncer for EngineSyncer {
    fn sync<'a>(&'a self, req: &'a WeightsRequest) -> SyncFuture<'a> {
        Box::pin(async move {
            let Some(spec) = &req.spec else {
                return Ok(WeightsOutcome {
                    path: None,
                    bytes: 0,
                    seconds: 0.0,
                    message: "the group declares no weights".into(),
                    warnings: Vec::new(),
                });
            };
            let digest: Digest = spec.digest.trim().parse().map_err(|e: WeightsError| {
                SyncFailure::new(reasons::INVALID_SPEC, format!("spec.weights.digest: {e}"))
            })?;
            let lock = self.lock_for(&digest);
            let _guard = lock.lock().await;
            self.sync_set(req, digest).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn peer_sources_are_the_other_nodes_data_addresses_at_the_weights_port() {
        let local: IpAddr = "198.18.0.10".parse().unwrap();
        let got = peer_sources(
            &peers(&[
                ("n1", "198.18.0.11"),
                ("self", "198.18.0.12"), // this node by name
                ("n0", "198.18.0.10"),   // this node by address
                ("n2", "not-an-ip"),
                ("n1", "198.18.0.11"), // duplicate
                ("n3", "198.18.0.13"),
            ]),
            "self",
            local,
            7512,
        );
        assert_eq!(
            got,
            [
                "198.18.0.11:7512".parse::<SocketAddr>().unwrap(),
                "198.18.0.13:7512".parse().unwrap()
            ]
        );
        assert!(peer_sources(&[], "self", local, 7512).is_empty());
    }

    #[test]
    fn only_absolute_paths_and_file_urls_are_local_sources() {
        assert_eq!(local_source("/models/m1"), Some("/models/m1".into()));
        assert_eq!(local_source("file:///models/m1"), Some("/models/m1".into()));
        assert_eq!(local_source("https://hub/m1"), None);
        assert_eq!(local_source("s3://bucket/m1"), None);
        assert_eq!(local_source("relative/dir"), None);
    }

    fn no_sources() -> WeightsError {
        WeightsError::NoSources {
            manifest: Digest::of(b"m"),
            remaining_chunks: 0,
            tried: vec![],
        }
    }

    #[test]
    fn first_members_import_from_the_source_only_when_no_peer_serves_the_manifest() {
        // Nobody holds the set yet: the first members import.
        assert_eq!(
            after_peers(false, &no_sources(), "/models/m1"),
            AfterPeers::Import("/models/m1".into())
        );
        // Same, but the source is remote: a clear failure, not a pretend sync.
        let AfterPeers::Fail(reason, msg) = after_peers(false, &no_sources(), "https://hub/m1")
        else {
            panic!("expected a failure")
        };
        assert_eq!(reason, reasons::NO_SOURCE);
        assert!(msg.contains("https://hub/m1"), "{msg}");
        // A peer holds it but the transfer failed: a peer failure, no silent fallback.
        let AfterPeers::Fail(reason, _) = after_peers(true, &no_sources(), "/models/m1") else {
            panic!("expected a failure")
        };
        assert_eq!(reason, reasons::PEER_FETCH_FAILED);
    }

    #[test]
    fn errors_map_to_fixed_reasons() {
        let mismatch = WeightsError::DigestMismatch {
            subject: crate::weights::Subject::Manifest,
            peer: None,
            expected: Digest::of(b"a"),
            actual: Digest::of(b"b"),
        };
        assert_eq!(
            reason_of(&mismatch),
            hcomm_crds::contract::PodReason::DigestMismatch.as_str()
        );
        assert_eq!(reason_of(&no_sources()), reasons::PEER_FETCH_FAILED);
        assert_eq!(
            reason_of(&WeightsError::Invalid("x".into())),
            reasons::SYNC_FAILED
        );
    }

    fn pattern() -> Vec<u8> {
        (0..300_000u32).map(|i| (i % 251) as u8).collect()
    }

    fn write_set(dir: &Path) {
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.bin"), pattern()).unwrap();
        std::fs::write(dir.join("sub/b.bin"), b"tensor").unwrap();
    }

    fn req(spec: Option<hcomm_crds::WeightsSpec>, peers: Vec<(String, String)>) -> WeightsRequest {
        WeightsRequest {
            namespace: "ns".into(),
            group: "g".into(),
            pod: "p".into(),
            node: "self".into(),
            spec,
            interface: "lo".into(),
            local_ip: "127.0.0.1".parse().unwrap(),
            peers,
            epoch: 1,
        }
    }

    #[tokio::test]
    async fn the_first_member_imports_a_verified_set_and_a_wrong_digest_is_refused() {
        let tmp = std::env::temp_dir().join(format!(
            "hcomm-weights-sync-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        let src = tmp.join("src");
        write_set(&src);
        let digest = crate::weights::manifest_digest(&src, 64 << 10).unwrap();
        let store = WeightStore::open(tmp.join("store")).unwrap();
        let mut s = EngineSyncer::new(store, 1, GroupSecret::new(b"s".to_vec()));
        s.chunk_size = 64 << 10;
        assert_eq!(s.sync(&req(None, vec![])).await.unwrap().path, None);

        let spec = |d: String| {
            Some(hcomm_crds::WeightsSpec {
                source: src.display().to_string(),
                version: "v1".into(),
                digest: d,
            })
        };
        let bad = s
            .sync(&req(spec(Digest::of(b"other").to_string()), vec![]))
            .await
            .unwrap_err();
        assert_eq!(
            bad.reason,
            hcomm_crds::contract::PodReason::DigestMismatch.as_str()
        );
        assert!(bad.message.contains(&digest.to_string()), "{}", bad.message);
        let link = |st: &WeightStore| st.link_path(&CurrentLink::group("ns", "g").unwrap());
        assert!(!link(s.store()).exists());

        let ok = s
            .sync(&req(spec(digest.to_string()), vec![]))
            .await
            .unwrap();
        assert_eq!(ok.path, Some(link(s.store())));
        assert!(ok.path.as_ref().unwrap().ends_with("groups/ns_g/current"));
        assert!(
            ok.message.contains("imported from source"),
            "{}",
            ok.message
        );
        assert_eq!(ok.bytes, 300_006);
        assert_eq!(
            std::fs::read(link(s.store()).join("sub/b.bin")).unwrap(),
            b"tensor"
        );
        // Held now: a second member on this node activates it without a transfer.
        let again = s
            .sync(&req(spec(digest.to_string()), vec![]))
            .await
            .unwrap();
        assert!(again.message.contains("already held"), "{}", again.message);

        let garbage = s
            .sync(&req(spec("sha256:zz".into()), vec![]))
            .await
            .unwrap_err();
        assert_eq!(garbage.reason, reasons::INVALID_SPEC);
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[tokio::test]
    async fn a_later_member_fetches_from_a_peer_and_without_holders_falls_back_to_the_source() {
        let tmp = std::env::temp_dir().join(format!(
            "hcomm-weights-peer-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let src = tmp.join("src");
        write_set(&src);
        let digest = crate::weights::manifest_digest(&src, 64 << 10).unwrap();
        let secret = GroupSecret::new(b"agents".to_vec());
        let spec = Some(hcomm_crds::WeightsSpec {
            source: src.display().to_string(),
            version: "v1".into(),
            digest: digest.to_string(),
        });
        // Member 0 (127.0.0.1) serves its store; nobody holds the set yet.
        let store0 = WeightStore::open(tmp.join("s0")).unwrap();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::weights::ChunkServer::serve(
            l,
            store0.clone(),
            crate::weights::ServerConfig::new(secret.clone()),
            async {
                let _ = stopped.await;
            },
        ));
        let mut s0 = EngineSyncer::new(store0, port, secret.clone());
        s0.chunk_size = 64 << 10;
        let mut r0 = req(spec.clone(), peers(&[("n1", "127.0.0.2")]));
        r0.node = "n0".into();
        // Its peer (n1) serves nothing: the first member imports from the source.
        let first = s0.sync(&r0).await.unwrap();
        assert!(
            first.message.contains("imported from source"),
            "{}",
            first.message
        );

        // Member 1 (127.0.0.2) fetches from member 0 over TCP.
        let mut s1 = EngineSyncer::new(WeightStore::open(tmp.join("s1")).unwrap(), port, secret);
        s1.chunk_size = 64 << 10;
        let mut r1 = req(spec, peers(&[("n0", "127.0.0.1")]));
        r1.node = "n1".into();
        r1.local_ip = "127.0.0.2".parse().unwrap();
        let second = s1.sync(&r1).await.unwrap();
        assert!(
            second.message.contains("fetched from peers [127.0.0.1"),
            "{}",
            second.message
        );
        assert_eq!(second.bytes, 300_006);
        let link1 = s1
            .store()
            .link_path(&CurrentLink::group("ns", "g").unwrap());
        assert_eq!(second.path, Some(link1.clone()));
        assert_eq!(std::fs::read(link1.join("a.bin")).unwrap(), pattern());
        let _ = stop.send(());
        server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
