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

/// A server whose listener admits 2 handshakes per address at once.
async fn narrow_server(handshake: Duration) -> std::sync::Arc<Endpoint> {
    let mut cfg = ep_cfg();
    cfg.admission = Some(Guard::new(
        "comm",
        Limits {
            per_peer: 2,
            handshake,
            ..COMM_LIMITS
        },
    ));
    Endpoint::bind(cfg).await.unwrap()
}

/// Every member of one node dialling at an epoch may take more handshake slots of a peer
/// node's listener than it gives one address; those not admitted try again, and all link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_dialers_from_one_address_than_its_slots_all_link() {
    let server = narrow_server(COMM_LIMITS.handshake).await;
    let mut dialers = Vec::new();
    for _ in 0..12 {
        dialers.push(Endpoint::bind(ep_cfg()).await.unwrap());
    }
    let addr = server.listen_addr();
    let links = futures::future::join_all(dialers.iter().map(|d| d.dial(addr, 0)));
    let results = tokio::time::timeout(SCENARIO, links)
        .await
        .expect("bounded");
    for (i, r) in results.iter().enumerate() {
        assert!(r.is_ok(), "dialer {i}: {r:?}");
    }
    assert!(
        server.admission().refused(Refusal::PerPeer) > 0,
        "the cap was never reached: {:?}",
        server.admission()
    );
}

/// A listener that never admits the address (its slots held by idle connections) is a
/// named error at the dialler's connect deadline, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dial_never_admitted_fails_named_at_its_deadline() {
    let server = narrow_server(Duration::from_secs(30)).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            idle_from([127, 0, 0, 1], server.listen_addr())
                .await
                .unwrap(),
        );
    }
    let dialer = Endpoint::bind(ep_cfg()).await.unwrap();
    let start = Instant::now();
    let e = tokio::time::timeout(SCENARIO, dialer.dial(server.listen_addr(), 0))
        .await
        .expect("bounded")
        .expect_err("never admitted");
    let text = e.to_string();
    assert!(text.contains("not admitted"), "{text}");
    assert!(
        start.elapsed() < ep_cfg().connect_timeout + Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    drop(held);
}
