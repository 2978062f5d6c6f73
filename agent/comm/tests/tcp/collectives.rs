//! Every primitive and data type against a locally computed reference, world sizes 1–8.

use hcomm_comm::{Algorithm, Communicator, DataType, ReduceOp, VLayout};

use crate::support::*;

const WORLDS: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_reduce_matches_the_reference_for_every_type_op_algorithm_and_world_size() {
    for n in WORLDS {
        let comms = world(n).await;
        let failures = on_all(&comms, move |c| async move {
            let mut bad = Vec::new();
            for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::HalvingDoubling] {
                for dtype in DataType::ALL {
                    for op in ReduceOp::ALL {
                        // Odd, tiny and empty lengths; segments are 64 bytes.
                        for count in [0usize, 1, 37] {
                            let mut buf = encode(dtype, &values(c.rank(), count, dtype, op));
                            c.all_reduce_with(&mut buf, dtype, op, algo).await.unwrap();
                            if buf != reference(n, count, dtype, op) {
                                bad.push(format!("n={n} {algo} {dtype} {op} count={count}"));
                            }
                        }
                    }
                }
            }
            bad
        })
        .await;
        let bad: Vec<_> = failures.into_iter().flatten().collect();
        assert!(bad.is_empty(), "wrong results: {bad:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_movement_primitives_deliver_every_byte_for_every_world_size() {
    for n in WORLDS {
        let comms = world(n).await;
        on_all(&comms, move |c| async move {
            let r = c.rank();
            // all_gather with an odd length (and empty), both algorithms and `auto`.
            for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::Auto] {
                for len in [0usize, 13] {
                    let mine = pattern(r, len, 1);
                    let mut all = vec![0u8; len * n];
                    c.all_gather_with(&mine, &mut all, algo).await.unwrap();
                    for q in 0..n {
                        assert_eq!(
                            &all[q * len..(q + 1) * len],
                            &pattern(q, len, 1)[..],
                            "n={n} {algo}"
                        );
                    }
                }
            }
            // broadcast from every root, both algorithms, odd sizes.
            for algo in [Algorithm::Ring, Algorithm::Tree] {
                for root in 0..n {
                    for len in [0usize, 1, 301] {
                        let mut buf = if r == root {
                            pattern(root, len, 2)
                        } else {
                            vec![0; len]
                        };
                        c.broadcast_with(&mut buf, root, algo).await.unwrap();
                        assert_eq!(buf, pattern(root, len, 2), "n={n} {algo} root={root}");
                    }
                }
            }
            // all_to_all: block j of rank i goes to rank j.
            let blk = 3;
            let send: Vec<u8> = (0..n).flat_map(|j| pattern(r * 10 + j, blk, 3)).collect();
            let mut recv = vec![0u8; blk * n];
            c.all_to_all(&send, &mut recv).await.unwrap();
            for i in 0..n {
                assert_eq!(
                    &recv[i * blk..(i + 1) * blk],
                    &pattern(i * 10 + r, blk, 3)[..]
                );
            }
            // all_to_all_v with uneven (and zero) counts, i32 elements, a gap in recv.
            let count = |i: usize, j: usize| (i + 2 * j) % 4;
            let send_counts: Vec<usize> = (0..n).map(|j| count(r, j)).collect();
            let send_layout = VLayout::packed(send_counts.clone());
            let recv_counts: Vec<usize> = (0..n).map(|i| count(i, r)).collect();
            let mut recv_layout = VLayout::packed(recv_counts.clone());
            for d in recv_layout.displs.iter_mut() {
                *d += 1; // leave element 0 untouched
            }
            let elem = |i: usize, j: usize, k: usize| (i * 1000 + j * 10 + k) as i32;
            let send: Vec<u8> = (0..n)
                .flat_map(|j| (0..count(r, j)).map(move |k| elem(r, j, k)))
                .flat_map(|v| v.to_ne_bytes())
                .collect();
            let mut recv = vec![0xAAu8; (recv_layout.extent()) * 4];
            c.all_to_all_v(&send, &send_layout, &mut recv, &recv_layout, DataType::I32)
                .await
                .unwrap();
            assert_eq!(&recv[..4], &[0xAA; 4]);
            for i in 0..n {
                for k in 0..count(i, r) {
                    let at = (recv_layout.displs[i] + k) * 4;
                    let got = i32::from_ne_bytes(recv[at..at + 4].try_into().unwrap());
                    assert_eq!(got, elem(i, r, k), "n={n} from {i}");
                }
            }
            // send/recv around the ring with a tag, odd length, then a barrier.
            if n > 1 {
                let msg = pattern(r, 77, 4);
                c.send(&msg, (r + 1) % n, 7).await.unwrap();
                let mut got = vec![0u8; 77];
                c.recv(&mut got, (r + n - 1) % n, 7).await.unwrap();
                assert_eq!(got, pattern((r + n - 1) % n, 77, 4));
            }
            c.barrier().await.unwrap();
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reduce_scatter_and_reduce_match_the_reference() {
    for n in WORLDS {
        let comms = world(n).await;
        on_all(&comms, move |c| async move {
            let r = c.rank();
            for dtype in [DataType::I32, DataType::F16, DataType::U8, DataType::F64] {
                for op in ReduceOp::ALL {
                    // reduce_scatter: 5 elements per rank (odd), reference per block, both
                    // algorithms and `auto`.
                    for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::Auto] {
                        let per = 5;
                        let send = encode(dtype, &values(r, per * n, dtype, op));
                        let mut recv = vec![0u8; per * dtype.size()];
                        c.reduce_scatter_with(&send, &mut recv, dtype, op, algo)
                            .await
                            .unwrap();
                        let full = reference(n, per * n, dtype, op);
                        let es = dtype.size();
                        assert_eq!(
                            recv,
                            full[r * per * es..(r + 1) * per * es],
                            "n={n} {dtype} {op} {algo}"
                        );
                    }
                    // reduce to every root with both algorithms; others unchanged.
                    for algo in [Algorithm::Ring, Algorithm::Tree] {
                        for root in 0..n {
                            let mine = encode(dtype, &values(r, 21, dtype, op));
                            let mut buf = mine.clone();
                            c.reduce_with(&mut buf, dtype, op, root, algo)
                                .await
                                .unwrap();
                            if r == root {
                                assert_eq!(buf, reference(n, 21, dtype, op), "n={n} {algo}");
                            } else {
                                assert_eq!(buf, mine, "non-root buffer changed");
                            }
                        }
                    }
                }
            }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_all_reduce_spanning_many_frames_is_bit_identical_on_every_rank() {
    // 1 MiB of f32 in 256 KiB segments; non-integer floats, so only
    // agreement across ranks (and closeness to the reference) can be checked.
    let comms = world_with(3, 1, |c| c.segment_bytes = 256 << 10).await;
    let results = on_all(&comms, |c| async move {
        let count = (1 << 18) + 3;
        let v: Vec<f32> = (0..count)
            .map(|i| (i as f32 * 0.37 + c.rank() as f32).sin())
            .collect();
        let mut buf: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        c.all_reduce(&mut buf, DataType::F32, ReduceOp::Sum)
            .await
            .unwrap();
        buf
    })
    .await;
    assert!(results.windows(2).all(|w| w[0] == w[1]));
    let got = f32::from_ne_bytes(results[0][400..404].try_into().unwrap());
    let want: f32 = (0..3).map(|r| (100.0f32 * 0.37 + r as f32).sin()).sum();
    assert!((got - want).abs() < 1e-5, "{got} vs {want}");
}
