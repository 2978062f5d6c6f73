//! Quick loopback measurement of the TCP backend (all ranks in this process, one endpoint
//! each on 127.0.0.1): all-reduce busbw per size for ring and tree, used to pick the `auto`
//! crossover (README "Crossover"). The full nccl-tests-style benchmark is `hcomm-bench`.
//!
//! cargo run --release -p hcomm-comm --example loopback_busbw -- [ranks] [max_bytes] [iters]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_comm::tcp::{BindSpec, CommConfig, Endpoint, EndpointConfig, TcpComm};
use hcomm_comm::{Algorithm, Communicator, DataType, ReduceOp};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = *args.first().unwrap_or(&4);
    let max = *args.get(1).unwrap_or(&(64 << 20));
    let iters = *args.get(2).unwrap_or(&20);
    println!(
        "# raw tokio TCP loopback, full duplex, {} MiB each way: {:.2} GB/s",
        max >> 20,
        raw_duplex(max).await? / 1e9
    );
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(
            Endpoint::bind(EndpointConfig::new(BindSpec::loopback(), b"bench".to_vec())).await?,
        );
    }
    let root = eps[0].create_root_info();
    let comms: Vec<Arc<TcpComm>> =
        futures::future::try_join_all(eps.into_iter().enumerate().map(|(r, ep)| {
            let mut c = CommConfig::new(n, r, root, 1);
            c.op_timeout = Duration::from_secs(120);
            if let Some(seg) = std::env::var("SEG").ok().and_then(|s| s.parse().ok()) {
                c.segment_bytes = seg;
            }
            TcpComm::init_on(ep, c)
        }))
        .await?
        .into_iter()
        .map(Arc::new)
        .collect();
    println!(
        "# ranks={n}  {:>10} {:>6} {:>10} {:>9} {:>9}",
        "bytes", "algo", "time_us", "algbw", "busbw"
    );
    let mut size = 4096;
    while size <= max {
        for algo in [Algorithm::Ring, Algorithm::Tree] {
            if algo == Algorithm::Tree && size > (8 << 20) && n > 2 {
                continue;
            }
            let its = if size >= (16 << 20) {
                iters.clamp(2, 5)
            } else {
                iters
            };
            let times = futures::future::join_all(comms.iter().cloned().map(|c| {
                tokio::spawn(async move {
                    let mut buf = vec![1u8; size];
                    for _ in 0..2 {
                        c.all_reduce_with(&mut buf, DataType::F32, ReduceOp::Sum, algo)
                            .await
                            .unwrap();
                    }
                    c.barrier().await.unwrap();
                    let t = Instant::now();
                    for _ in 0..its {
                        c.all_reduce_with(&mut buf, DataType::F32, ReduceOp::Sum, algo)
                            .await
                            .unwrap();
                    }
                    t.elapsed() / its as u32
                })
            }))
            .await;
            let t = times
                .into_iter()
                .map(|t| t.unwrap())
                .max()
                .unwrap_or_default();
            let algbw = size as f64 / t.as_secs_f64() / 1e9;
            let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
            println!(
                "# ranks={n}  {size:>10} {:>6} {:>10.1} {algbw:>8.2}G {busbw:>8.2}G",
                algo.name(),
                t.as_secs_f64() * 1e6
            );
        }
        size *= 4;
    }
    // Chain broadcast of the largest size: should take about size / link bandwidth, nearly
    // independent of the number of receivers.
    let times = futures::future::join_all(comms.iter().cloned().map(|c| {
        tokio::spawn(async move {
            let mut buf = vec![1u8; max];
            c.broadcast_with(&mut buf, 0, Algorithm::Ring)
                .await
                .unwrap();
            c.barrier().await.unwrap();
            let t = Instant::now();
            for _ in 0..3 {
                c.broadcast_with(&mut buf, 0, Algorithm::Ring)
                    .await
                    .unwrap();
            }
            t.elapsed() / 3
        })
    }))
    .await;
    let t = times
        .into_iter()
        .map(|t| t.unwrap())
        .max()
        .unwrap_or_default();
    println!(
        "# ranks={n}  broadcast(chain) {max} bytes: {:.1} ms, {:.2} GB/s",
        t.as_secs_f64() * 1e3,
        max as f64 / t.as_secs_f64() / 1e9
    );
    Ok(())
}

/// The "link limit" on this machine: two plain tokio sockets exchanging `bytes` both ways at
/// once (what a 2-rank all-reduce needs), no framing, no reduction.
async fn raw_duplex(bytes: usize) -> Result<f64, Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let a = tokio::net::TcpStream::connect(l.local_addr()?).await?;
    let (b, _) = l.accept().await?;
    let run = |s: tokio::net::TcpStream| {
        tokio::spawn(async move {
            let (mut r, mut w) = s.into_split();
            let out = vec![1u8; bytes];
            let mut inb = vec![1u8; bytes];
            let mut best = Duration::MAX;
            for _ in 0..3 {
                let t = Instant::now();
                let (x, y) = tokio::join!(w.write_all(&out), r.read_exact(&mut inb));
                x?;
                y?;
                best = best.min(t.elapsed());
            }
            Ok::<_, std::io::Error>(best)
        })
    };
    let (x, y) = tokio::join!(run(a), run(b));
    let t = x??.max(y??);
    Ok(bytes as f64 / t.as_secs_f64())
}
