//! grow / shrink / split: membership changes keep the survivors' links (proved by connection
//! ids and dial/accept counters) and the next epoch is built while the current one serves.

use std::sync::Arc;
use std::time::Duration;

use hcomm_comm::tcp::{LinkInfo, TcpComm};
use hcomm_comm::{Communicator, DataType, ReduceOp};

use crate::support::*;

/// (peer address → connection id) of a communicator's links.
fn link_ids(c: &TcpComm) -> Vec<(std::net::SocketAddr, u64)> {
    let mut v: Vec<_> = c
        .links()
        .iter()
        .map(|l: &LinkInfo| (l.peer_addr, l.conn_id))
        .collect();
    v.sort();
    v
}

async fn sum_check(c: &TcpComm) {
    let n = c.world_size();
    let mut buf = encode(
        DataType::I64,
        &values(c.rank(), 9, DataType::I64, ReduceOp::Sum),
    );
    c.all_reduce(&mut buf, DataType::I64, ReduceOp::Sum)
        .await
        .unwrap();
    assert_eq!(buf, reference(n, 9, DataType::I64, ReduceOp::Sum));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_dials_only_the_joiners_while_the_old_epoch_keeps_serving() {
    let old = world(3).await;
    let before: Vec<_> = old
        .iter()
        .map(|c| (link_ids(c), c.endpoint().stats()))
        .collect();
    let joiner_eps = endpoints(2).await;
    let root = old[0].endpoint().create_root_info();

    // Joiners init at epoch 2 while the old ranks run epoch-1 all-reduces and grow.
    let joiners: Vec<_> = joiner_eps
        .into_iter()
        .enumerate()
        .map(|(i, ep)| tokio::spawn(TcpComm::init_on(ep, cfg(5, 3 + i, root, 2))))
        .collect();
    let grown = on_all(&old, move |c| async move {
        let serve = async {
            let mut served = 0;
            for _ in 0..20 {
                sum_check(&c).await;
                served += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            served
        };
        let (served, next) = tokio::join!(serve, c.grow(root, 5, 2));
        assert_eq!(served, 20, "the old epoch served throughout");
        next.unwrap()
    })
    .await;
    let mut next: Vec<Arc<TcpComm>> = grown.into_iter().map(Arc::new).collect();
    for j in joiners {
        next.push(Arc::new(j.await.unwrap().unwrap()));
    }

    for (i, c) in next.iter().take(3).enumerate() {
        assert_eq!((c.rank(), c.world_size(), c.epoch()), (i, 5, 2));
        let (old_links, old_stats) = &before[i];
        let now = link_ids(c);
        for l in old_links {
            assert!(now.contains(l), "rank {i} re-made its link to {}", l.0);
        }
        let stats = c.endpoint().stats();
        let new_links = (stats.dialed + stats.accepted) - (old_stats.dialed + old_stats.accepted);
        assert_eq!(new_links, 2, "rank {i} made links only to the two joiners");
    }
    on_all(&next, |c| async move { sum_check(&c).await }).await;
    drop(old);
    on_all(&next, |c| async move { sum_check(&c).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_renumbers_survivors_densely_and_keeps_their_links() {
    let comms = world(5).await;
    let before: Vec<_> = comms
        .iter()
        .map(|c| (link_ids(c), c.endpoint().stats()))
        .collect();
    let results = on_all(&comms, |c| async move {
        let next = c.shrink(&[1, 3], 2).await.unwrap();
        if let Some(n) = &next {
            sum_check(n).await;
        }
        next
    })
    .await;
    let mut survivors = Vec::new();
    for (old_rank, next) in results.into_iter().enumerate() {
        match next {
            None => assert!([1, 3].contains(&old_rank)),
            Some(n) => {
                assert_eq!(n.rank(), survivors.len(), "dense, in old order");
                assert_eq!((n.world_size(), n.epoch()), (3, 2));
                let now = link_ids(&n);
                assert!(now.iter().all(|l| before[old_rank].0.contains(l)));
                let s = n.endpoint().stats();
                assert_eq!(
                    s.dialed + s.accepted,
                    before[old_rank].1.dialed + before[old_rank].1.accepted
                );
                assert_eq!(n.endpoint().epoch(), 2);
                survivors.push(n);
            }
        }
    }
    assert_eq!(survivors.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_by_color_orders_by_key_and_reuses_the_parent_links() {
    let comms = world(6).await;
    let dialed: Vec<u64> = comms.iter().map(|c| c.endpoint().stats().dialed).collect();
    let subs = on_all(&comms, |c| async move {
        let r = c.rank();
        // Colors: even/odd, rank 5 opts out; key reverses the order.
        let color = (r != 5).then_some((r % 2) as u32);
        let sub = c.split(color, (10 - r) as u32).await.unwrap();
        if let Some(s) = &sub {
            sum_check(s).await;
            // The parent still works alongside the child.
            c.barrier().await.unwrap();
        } else {
            c.barrier().await.unwrap();
        }
        sub.map(|s| (s.rank(), s.world_size()))
    })
    .await;
    assert_eq!(
        subs,
        vec![
            Some((2, 3)),
            Some((1, 2)),
            Some((1, 3)),
            Some((0, 2)),
            Some((0, 3)),
            None
        ]
    );
    for (c, d) in comms.iter().zip(dialed) {
        assert_eq!(c.endpoint().stats().dialed, d, "split dials nothing");
    }
}
