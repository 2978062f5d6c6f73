//! `hcomm-hccl-check`: one rank of the HCCL backend's conformance check, through the same
//! public API a worker uses (`HcclBackend` → epoch → `Communicator`). Run one process per
//! NPU (on real hardware) or per simulated rank (against the conformance simulator, see
//! `e2e/hccl-sim`); rank 0 writes each epoch's root info to `<root-file>.e<epoch>`, the others
//! wait for that file (a shared directory is the out-of-band channel the agent is in
//! production).
//!
//! Each epoch runs `--ops` float32 all-reduces of `--count` elements where rank r contributes
//! (r + 1) × (i + 1) at index i, and checks every element against the closed form; then,
//! with `--health`, the backend's health check. With `--bench`, rank 0 then prints one
//! nccl-tests-style row per message size of float32 sum all-reduces on device buffers
//! (`bench bytes=… time_us=… algbw_gbs=… busbw_gbs=…`, busbw = algbw × 2(n−1)/n); each op
//! waits for its stream, so small sizes measure latency. The last line printed is the verdict:
//! `ok rank=… world=… epochs=… ops=… live_communicators=… reserved_bytes=…` (exit 0), or
//! `error stage=… category=… elapsed_ms=… message=…` (exit 1), or `wrong …` (exit 2).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use hcomm_comm::hccl::types::{HcclDataType, HcclReduceOp};
use hcomm_comm::hccl::{EpochSource, HcclBackend, HcclBackendConfig, LibrarySearch, types};
use hcomm_comm::{Communicator, DataType, ReduceOp};

#[derive(Debug, Parser)]
#[command(
    name = "hcomm-hccl-check",
    about = "One rank of the HCCL backend conformance check"
)]
struct Args {
    /// Directory holding libhccl.so and libascendcl.so, tried first (else ASCEND_HOME_PATH
    /// and the standard CANN prefix).
    #[arg(long)]
    lib_dir: Option<PathBuf>,
    /// Logical NPU id.
    #[arg(long, default_value_t = 0)]
    device: i32,
    #[arg(long)]
    rank: u32,
    #[arg(long)]
    world: u32,
    /// Root info exchange: rank 0 writes `<root-file>.e<epoch>`, the others read it.
    #[arg(long)]
    root_file: PathBuf,
    /// How long non-root ranks wait for the root info file, in seconds.
    #[arg(long, default_value_t = 60)]
    root_wait_secs: u64,
    /// Epochs to enter one after the other (make-before-break: the old one is alive while
    /// the next is built).
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// All-reduces per epoch.
    #[arg(long, default_value_t = 3)]
    ops: u32,
    /// Float32 elements per all-reduce.
    #[arg(long, default_value_t = 1024)]
    count: usize,
    /// The backend's per-op timeout, in milliseconds.
    #[arg(long, default_value_t = 120_000)]
    op_timeout_ms: u64,
    /// HCCL's exec timeout for our communicators (hcclExecTimeOut), in seconds.
    #[arg(long)]
    exec_timeout_secs: Option<u64>,
    /// HCCL_BUFFSIZE in MB.
    #[arg(long, default_value_t = 200)]
    buffsize_mb: u32,
    /// HCCL memory budget of this process, in MB.
    #[arg(long)]
    budget_mb: Option<u64>,
    /// How long to wait for an epoch's communicator, in seconds.
    #[arg(long, default_value_t = 300)]
    init_timeout_secs: u64,
    /// Run the health check (HcclGetCommAsyncError) after each epoch's ops.
    #[arg(long)]
    health: bool,
    /// After the first epoch's ops, benchmark all-reduce on device buffers.
    #[arg(long)]
    bench: bool,
    /// Smallest benchmarked message, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    min_bytes: usize,
    /// Largest benchmarked message, in bytes.
    #[arg(long, default_value_t = 256 << 20)]
    max_bytes: usize,
    /// Growth factor between benchmarked sizes.
    #[arg(long, default_value_t = 2)]
    factor: usize,
    /// Timed iterations per size (after `--warmup` untimed ones).
    #[arg(long, default_value_t = 20)]
    iters: u32,
    #[arg(long, default_value_t = 5)]
    warmup: u32,
}

/// A failure with the stage it happened in and a fixed category.
struct Failure {
    stage: String,
    category: &'static str,
    message: String,
}

fn fail(stage: impl Into<String>, category: &'static str, message: impl ToString) -> Failure {
    Failure {
        stage: stage.into(),
        category,
        message: message.to_string(),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let start = Instant::now();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            println!("error stage=runtime category=Io elapsed_ms=0 message={e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(Outcome::Ok(line)) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Ok(Outcome::Wrong(line)) => {
            println!("wrong {line}");
            ExitCode::from(2)
        }
        Err(f) => {
            println!(
                "error stage={} category={} elapsed_ms={} message={}",
                f.stage,
                f.category,
                start.elapsed().as_millis(),
                f.message.replace('\n', " ")
            );
            ExitCode::FAILURE
        }
    }
}

enum Outcome {
    Ok(String),
    Wrong(String),
}

fn epoch_file(root: &Path, epoch: u64) -> PathBuf {
    let mut name = root.as_os_str().to_owned();
    name.push(format!(".e{epoch}"));
    PathBuf::from(name)
}

async fn root_info(
    backend: &HcclBackend,
    args: &Args,
    epoch: u64,
) -> Result<Box<types::HcclRootInfo>, Failure> {
    let path = epoch_file(&args.root_file, epoch);
    if args.rank == 0 {
        let info = backend
            .new_root_info()
            .map_err(|e| fail("root-info", e.category(), e))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, info.as_bytes())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| fail("root-info", "Io", format!("{}: {e}", path.display())))?;
        return Ok(info);
    }
    let deadline = Instant::now() + Duration::from_secs(args.root_wait_secs);
    loop {
        if let Ok(bytes) = std::fs::read(&path) {
            return types::HcclRootInfo::from_bytes(&bytes)
                .map_err(|e| fail("root-info", e.category(), e));
        }
        if Instant::now() >= deadline {
            return Err(fail(
                "root-info",
                "Timeout",
                format!("{} did not appear", path.display()),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The benchmark rows (rank 0 prints them).
async fn bench(backend: &HcclBackend, args: &Args) -> Result<(), Failure> {
    let manager = std::sync::Arc::clone(backend.epochs());
    let (device, rank, world) = (args.device, args.rank, args.world);
    let (min, max, factor) = (args.min_bytes.max(4), args.max_bytes, args.factor.max(2));
    let (iters, warmup) = (args.iters.max(1), args.warmup);
    let timeout = Duration::from_millis(args.op_timeout_ms);
    let rows = tokio::task::spawn_blocking(move || -> Result<Vec<String>, Failure> {
        let api = manager.api();
        let e = |e: hcomm_comm::HcclError| fail("bench", e.category(), e);
        api.bind_thread(device).map_err(e)?;
        let guard = manager.lock_current();
        let cur = guard
            .as_ref()
            .ok_or_else(|| fail("bench", "HcclInvalidArgument", "no epoch serves"))?;
        let mut rows = Vec::new();
        let mut bytes = min;
        while bytes <= max {
            let count = (bytes / 4) as u64;
            let send = api.malloc(bytes).map_err(e)?;
            let mut recv = api.malloc(bytes).map_err(e)?;
            let mut run = || {
                cur.comm().all_reduce(
                    &send,
                    &mut recv,
                    count,
                    HcclDataType::Fp32,
                    HcclReduceOp::Sum,
                    cur.stream(),
                    Some(timeout),
                )
            };
            for _ in 0..warmup {
                run().map_err(e)?;
            }
            let start = Instant::now();
            for _ in 0..iters {
                run().map_err(e)?;
            }
            let secs = start.elapsed().as_secs_f64() / f64::from(iters);
            let algbw = bytes as f64 / secs / 1e9;
            let busbw = algbw * 2.0 * f64::from(world - 1) / f64::from(world);
            rows.push(format!(
                "bench bytes={bytes} time_us={:.1} algbw_gbs={algbw:.2} busbw_gbs={busbw:.2}",
                secs * 1e6
            ));
            bytes = bytes.saturating_mul(factor);
        }
        Ok(rows)
    })
    .await
    .map_err(|e| fail("bench", "BuilderPanicked", e))??;
    if rank == 0 {
        for row in rows {
            println!("{row}");
        }
    }
    Ok(())
}

async fn run(args: &Args) -> Result<Outcome, Failure> {
    let mut config = HcclBackendConfig::new("hccl-check", args.device);
    if let Some(dir) = &args.lib_dir {
        config.search = LibrarySearch::from_env().with_dir(dir);
    }
    config.op_timeout = Duration::from_millis(args.op_timeout_ms);
    config.init_timeout = Duration::from_secs(args.init_timeout_secs);
    config.exec_timeout = args.exec_timeout_secs.map(Duration::from_secs);
    config.buffer_size_mb = args.buffsize_mb;
    config.memory_budget_bytes = args.budget_mb.map(|mb| mb * 1024 * 1024);
    let backend = HcclBackend::create(config).map_err(|e| fail("create", e.category(), e))?;
    let world = args.world as usize;
    let mut ops = 0;
    let mut comms = Vec::new();
    for epoch in 1..=args.epochs {
        let root = root_info(&backend, args, epoch).await?;
        let source = EpochSource::RootInfo {
            root,
            world: args.world,
            rank: args.rank,
        };
        let comm = backend
            .enter_epoch(epoch, source)
            .await
            .map_err(|e| fail(format!("init-e{epoch}"), e.category(), e))?;
        for op in 0..args.ops {
            let mut buf: Vec<u8> = (0..args.count)
                .flat_map(|i| (((args.rank + 1) as f32) * ((i + 1) as f32)).to_le_bytes())
                .collect();
            comm.all_reduce(&mut buf, DataType::F32, ReduceOp::Sum)
                .await
                .map_err(|e| fail(format!("all-reduce-e{epoch}-{op}"), e.category(), e))?;
            let ranks_sum = (world * (world + 1) / 2) as f32;
            for (i, chunk) in buf.chunks_exact(4).enumerate() {
                let got = f32::from_le_bytes(chunk.try_into().expect("4 bytes"));
                let want = ranks_sum * (i + 1) as f32;
                if got != want {
                    return Ok(Outcome::Wrong(format!(
                        "epoch={epoch} op={op} index={i} got={got} want={want}"
                    )));
                }
            }
            ops += 1;
        }
        if args.bench && epoch == 1 {
            bench(&backend, args).await?;
        }
        if args.health {
            backend
                .health_check()
                .await
                .map_err(|e| fail(format!("health-e{epoch}"), e.category(), e))?;
        }
        // Keep the handle: the epoch stays current until the next one switches.
        comms.push(comm);
    }
    let mem = backend.memory();
    Ok(Outcome::Ok(format!(
        "ok rank={} world={} epochs={} ops={ops} live_communicators={} reserved_bytes={}",
        args.rank, args.world, args.epochs, mem.live_communicators, mem.reserved_bytes
    )))
}
