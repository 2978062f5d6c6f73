//! Failures are loud and bounded: wrong secret, stale epoch, unreachable root, a peer that
//! dies or hangs mid-operation, strangers sending garbage.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_comm::tcp::{BindSpec, Endpoint, EndpointConfig, RootInfo, TcpComm};
use hcomm_comm::{CommError, Communicator, DataType, ReduceOp};
use tokio::io::AsyncWriteExt;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_with_the_wrong_secret_is_refused_on_both_sides() {
    let good = Endpoint::bind(ep_cfg()).await.unwrap();
    let mut bad_cfg = ep_cfg();
    bad_cfg.secret = b"not-the-secret".to_vec();
    let bad = Endpoint::bind(bad_cfg).await.unwrap();
    let root = good.create_root_info();
    let mut c0 = cfg(2, 0, root, 1);
    c0.init_timeout = Duration::from_secs(2);
    let (r0, r1) = tokio::join!(
        TcpComm::init_on(good.clone(), c0),
        TcpComm::init_on(bad.clone(), cfg(2, 1, root, 1))
    );
    let e1 = r1.unwrap_err();
    assert_eq!(e1.category(), "auth", "{e1}");
    assert!(e1.to_string().contains(&root.addr.to_string()), "{e1}");
    let e0 = r0.unwrap_err();
    assert_eq!(e0.category(), "timeout", "{e0}");
    let rej = good.rejections();
    assert!(rej.iter().any(|r| r.category == "auth"), "{rej:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_from_an_older_epoch_is_refused_with_a_named_error_on_both_sides() {
    let newer = Endpoint::bind(ep_cfg()).await.unwrap();
    newer.advance_epoch(5);
    let older = Endpoint::bind(ep_cfg()).await.unwrap();
    let err = older.dial(newer.listen_addr(), 4).await.unwrap_err();
    match &err {
        CommError::StaleEpoch {
            local_epoch,
            remote_epoch,
            ..
        } => {
            assert_eq!((*local_epoch, *remote_epoch), (4, 5));
        }
        e => panic!("expected stale_epoch, got {e}"),
    }
    assert!(err.to_string().contains(&newer.listen_addr().to_string()));
    // The refusing side names it too (give its handshake task a moment to record it).
    let deadline = Instant::now() + Duration::from_secs(2);
    while !newer
        .rejections()
        .iter()
        .any(|r| r.category == "stale_epoch")
    {
        assert!(Instant::now() < deadline, "{:?}", newer.rejections());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The current epoch and newer ones are welcome.
    older.dial(newer.listen_addr(), 5).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_root_fails_within_the_connect_timeout_naming_it() {
    // A port that was just free: nothing listens there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let root = RootInfo { addr, id: [1; 16] };
    let mut ec = EndpointConfig::new(BindSpec::loopback(), SECRET.to_vec());
    ec.connect_timeout = Duration::from_millis(700);
    let t = Instant::now();
    let err = TcpComm::init(ec, cfg(2, 1, root, 1)).await.unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(err.category(), "unreachable", "{err}");
    let s = err.to_string();
    assert!(
        s.contains(&addr.to_string()) && s.contains("rendezvous") && s.contains("127.0.0.1"),
        "{s}"
    );
}

fn names_rank(e: &CommError, rank: usize) -> bool {
    e.to_string().contains(&format!("rank {rank}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_peer_dies_mid_all_reduce_every_other_rank_fails_fast_naming_it() {
    let op_timeout = Duration::from_secs(4);
    let comms = world_with(4, 1, |c| {
        c.op_timeout = op_timeout;
        c.segment_bytes = 4 << 10;
    })
    .await;
    let victim_addr = comms[2].endpoint().listen_addr().to_string();
    let mut comms: Vec<Option<Arc<TcpComm>>> = comms.into_iter().map(Some).collect();
    let victim = comms[2].take().unwrap();
    // The victim starts the all-reduce alone, so it cannot finish it (its ring neighbours are
    // not in the operation yet) and is certainly mid-operation, then its task is aborted (as
    // if the process died). Awaiting the aborted task proves its future is dropped before any
    // survivor starts: aborting while survivors ran raced with the victim finishing the
    // all-reduce on a fast machine.
    let vt = tokio::spawn(async move {
        let mut buf = vec![0u8; 4 << 20];
        let _ = victim
            .all_reduce(&mut buf, DataType::F32, ReduceOp::Sum)
            .await;
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    vt.abort();
    assert!(vt.await.unwrap_err().is_cancelled());
    let started = Instant::now();
    // Survivors keep their communicators (and endpoints) alive, as an agent would.
    let others: Vec<_> = comms
        .into_iter()
        .flatten()
        .map(|c| {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4 << 20];
                let r = c.all_reduce(&mut buf, DataType::F32, ReduceOp::Sum).await;
                (r, Instant::now(), c)
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in others {
        results.push(tokio::time::timeout(SCENARIO, t).await.unwrap().unwrap());
    }
    for (r, at, _) in results {
        let e = r.expect_err("a rank finished an all-reduce its peer never completed");
        assert!(at - started < op_timeout + Duration::from_secs(1), "{e}");
        assert!(names_rank(&e, 2), "error does not name rank 2: {e}");
        assert!(
            ["peer_closed", "aborted", "timeout"].contains(&e.category()),
            "{e}"
        );
        if e.category() == "peer_closed" {
            assert!(e.to_string().contains(&victim_addr), "{e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_joins_the_operation_times_out_naming_it_then_the_comm_is_poisoned() {
    let comms = world_with(3, 1, |c| c.op_timeout = Duration::from_millis(800)).await;
    let started = Instant::now();
    let res = on_all(&comms[..2], |c| async move {
        let mut buf = vec![1u8; 64];
        c.all_reduce(&mut buf, DataType::U8, ReduceOp::Sum).await
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    // Whoever times out first, both ranks end up naming rank 2 (the one that never came).
    for e in res.iter().map(|r| r.as_ref().unwrap_err()) {
        assert!(["timeout", "aborted"].contains(&e.category()), "{e}");
        assert_eq!(e.peer_rank(), Some(2), "{e}");
        assert!(e.to_string().contains("all_reduce"), "{e}");
    }
    // Never a silent wrong result afterwards: the communicator refuses further work.
    let mut buf = vec![0u8; 4];
    let e = comms[0]
        .all_reduce(&mut buf, DataType::U8, ReduceOp::Sum)
        .await
        .unwrap_err();
    assert_eq!(e.category(), "aborted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_a_stranger_is_refused_and_the_endpoint_keeps_working() {
    let comms = world(2).await;
    let addr = comms[0].endpoint().listen_addr();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n......................")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !comms[0]
        .endpoint()
        .rejections()
        .iter()
        .any(|r| r.category == "protocol")
    {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            comms[0].endpoint().rejections()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    on_all(&comms, |c| async move { c.barrier().await.unwrap() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatched_sizes_across_ranks_are_an_error_not_a_wrong_result() {
    let comms = world_with(2, 1, |c| c.op_timeout = Duration::from_secs(2)).await;
    let res = on_all(&comms, |c| async move {
        let mut buf = vec![0u8; if c.rank() == 0 { 8 } else { 12 }];
        c.broadcast(&mut buf, 0).await
    })
    .await;
    assert!(
        res.iter()
            .any(|r| r.as_ref().is_err_and(|e| e.category() == "protocol")),
        "{res:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_disagreeing_on_the_data_type_get_an_error_not_a_wrong_result() {
    let comms = world_with(2, 1, |c| c.op_timeout = Duration::from_millis(600)).await;
    let res = on_all(&comms, |c| async move {
        let dtype = if c.rank() == 0 {
            DataType::I32
        } else {
            DataType::F32
        };
        let mut buf = vec![0u8; 64];
        c.all_reduce(&mut buf, dtype, ReduceOp::Sum).await
    })
    .await;
    for r in &res {
        let e = r.as_ref().unwrap_err();
        assert!(["timeout", "aborted"].contains(&e.category()), "{e}");
    }
}
