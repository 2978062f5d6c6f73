//! Worker mode: one rank of the TCP backend. Rank 0 binds its endpoint, creates the root
//! info and publishes it in `--root-info-file` (write + rename, so readers never see half a
//! file); the others wait for it, then every rank initialises and measures.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use hcomm_comm::tcp::{BindSpec, CommConfig, Endpoint, EndpointConfig, RootInfo, TcpComm};

use crate::args::Args;
use crate::measure::{self, Settings};
use crate::plan::{self, Row};

const ROOT_INFO_WAIT: Duration = Duration::from_secs(60);

fn publish(path: &Path, root: &RootInfo) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, root.to_string()).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

async fn wait_for(path: &Path) -> Result<RootInfo, String> {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            return s
                .parse()
                .map_err(|e| format!("root info in {}: {e}", path.display()));
        }
        if start.elapsed() > ROOT_INFO_WAIT {
            return Err(format!(
                "no root info at {} after {ROOT_INFO_WAIT:?} (is rank 0 running?)",
                path.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn rank_main(args: &Args) -> Result<(), String> {
    let file = args
        .root_info_file
        .as_deref()
        .ok_or("--root-info-file is required")?;
    let mut ep_cfg =
        EndpointConfig::new(BindSpec::parse(&args.bind), args.secret.as_bytes().to_vec());
    ep_cfg.connect_timeout = Duration::from_secs(30);
    let ep = Endpoint::bind(ep_cfg).await.map_err(|e| e.to_string())?;
    let root = if args.rank == 0 {
        let root = ep.create_root_info();
        publish(file, &root)?;
        root
    } else {
        wait_for(file).await?
    };
    let mut cfg = CommConfig::new(args.world, args.rank, root, 1);
    cfg.group = "hcomm-bench".into();
    cfg.algorithm = args.algo;
    if let Some(s) = args.segment {
        cfg.segment_bytes = s;
    }
    cfg.init_timeout = Duration::from_secs(120);
    cfg.op_timeout = Duration::from_secs(args.timeout_secs);
    let comm = TcpComm::init_on(ep, cfg).await.map_err(|e| e.to_string())?;

    let settings = Settings {
        ops: args.ops.clone(),
        sizes: plan::sizes(args.min_bytes, args.max_bytes, args.factor),
        budget: args.budget,
        max_iters: args.max_iters,
        dtype: args.dtype,
    };
    let lead = args.rank == 0;
    let mut json = match (&args.json, lead) {
        (Some(p), true) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        _ => None,
    };
    if lead {
        println!("{}", Row::header());
    }
    measure::run(&comm, &settings, |row| {
        if lead {
            println!("{}", row.line());
            if let Some(f) = json.as_mut() {
                let _ = writeln!(f, "{}", row.json("hcomm", &args.label));
            }
        }
    })
    .await
    .map_err(|e| format!("rank {}: {e}", args.rank))
}

pub fn run(args: &Args) -> Result<(), String> {
    // One thread by default, like an MPI rank: the reader tasks that receive a rank's data
    // and the collective they wake share the thread, so no message costs a cross-thread
    // wake-up, and a rank that polls for its data (`EndpointConfig::spin`) polls the socket
    // itself; with two workers, polls missed while the other sat in epoll holding the
    // socket driver. Large messages gained too: 2 ranks, 16 and 64 MiB, 1.21–1.23 against
    // 1.0–1.07 GB/s (medians of 5 interleaved runs, agent/comm/README.md).
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .map_err(|e| format!("tokio runtime: {e}"))?;
    // With more threads, on a worker thread, not on `block_on`'s: a collective woken by the
    // reader task that received its data then continues on the same thread; from
    // `block_on` every message cost a cross-thread wake-up (futex), which dominated
    // small-message latency.
    let args = args.clone();
    rt.block_on(async move { tokio::spawn(async move { rank_main(&args).await }).await })
        .map_err(|e| format!("rank task: {e}"))?
}
