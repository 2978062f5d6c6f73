//! The real [`WeightsSyncer`]: the member lifecycle's Syncing phase on top of the
//! weight-sync engine (`crate::weights`).
//!
//! ```text
//! spec.weights absent            → synced, no path
//! store already holds the digest → activate it (no transfer)
//! peers in the rank table        → fetch from <peer data ip>:<--weights-port>, striped,
//!                                  every chunk verified; if NO peer serves the manifest
//!                                  (the group's first members) ↓
//! declared source (local dir)    → only below the agent's --weights-source-root(s)
//!                                  (else WeightsSourceRefused, nothing read; see
//!                                  `crate::weights::source`), then
//!                                  WeightStore::install_source: copied, manifest of the
//!                                  copy must hash to spec.weights.digest (else
//!                                  DigestMismatch; the partial copy is removed)
//! ```
//! Either way the set lands atomically under the node store's `versions/<hex>` (shared by
//! every group with that digest) and the group's own link,
//! `<store>/groups/<namespace>_<group>/current`, is swapped to it; that link is the
//! worker's weights path. Another group's link on the same node never moves.
//! Peers are asked as members of the group (namespace, name, UID) with the group's own
//! secret (`crate::group_secrets`): their chunk servers serve only the set the group's
//! spec names (`super::weights_authority`). No secret: `GroupSecretMissing`, nothing
//! fetched. The decisions ([`peer_sources`], [`local_source`], [`after_peers`],
//! [`reason_of`]) are pure; [`EngineSyncer`] does the I/O.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hcomm_crds::contract::PodReason;

use super::sync_warnings::SyncWarnings;
use super::weights::{
    PeerFeed, SyncFailure, SyncFuture, WeightsOutcome, WeightsRequest, WeightsSyncer,
};
use crate::group_secrets::{FixedSecret, SecretLookup};
use crate::weights::{
    CurrentLink, Digest, FetchRequest, GroupId, GroupSecret, IMPORT_CHUNK_SIZES, Manifest,
    Progress, SourceRoots, SyncEvent, Timeouts, WeightStore, WeightsError, fetch,
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
pub fn reason_of(e: &WeightsError) -> PodReason {
    match e {
        WeightsError::DigestMismatch { .. } => PodReason::DigestMismatch,
        WeightsError::NoSources { .. }
        | WeightsError::Timeout { .. }
        | WeightsError::Auth { .. }
        | WeightsError::Protocol { .. } => PodReason::PeerFetchFailed,
        WeightsError::Io { .. } | WeightsError::Invalid(_) => PodReason::SyncFailed,
        WeightsError::SourceRefused(_) => PodReason::WeightsSourceRefused,
    }
}

/// What to do after fetching from the peers failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterPeers {
    /// No peer served the manifest: this is one of the group's first members; import.
    Import(PathBuf),
    /// Give up with (reason, message).
    Fail(PodReason, String),
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
            PodReason::NoWeightsSource,
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
    /// The group secret each fetch authenticates with (the agent: the groups' Secrets).
    pub secrets: Arc<dyn SecretLookup>,
    /// The chunk sizes a declared source's digest (`spec.weights.digest`) may have been
    /// computed with, tried in order by an import.
    pub chunk_sizes: Vec<u64>,
    pub timeouts: Timeouts,
    /// Where declared local sources may lie (`--weights-source-root`); empty: none may,
    /// the weights come from peers only.
    pub source_roots: SourceRoots,
    /// One sync per set at a time on this node (two members of a group on one node).
    locks: Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>,
}

impl EngineSyncer {
    /// Every group authenticates with `secret` (set [`EngineSyncer::secrets`] for the
    /// groups' own).
    pub fn new(store: WeightStore, port: u16, secret: GroupSecret) -> EngineSyncer {
        EngineSyncer {
            store,
            port,
            secrets: Arc::new(FixedSecret(secret)),
            chunk_sizes: IMPORT_CHUNK_SIZES.to_vec(),
            timeouts: Timeouts {
                connect: Duration::from_secs(3),
                ..Timeouts::default()
            },
            source_roots: SourceRoots::default(),
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
        let (store, sizes, l) = (self.store.clone(), self.chunk_sizes.clone(), link.clone());
        let (d, roots) = (dir.clone(), self.source_roots.clone());
        let r = tokio::task::spawn_blocking(move || {
            let source = roots.open(&d)?;
            store.install_source(&source, &digest, &sizes)?;
            store.activate(&digest, &l)
        })
        .await
        .map_err(|e| SyncFailure::new(PodReason::SyncFailed, format!("import task: {e}")))?;
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
                    WeightsError::SourceRefused(r) => format!(
                        "the declared source {} is refused: {r}; nothing was read or installed",
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
        more: Option<PeerFeed>,
    ) -> Result<WeightsOutcome, SyncFailure> {
        let spec = req.spec.as_ref().expect("checked by the caller");
        let started = Instant::now();
        let link = CurrentLink::group(&req.namespace, &req.group)
            .map_err(|e| SyncFailure::new(PodReason::SyncFailed, e.to_string()))?;
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
                    PodReason::NoWeightsSource,
                    format!(
                        "no peer may hold the weights and the declared source {:?} is not a local directory this agent can import",
                        spec.source
                    ),
                )),
            };
        }
        let group = GroupId::new(&req.namespace, &req.group, &req.group_uid);
        let secret = self.secrets.secret(&group).await.map_err(|e| {
            SyncFailure::new(
                PodReason::GroupSecretMissing,
                format!("cannot fetch the weights from peers without the group's secret: {e}"),
            )
        })?;
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
        let mut fr = FetchRequest::new(digest, sources.clone(), self.store.clone(), secret);
        fr.group = group;
        fr.timeouts = self.timeouts;
        fr.bind = Some(req.local_ip);
        fr.link = link.clone();
        fr.place = req.place;
        let (sources_tx, sources_rx) = tokio::sync::watch::channel(sources.clone());
        fr.more_sources = more.is_some().then_some(sources_rx);
        // Peers as the fetch's sources: this node left out, at the chunk servers' port.
        let learn = async {
            if let Some(mut more) = more {
                while more.changed().await.is_ok() {
                    let peers = more.borrow_and_update().clone();
                    sources_tx.send_replace(peer_sources(
                        &peers,
                        &req.node,
                        req.local_ip,
                        self.port,
                    ));
                }
            }
            std::future::pending::<()>().await
        };
        // One Event per reason naming every source (see `sync_warnings`).
        let taken = |w: &Arc<Mutex<SyncWarnings>>| {
            std::mem::take(&mut *w.lock().unwrap_or_else(|e| e.into_inner())).events()
        };
        let fetched = tokio::select! {
            r = fetch(fr, progress) => r,
            () = learn => unreachable!("learning the peers never ends"),
        };
        match fetched {
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
        self.sync_with(req, None)
    }

    fn sync_growing<'a>(&'a self, req: &'a WeightsRequest, more: PeerFeed) -> SyncFuture<'a> {
        self.sync_with(req, Some(more))
    }
}

impl EngineSyncer {
    fn sync_with<'a>(&'a self, req: &'a WeightsRequest, more: Option<PeerFeed>) -> SyncFuture<'a> {
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
                SyncFailure::new(
                    PodReason::InvalidWeightsSpec,
                    format!("spec.weights.digest: {e}"),
                )
            })?;
            let lock = self.lock_for(&digest);
            let _guard = lock.lock().await;
            self.sync_set(req, digest, more).await
        })
    }
}

#[cfg(test)]
#[path = "weights_sync_tests.rs"]
mod tests;
