//! The chunk server's accept loop under a flood: 1000 idle connections from one address
//! take only that address's slots (the rest are closed on arrival and counted), a
//! connection from another address is still served at once, and a silent client is
//! closed by the handshake deadline.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hcomm_agent::weights::GroupSecret;
use hcomm_agent::weights::server::{ChunkServer, LIMITS, ServerConfig};
use hcomm_agent::weights::store::WeightStore;
use hcomm_comm::listen::{Guard, Limits, Refusal};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// An idle connection to `to` from the loopback address `from` (another host stand-in).
async fn idle_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from((from, 0))).unwrap();
    s.connect(to).await.unwrap()
}

/// A chunk server on an empty store, with `limits`; returns its address and guard.
async fn server(limits: Limits) -> (SocketAddr, std::sync::Arc<Guard>, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let store = WeightStore::open(dir.path()).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let guard = Guard::new("weights", limits);
    let config = ServerConfig {
        admission: Some(guard.clone()),
        handshake_timeout: limits.handshake,
        ..ServerConfig::new(GroupSecret::new(b"k".to_vec()))
    };
    tokio::spawn(ChunkServer::serve(l, store, config, std::future::pending()));
    (addr, guard, dir)
}

/// Whether the server closes `s` (EOF or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // handshake bytes from the server
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_takes_only_its_share_of_the_chunk_server() {
    let (addr, guard, _dir) = server(LIMITS).await;
    let mut flood = Vec::new();
    for _ in 0..1000 {
        flood.push(idle_from([127, 0, 0, 2], addr).await);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while guard.counts().refused(Refusal::PerPeer) < (1000 - LIMITS.per_peer) as u64 {
        assert!(Instant::now() < deadline, "{:?}", guard.counts());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(guard.counts().open, LIMITS.per_peer);
    // Another address is admitted at once (it holds a slot while it sends nothing).
    let _other = idle_from([127, 0, 0, 1], addr).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while guard.counts().open != LIMITS.per_peer + 1 {
        assert!(Instant::now() < deadline, "{:?}", guard.counts());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_of_the_chunk_server_is_closed_by_the_handshake_deadline() {
    let (addr, guard, _dir) = server(Limits {
        handshake: Duration::from_millis(300),
        ..LIMITS
    })
    .await;
    let mut silent = idle_from([127, 0, 0, 3], addr).await;
    let start = Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    while guard.counts().refused(Refusal::Deadline) != 1 || guard.counts().open != 0 {
        assert!(Instant::now() < deadline, "{:?}", guard.counts());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A scratch directory removed on drop (no extra dependency for one test).
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            let p = std::env::temp_dir().join(format!(
                "hcomm-chunk-admission-{}-{:x}",
                std::process::id(),
                rand_suffix()
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    fn rand_suffix() -> u64 {
        use std::time::{SystemTime, UNIX_EPOCH};
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
