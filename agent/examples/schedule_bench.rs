//! `schedule_bench`: what the fetch scheduler costs per chunk as a set grows. Real sets are
//! hundreds of GB (a 700 GB set is 358,400 chunks of 2 MiB); the scheduler runs under the
//! fetch's lock for every chunk, so its cost per chunk must not grow with the set.
//!
//! ```text
//! cargo run --release -p hcomm-agent --example schedule_bench
//! ```
//!
//! Two shapes, each at 25,600, 102,400 and 358,400 chunks, driven as the workers drive it
//! (`weights::worker`: a batch picked, the in-flight bits taken for the `Have` answers,
//! the oldest chunk completed): one joiner with one full source four deep, and one of
//! eight joiners with the full source four deep and seven fellow joiners one deep each,
//! holding every chunk outside this joiner's stripe. The last column is the cost per
//! chunk at that size over the cost at the smallest: 1.0 when it does not grow.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use hcomm_agent::weights::ChunkBits;
use hcomm_agent::weights::schedule::{Place, Scheduler, Swarm};

const SIZES: [usize; 3] = [25_600, 102_400, 358_400];
const FULL_DEPTH: usize = 4;

fn main() {
    println!(
        "{:<14} {:>9} {:>12} {:>10}",
        "shape", "chunks", "ns/chunk", "growth"
    );
    for shape in [Shape::OneJoiner, Shape::EightJoiners] {
        let mut first = None;
        for n in SIZES {
            let ns = run(shape, n);
            let base = *first.get_or_insert(ns);
            println!("{:<14} {n:>9} {ns:>12.0} {:>10.2}", shape.name(), ns / base);
        }
    }
}

#[derive(Clone, Copy)]
enum Shape {
    OneJoiner,
    EightJoiners,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::OneJoiner => "one joiner",
            Shape::EightJoiners => "eight joiners",
        }
    }

    fn fellows(self) -> usize {
        match self {
            Shape::OneJoiner => 0,
            Shape::EightJoiners => 7,
        }
    }
}

/// Nanoseconds per chunk to schedule a whole fetch of `n` chunks.
fn run(shape: Shape, n: usize) -> f64 {
    let fellows = shape.fellows();
    let ip = |i: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i));
    let swarm = Swarm {
        sources: (0..=fellows as u8).map(ip).collect(),
        own: None,
        place: Place::Stripe {
            index: 0,
            count: fellows + 1,
        },
        seed: 7,
    };
    let mut sched = Scheduler::new(n, &ChunkBits::new(n), swarm);
    sched.set_holdings(0, ChunkBits::full(n), ChunkBits::new(n));
    // This joiner's stripe is the first n / 8 chunks; the fellows hold the rest.
    let mut theirs = ChunkBits::new(n);
    (n / (fellows + 1)..n).for_each(|i| theirs.set(i));
    for f in 1..=fellows {
        sched.set_holdings(f, theirs.clone(), ChunkBits::new(n));
    }
    let depth = |src: usize| if src == 0 { FULL_DEPTH } else { 1 };
    let mut pending: Vec<VecDeque<usize>> = vec![VecDeque::new(); fellows + 1];
    let started = Instant::now();
    while !sched.is_done() {
        for (src, queue) in pending.iter_mut().enumerate() {
            let mut picked = false;
            while queue.len() < depth(src) {
                match sched.next_for(src) {
                    Some(i) => {
                        queue.push_back(i);
                        picked = true;
                    }
                    None => break,
                }
            }
            if picked {
                std::hint::black_box(sched.in_flight());
            }
            if let Some(i) = queue.pop_front() {
                sched.complete(i);
            }
        }
    }
    started.elapsed().as_nanos() as f64 / n as f64
}
