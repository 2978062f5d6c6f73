//! One rank per process, for trying the TCP backend across hosts or network namespaces:
//! rank 0 writes the root info to a file the others read (the "out of band" channel).
//!
//! tcp_rank <rank> <world> <bind ip|ifname> <root-info-file> [max_bytes]
//! Prints (on rank 0) all-reduce busbw for 1, 4, 16, 64 MiB and the chain broadcast time.

use std::time::{Duration, Instant};

use hcomm_comm::tcp::{BindSpec, CommConfig, Endpoint, EndpointConfig, RootInfo, TcpComm};
use hcomm_comm::{Algorithm, Communicator, DataType, ReduceOp};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let (rank, world): (usize, usize) = (a[0].parse()?, a[1].parse()?);
    let max: usize = a.get(4).map_or(Ok(64 << 20), |s| s.parse())?;
    let ep = Endpoint::bind(EndpointConfig::new(
        BindSpec::parse(&a[2]),
        b"demo".to_vec(),
    ))
    .await?;
    let root: RootInfo = if rank == 0 {
        let r = ep.create_root_info();
        std::fs::write(&a[3], r.to_string())?;
        r
    } else {
        loop {
            if let Ok(s) = std::fs::read_to_string(&a[3])
                && let Ok(r) = s.parse()
            {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let mut cfg = CommConfig::new(world, rank, root, 1);
    cfg.op_timeout = Duration::from_secs(120);
    if let Some(seg) = std::env::var("SEG").ok().and_then(|s| s.parse().ok()) {
        cfg.segment_bytes = seg;
    }
    let comm = TcpComm::init_on(ep, cfg).await?;
    let mut size = 1 << 20;
    while size <= max {
        let mut buf = vec![1u8; size];
        comm.all_reduce_with(&mut buf, DataType::F32, ReduceOp::Sum, Algorithm::Ring)
            .await?;
        comm.barrier().await?;
        let iters = 3;
        let t = Instant::now();
        for _ in 0..iters {
            comm.all_reduce_with(&mut buf, DataType::F32, ReduceOp::Sum, Algorithm::Ring)
                .await?;
        }
        let t = t.elapsed().as_secs_f64() / iters as f64;
        let algbw = size as f64 / t;
        if rank == 0 {
            println!(
                "all_reduce ring {size:>10} B  {:>8.1} ms  algbw {:>7.1} MB/s  busbw {:>7.1} MB/s",
                t * 1e3,
                algbw / 1e6,
                algbw * 2.0 * (world as f64 - 1.0) / world as f64 / 1e6
            );
        }
        size *= 4;
    }
    let mut buf = vec![1u8; max];
    comm.barrier().await?;
    let t = Instant::now();
    comm.broadcast_with(&mut buf, 0, Algorithm::Ring).await?;
    comm.barrier().await?;
    if rank == 0 {
        let t = t.elapsed().as_secs_f64();
        println!(
            "broadcast chain {max} B  {:.1} ms  {:.1} MB/s",
            t * 1e3,
            max as f64 / t / 1e6
        );
    }
    Ok(())
}
