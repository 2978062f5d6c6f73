//! The fetch scheduler's policy, one named test per behaviour.

use super::*;

/// `k` sources at 10.0.0.1.., this joiner's own address unknown, its stripe `start` of
/// `n` (`stripe_start(chunks, start, n)`); the other chunks follow in seed 0's shuffle, so
/// with `n` = 1 the order is simply 0, 1, 2, ….
fn swarm(k: usize, start: usize, n: usize) -> Swarm {
    Swarm {
        sources: (1..=k).map(ip).collect(),
        own: None,
        place: Place::Stripe {
            index: start,
            count: n,
        },
        seed: 0,
    }
}

fn ip(last: usize) -> IpAddr {
    IpAddr::from([10, 0, 0, last as u8])
}

fn bits(n: usize, set: &[usize]) -> ChunkBits {
    let mut b = ChunkBits::new(n);
    set.iter().for_each(|&i| b.set(i));
    b
}

#[test]
fn full_sources_share_the_work_and_each_chunk_is_handed_out_once() {
    let mut s = Scheduler::new(6, &ChunkBits::new(6), swarm(2, 0, 6));
    s.set_holdings(0, ChunkBits::full(6), ChunkBits::new(6));
    s.set_holdings(1, ChunkBits::full(6), ChunkBits::new(6));
    let mut got = vec![
        s.next_for(0).unwrap(),
        s.next_for(1).unwrap(),
        s.next_for(0).unwrap(),
    ];
    got.extend([
        s.next_for(1).unwrap(),
        s.next_for(1).unwrap(),
        s.next_for(1).unwrap(),
    ]);
    got.sort();
    assert_eq!(got, [0, 1, 2, 3, 4, 5]);
    assert_eq!(s.next_for(0), None);
}

#[test]
fn joiners_start_on_different_stripes_and_skip_what_peers_hold() {
    assert_eq!(stripe_start(12, 1, 3), 4);
    let mut s = Scheduler::new(12, &ChunkBits::new(12), swarm(2, 4, 12));
    s.set_holdings(0, ChunkBits::full(12), ChunkBits::new(12));
    s.set_holdings(1, bits(12, &[4, 5]), bits(12, &[7]));
    // The origin skips the chunks the peer has (4, 5) and the one it is fetching (7).
    let mut picked: Vec<usize> = (0..9).filter_map(|_| s.next_for(0)).collect();
    picked.sort_unstable();
    assert_eq!(picked, [0, 1, 2, 3, 6, 8, 9, 10, 11]);
    assert_eq!(
        s.next_for(0),
        None,
        "endgame waits while the source is busy"
    );
    assert_eq!(s.next_for(1), Some(4), "the peer serves what it has");
    (0..12)
        .filter(|i| ![4, 5, 7].contains(i))
        .for_each(|i| s.complete(i));
    let helped = s.next_for(0);
    assert!(
        matches!(helped, Some(5 | 7)),
        "an idle full source helps in the endgame"
    );
    assert_eq!(s.next_for(0), None, "one chunk at a time");
    // The peer still serves what it holds and nobody fetches.
    assert_eq!(s.next_for(1), (helped == Some(7)).then_some(5));
}

#[test]
fn a_full_source_sends_what_a_joiner_holds_only_once_nothing_is_left_only_it_has() {
    // 40 chunks: this joiner verified 0..20; its fellow (source 1) holds 20..39 and is
    // still fetching 39 — from the existing member (source 0), for all we know.
    let mut s = Scheduler::new(40, &ChunkBits::new(40), swarm(2, 0, 1));
    s.set_holdings(0, ChunkBits::full(40), ChunkBits::new(40));
    let fellow: Vec<usize> = (20..39).collect();
    s.set_holdings(1, bits(40, &fellow), bits(40, &[39]));
    (0..20).for_each(|i| s.complete(i));
    assert_eq!(
        s.next_for(0),
        None,
        "chunk 39 has not left the member yet: its uplink is not spare"
    );
    let all: Vec<usize> = (20..40).collect();
    s.set_holdings(1, bits(40, &all), ChunkBits::new(40));
    assert_eq!(s.next_for(0), Some(20), "now it helps");
    assert_eq!(s.next_for(0), None, "one chunk at a time");
}

#[test]
fn once_every_source_told_the_joiner_stripes_among_the_joiners_found() {
    // Source 0 (10.0.0.1) is an existing member, 1 and 2 (10.0.0.2, .3) are fellow
    // joiners; this joiner is 10.0.0.9, the last of three by address: its stripe of
    // 12 chunks starts at 8, though its first guess (place 1 of 3) started it at 4.
    let mut s = Scheduler::new(
        12,
        &ChunkBits::new(12),
        Swarm {
            own: Some(ip(9)),
            ..swarm(3, 1, 3)
        },
    );
    s.set_holdings(0, ChunkBits::full(12), ChunkBits::new(12));
    s.set_holdings(1, ChunkBits::new(12), ChunkBits::new(12));
    let first = s.clone().next_for(0);
    assert_eq!(first, Some(4), "source 2 has not told yet: the guess stays");
    s.set_holdings(2, bits(12, &[0]), ChunkBits::new(12));
    assert_eq!(s.next_for(0), Some(8));
    // Once: a fellow's later news does not move the stripe again.
    s.set_holdings(1, bits(12, &[1]), ChunkBits::new(12));
    let rest: Vec<usize> = std::iter::from_fn(|| s.next_for(0)).collect();
    assert_eq!(rest[..3], [9, 10, 11], "its own stripe from the start");
    let mut others = rest[3..].to_vec();
    others.sort_unstable();
    assert_eq!(
        others,
        [2, 3, 4, 5, 6, 7],
        "then the others'; 0 and 1 are with peers"
    );
    // A dead source that never told does not hold it up: alone, this joiner is the
    // first of one and starts at 0.
    let mut s = Scheduler::new(
        4,
        &ChunkBits::new(4),
        Swarm {
            own: Some(ip(9)),
            ..swarm(2, 1, 2)
        },
    );
    s.set_holdings(0, ChunkBits::full(4), ChunkBits::new(4));
    assert_eq!(s.clone().next_for(0), Some(2), "source 1 has not told yet");
    s.lose(1);
    assert_eq!(s.next_for(0), Some(0));
}

#[test]
fn a_lost_source_returns_its_chunks_to_the_queue() {
    let mut s = Scheduler::new(3, &bits(3, &[0]), swarm(2, 0, 1));
    assert_eq!(s.remaining(), 2);
    s.set_holdings(0, ChunkBits::full(3), ChunkBits::new(3));
    s.set_holdings(1, ChunkBits::full(3), ChunkBits::new(3));
    assert_eq!(s.next_for(0), Some(1));
    assert_eq!(s.next_for(0), Some(2));
    assert_eq!(s.next_for(1), None);
    assert_eq!(s.lose(0), 2);
    assert_eq!(s.next_for(0), None);
    assert_eq!(s.next_for(1), Some(1));
    s.complete(1);
    assert_eq!(s.next_for(1), Some(2));
    s.complete(2);
    assert!(s.is_done());
}

#[test]
fn a_corrupt_chunk_is_refetched_elsewhere_and_repeat_offenders_are_dropped() {
    let mut s = Scheduler::new(4, &ChunkBits::new(4), swarm(2, 0, 1));
    s.set_holdings(0, ChunkBits::full(4), ChunkBits::new(4));
    assert_eq!(s.next_for(0), Some(0));
    assert_eq!(s.corrupt(0, 0), AfterCorrupt::Keep);
    assert_eq!(
        s.next_for(0),
        Some(1),
        "never the same chunk from the same source"
    );
    assert_eq!(s.unfetchable(), None, "source 1 has not answered yet");
    s.set_holdings(1, ChunkBits::full(4), ChunkBits::new(4));
    assert_eq!(s.next_for(1), Some(0));
    assert_eq!(s.corrupt(0, 1), AfterCorrupt::Keep);
    assert_eq!(s.unfetchable(), Some(0));
    assert_eq!(s.corrupt(1, 0), AfterCorrupt::Keep);
    s.next_for(0);
    assert_eq!(s.corrupt(2, 0), AfterCorrupt::Drop);
}

#[test]
fn a_joiner_takes_its_own_stripe_from_its_start_then_the_rest_in_its_own_shuffled_order() {
    // 10 chunks, 3 joiners: stripes 0..3, 3..6, 6..10.
    let order = striped_order(10, 1, 3, 7);
    assert_eq!(order[..3], [3, 4, 5]);
    let mut rest = order[3..].to_vec();
    rest.sort_unstable();
    assert_eq!(rest, [0, 1, 2, 6, 7, 8, 9], "every other chunk once");
    assert_eq!(striped_order(10, 2, 3, 7)[..4], [6, 7, 8, 9]);
    assert_eq!(
        striped_order(10, 4, 3, 7),
        striped_order(10, 1, 3, 7),
        "places wrap"
    );
    // Helpers' orders differ (seeds 0..8 give at least two orders of the seven chunks).
    let orders: std::collections::HashSet<Vec<usize>> =
        (0..8).map(|seed| striped_order(10, 1, 3, seed)).collect();
    assert!(orders.len() > 1);
    // One chunk per stripe (more joiners than chunks): own chunk first.
    assert_eq!(striped_order(3, 1, 5, 0)[0], 1);
    assert_eq!(striped_order(4, 0, 1, 0), [0, 1, 2, 3]);
    assert!(striped_order(0, 0, 3, 0).is_empty());
    // A helper done with its own stripe never asks the member for what the owner is
    // getting (joiner 2 of 3, fetching chunk 6).
    let mut helper = Scheduler::new(10, &bits(10, &[3, 4, 5]), swarm(2, 1, 3));
    helper.set_holdings(0, ChunkBits::full(10), ChunkBits::new(10));
    helper.set_holdings(1, ChunkBits::new(10), bits(10, &[6]));
    let picks: Vec<usize> = std::iter::from_fn(|| helper.next_for(0)).collect();
    let mut sorted = picks.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0, 1, 2, 7, 8, 9], "{picks:?}");
}

/// The pick of the scheduler without its cursors: every scan from the order's start, the
/// in-flight chunks and the joiners' holdings counted afresh (what `next_for` did before
/// it kept `settled`, `screened`, each source's `from` and the in-flight bits).
fn pick_by_full_scan(s: &Scheduler, src: usize) -> Option<usize> {
    let needed = |i: usize| s.chunks[i] == ChunkState::Needed && s.holds(src, i);
    if s.is_full(src) {
        let hold_all = (0..s.chunks.len()).all(|i| {
            s.chunks[i] == ChunkState::Done
                || s.sources
                    .iter()
                    .any(|v| v.alive && matches!(&v.holdings, Holdings::Partial(h, _) if h.get(i)))
        });
        let idle = !s.chunks.contains(&ChunkState::InFlight(src))
            && (hold_all || s.remaining <= ENDGAME_CHUNKS * s.alive());
        s.order
            .iter()
            .copied()
            .find(|&i| needed(i) && !s.a_peer_has_or_gets(i))
            .or_else(|| {
                idle.then(|| s.order.iter().copied().find(|&i| needed(i)))
                    .flatten()
            })
    } else {
        s.order.iter().copied().find(|&i| needed(i))
    }
}

/// Random fetches (picks, completions, corrupt and missing chunks, fellows telling more or
/// less and finishing, sources lost, a restripe): every pick is the one a scan of the whole
/// order makes, and the in-flight bits and counts match the chunks' states.
#[test]
fn the_cursors_never_change_a_pick() {
    use rand::{Rng as _, SeedableRng as _};
    let n = 150;
    for seed in 0..40u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut sw = swarm(4, 1, 4);
        sw.own = Some(ip(9));
        let mut s = Scheduler::new(n, &bits(n, &[3, 70]), sw);
        s.set_holdings(0, ChunkBits::full(n), ChunkBits::new(n));
        let mut held: Vec<ChunkBits> = vec![ChunkBits::new(n); 4];
        for _ in 0..3000 {
            // Fellows named by a later table join the running fetch (up to two).
            if held.len() < 6 && rng.random_range(0..400) == 0 {
                assert_eq!(s.add_source(ip(10 + held.len())), held.len());
                held.push(ChunkBits::new(n));
            }
            let src = rng.random_range(0..held.len());
            match rng.random_range(0..10) {
                0..=3 => {
                    let want = pick_by_full_scan(&s, src);
                    assert_eq!(s.next_for(src), want, "seed {seed}");
                }
                4 | 5 => {
                    let flying: Vec<usize> = (0..n)
                        .filter(|&i| matches!(s.chunks[i], ChunkState::InFlight(_)))
                        .collect();
                    if let Some(&i) = flying.get(rng.random_range(0..flying.len().max(1))) {
                        let ChunkState::InFlight(from) = s.chunks[i] else {
                            unreachable!()
                        };
                        match rng.random_range(0..20) {
                            0 => {
                                let _ = s.corrupt(i, from);
                            }
                            1 => s.missing(i, from),
                            _ => s.complete(i),
                        }
                    }
                }
                6..=8 if src > 0 && s.is_live(src) => {
                    let h = &mut held[src];
                    match rng.random_range(0..30) {
                        0 => *h = ChunkBits::new(n),
                        1 => *h = ChunkBits::full(n),
                        _ => (0..3).for_each(|_| h.set(rng.random_range(0..n))),
                    }
                    let coming = bits(n, &[rng.random_range(0..n)]);
                    s.set_holdings(src, h.clone(), coming);
                }
                9 if rng.random_range(0..40) == 0 => {
                    let _ = s.lose(src);
                }
                _ => {}
            }
            let flying = (0..n).filter(|&i| matches!(s.chunks[i], ChunkState::InFlight(_)));
            assert_eq!(
                s.in_flight(),
                bits(n, &flying.collect::<Vec<_>>()),
                "seed {seed}"
            );
            for (k, v) in s.sources.iter().enumerate() {
                let mine = s.chunks.iter().filter(|c| **c == ChunkState::InFlight(k));
                assert_eq!(v.flying, mine.count(), "seed {seed}, source {k}");
            }
            if s.is_done() {
                break;
            }
        }
    }
}

/// A joiner at 10.0.0.9 fetching 12 chunks from `k` sources (the first the member) with no
/// place given, its start chosen by `seed`: an early sync.
fn early(k: usize, seed: u64) -> Scheduler {
    let sw = Swarm {
        own: Some(ip(9)),
        place: Place::Unknown,
        seed,
        ..swarm(k, 0, 1)
    };
    Scheduler::new(12, &ChunkBits::new(12), sw)
}

#[test]
fn a_joiner_found_alone_without_a_guess_keeps_its_own_start() {
    // An early sync: the existing member is the only source and the joiner's fellows are
    // not known yet. Striped as "the first of one" every such joiner would ask the member
    // for chunk 0 first, so each of the first chunks left the member once per joiner.
    let alone = |seed| {
        let mut s = early(1, seed);
        s.set_holdings(0, ChunkBits::full(12), ChunkBits::new(12));
        [s.next_for(0), s.next_for(0)]
    };
    assert_eq!(alone(7), [Some(7), Some(8)]);
    assert_eq!(alone(17), [Some(5), Some(6)]);
    // Fellows found: it stripes among them (10.0.0.2 and itself: the second of two).
    let mut s = early(2, 7);
    s.set_holdings(0, ChunkBits::full(12), ChunkBits::new(12));
    s.set_holdings(1, ChunkBits::new(12), ChunkBits::new(12));
    assert_eq!(s.next_for(0), Some(6));
}

#[test]
fn fellows_added_to_a_running_fetch_are_asked_and_striped_among() {
    // An early sync (the member alone, no guess) with chunks 7 and 8 in flight learns of
    // a fellow joiner at 10.0.0.2; this joiner (10.0.0.9) is the second of two.
    let mut s = early(1, 7);
    s.set_holdings(0, ChunkBits::full(12), ChunkBits::new(12));
    assert_eq!([s.next_for(0), s.next_for(0)], [Some(7), Some(8)]);
    let fellow = s.add_source(ip(2));
    assert_eq!(fellow, 1);
    assert_eq!(
        s.next_for(0),
        Some(9),
        "the fellow has not told yet: the order stays"
    );
    s.set_holdings(fellow, bits(12, &[0, 10]), ChunkBits::new(12));
    assert_eq!(
        s.next_for(fellow),
        Some(10),
        "the fellow is asked for what it holds, this joiner's stripe (6..12) first"
    );
    let member: Vec<_> = std::iter::from_fn(|| s.next_for(0)).take(3).collect();
    assert_eq!(
        member,
        [6, 11, 1],
        "its stripe from the start past what is in flight, then the others shuffled \
         (0 is the fellow's)"
    );
    s.complete(7);
    s.complete(8);
    assert_eq!(s.remaining(), 10, "the chunks in flight before were kept");
}

#[test]
fn early_syncs_of_consecutive_members_start_apart() {
    // Eight joiners of one scale-out have consecutive member indexes; wherever they
    // begin, each one's first chunks lie at least a twelfth of the set from any other's.
    let n = 256;
    for first in [1u64, 9, 1000] {
        let mut starts: Vec<usize> = (first..first + 8).map(|k| spread_start(n, k)).collect();
        starts.sort_unstable();
        let gaps = starts.windows(2).map(|w| w[1] - w[0]);
        let wrap = n - starts[7] + starts[0];
        let closest = gaps.chain([wrap]).min().unwrap();
        assert!(closest >= n / 12, "members {first}..: starts {starts:?}");
    }
    // The scheduler starts there and, alone, stays there.
    let mut s = Scheduler::new(
        n,
        &ChunkBits::new(n),
        Swarm {
            own: Some(ip(9)),
            place: Place::Spread(3),
            ..swarm(1, 0, 1)
        },
    );
    s.set_holdings(0, ChunkBits::full(n), ChunkBits::new(n));
    let first = spread_start(n, 3);
    assert_eq!(
        [s.next_for(0), s.next_for(0)],
        [Some(first), Some(first + 1)]
    );
}
