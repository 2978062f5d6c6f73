//! Fixtures for the weight-sync tests: temporary directories, deterministic weights sets,
//! sources (a store plus a running `ChunkServer` on a loopback address) and fast timeouts.
#![allow(dead_code)] // each test file uses a different subset

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hcomm_agent::weights::{
    ChunkHash, ChunkServer, Digest, FetchRequest, GroupSecret, Manifest, Place, ServerConfig,
    ServerStats, Timeouts, WeightStore,
};
use rand::{RngCore, SeedableRng, rngs::StdRng};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub const MIB: usize = 1 << 20;
/// 1 MiB chunks in tests: enough chunks to stripe a 64 MiB set over several sources.
pub const CHUNK: u64 = 1 << 20;

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "hcomm-weights-{label}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn random_file(path: &Path, len: usize, seed: u64) {
    let mut data = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut data);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

/// A weights set of about `mib` MiB: two shards of odd sizes, a nested file, a config
/// and an empty file — deterministic for a given seed.
pub fn generate_set(dir: &Path, mib: usize, seed: u64) {
    let big = mib * MIB * 5 / 8 + 12_345;
    let rest = mib * MIB - big - 4096;
    random_file(&dir.join("model-00001-of-00002.safetensors"), big, seed);
    random_file(
        &dir.join("model-00002-of-00002.safetensors"),
        rest,
        seed + 1,
    );
    random_file(&dir.join("tokenizer/vocab.bin"), 4096, seed + 2);
    std::fs::write(dir.join("config.json"), br#"{"layers": 2}"#).unwrap();
    std::fs::write(dir.join("EMPTY"), b"").unwrap();
}

/// The digest of a generated set.
pub fn digest_of(dir: &Path) -> Digest {
    Manifest::build(dir, CHUNK).unwrap().digest()
}

pub fn secret() -> GroupSecret {
    GroupSecret::new(b"group-secret-for-tests".to_vec())
}

/// Loopback address 127.0.0.`n` (distinct "hosts" on `lo`).
pub fn host(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// A running chunk server; `kill()` aborts it and all its connections.
pub struct Source {
    pub addr: SocketAddr,
    pub store: WeightStore,
    pub task: JoinHandle<()>,
    pub stats: Arc<ServerStats>,
    pub _dir: Option<TempDir>,
}

impl Source {
    pub fn kill(&self) {
        self.task.abort();
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `store` on `ip`:0 with `config`.
pub async fn serve(store: WeightStore, ip: IpAddr, config: ServerConfig) -> Source {
    serve_after(store, ip, config, async {}).await
}

/// Serves `store` on `ip`:0 with `config` once `start` completes: the port is bound at once,
/// so a fetch can list it, but connections wait in the backlog until then. Lets a test
/// decide which source answers first instead of racing them.
pub async fn serve_after(
    store: WeightStore,
    ip: IpAddr,
    config: ServerConfig,
    start: impl std::future::Future<Output = ()> + Send + 'static,
) -> Source {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = store.clone();
    let stats = Arc::new(ServerStats::default());
    let st = stats.clone();
    let task = tokio::spawn(async move {
        start.await;
        let _ =
            ChunkServer::serve_with_stats(listener, s, config, st, std::future::pending()).await;
    });
    Source {
        addr,
        store,
        task,
        stats,
        _dir: None,
    }
}

/// A first member: imports `set` (checked against `digest`) into a fresh store and serves it.
pub async fn origin(set: &Path, digest: Digest, ip: IpAddr, config: ServerConfig) -> Source {
    origin_after(set, digest, ip, config, async {}).await
}

/// [`origin`] serving only once `start` completes (see [`serve_after`]).
pub async fn origin_after(
    set: &Path,
    digest: Digest,
    ip: IpAddr,
    config: ServerConfig,
    start: impl std::future::Future<Output = ()> + Send + 'static,
) -> Source {
    let dir = TempDir::new("origin");
    let store = WeightStore::open(dir.path().join("store")).unwrap();
    let (s, set) = (store.clone(), set.to_path_buf());
    tokio::task::spawn_blocking(move || s.import_dir(&set, &digest, CHUNK))
        .await
        .unwrap()
        .unwrap();
    let mut src = serve_after(store, ip, config, start).await;
    src._dir = Some(dir);
    src
}

/// Deadlines short enough that a failing test fails in seconds.
pub fn fast_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(3),
        handshake: Duration::from_secs(3),
        response: Duration::from_secs(10),
        stall: Duration::from_secs(20),
        have_poll: Duration::from_millis(20),
    }
}

/// A fetch request with test defaults.
pub fn request(digest: Digest, sources: Vec<SocketAddr>, dest: WeightStore) -> FetchRequest {
    let mut r = FetchRequest::new(digest, sources, dest, secret());
    r.timeouts = fast_timeouts();
    r
}

/// Place `index` of `count` joiners syncing together.
pub fn stripe(index: usize, count: usize) -> Place {
    Place::Stripe { index, count }
}

/// Asserts that the store's `current` holds exactly the set `digest`.
pub fn assert_installed(store: &WeightStore, digest: Digest) {
    assert_eq!(store.current().unwrap(), Some(digest));
    let built = Manifest::build_each(&store.current_path(), CHUNK, &ChunkHash::ALL).unwrap();
    assert!(
        built.iter().any(|m| m.digest() == digest),
        "installed files differ from the set"
    );
}

/// A joiner: an empty store, already serving (what it verifies, it serves).
pub async fn joiner(ip: IpAddr) -> Source {
    let dir = TempDir::new("joiner");
    let store = WeightStore::open(dir.path().join("store")).unwrap();
    let mut src = serve(store, ip, ServerConfig::new(secret())).await;
    src._dir = Some(dir);
    src
}

/// Bytes served so far.
pub fn served(s: &Source) -> u64 {
    s.stats
        .bytes_served
        .load(std::sync::atomic::Ordering::Relaxed)
}
