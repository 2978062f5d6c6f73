//! The acceptor's admission (`hcomm_comm::listen`): a flood of idle connections from one
//! address takes only that address's handshake slots, real peers still link at once, and
//! a silent stranger is closed by the handshake deadline.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hcomm_comm::listen::{Guard, Limits, Refusal};
use hcomm_comm::tcp::{COMM_LIMITS, Endpoint};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::support::*;

/// An idle connection to `to` from the loopback address `from` (127.0.0.0/8 is all local,
/// so a second address stands in for another host).
async fn idle_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::from((from, 0)))?;
    s.connect(to).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_leaves_real_peers_linking_at_once() {
    let server = Endpoint::bind(ep_cfg()).await.unwrap();
    let peer = Endpoint::bind(ep_cfg()).await.unwrap();
    let mut flood = Vec::new();
    for _ in 0..300 {
        flood.push(
            idle_from([127, 0, 0, 2], server.listen_addr())
                .await
                .unwrap(),
        );
    }
    let start = Instant::now();
    tokio::time::timeout(SCENARIO, peer.dial(server.listen_addr(), 0))
        .await
        .expect("bounded")
        .expect("the real peer links");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "linking took {:?}",
        start.elapsed()
    );
    // The flood's surplus was refused at once (counted once the acceptor has seen it).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = server.admission();
        if c.refused(Refusal::PerPeer) >= (300 - COMM_LIMITS.per_peer) as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "{c:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stranger_is_closed_by_the_handshake_deadline() {
    let mut cfg = ep_cfg();
    cfg.admission = Some(Guard::new(
        "comm",
        Limits {
            handshake: Duration::from_millis(300),
            ..COMM_LIMITS
        },
    ));
    let server = Endpoint::bind(cfg).await.unwrap();
    let mut silent = idle_from([127, 0, 0, 3], server.listen_addr())
        .await
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("closed within the deadline")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(server.admission().refused(Refusal::Deadline), 1);
    assert_eq!(server.admission().open, 0, "the slot was freed");
}
