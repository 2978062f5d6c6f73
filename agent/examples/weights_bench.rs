//! `weights_bench`: weight-sync throughput on `tc`-shaped links, as a fraction of the
//! joiner's link limit, for 1, 2 and 4 sources and 1 and 3 joiners.
//!
//! ```text
//! sudo CARGO_TARGET_DIR=/work/targets/weights cargo run --release -p hcomm-agent \
//!     --example weights_bench -- [--mib 256] [--rate-mbit 200] [--chunk-mib 4]
//! ```
//!
//! Builds 7 simulated hosts (network namespaces, `hcomm_e2e::hosts::SimHosts`) whose data
//! links are each capped at `--rate-mbit` per direction: hosts 0..4 are existing members
//! (each imports the generated set and serves it), hosts 4..7 are joiners. The same binary
//! re-runs itself inside each namespace in a role (`role-origin`, `role-joiner`); joiners
//! start their own chunk server, wait for `go`, fetch from the first `s` members plus the
//! other joiners (the swarm scheme of `hcomm_agent::weights`), and report. Needs root.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hcomm_agent::weights::{
    ChunkServer, Digest, FetchRequest, GroupSecret, Manifest, Place, Progress, ServerConfig,
    WeightStore, fetch,
};
use hcomm_e2e::hosts::{Shaping, SimHosts, SimHostsOptions};

const PORT: u16 = 7440;
const ORIGINS: usize = 4;
const JOINERS: usize = 3;

fn secret() -> GroupSecret {
    GroupSecret::new(b"weights-bench-secret".to_vec())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("role-origin") => role_origin(&args[1..]),
        Some("role-joiner") => role_joiner(&args[1..]),
        _ => orchestrate(&args),
    }
}

fn flag(args: &[String], name: &str, default: u64) -> Result<u64> {
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args.get(i + 1).context("flag without value")?.parse()?),
        None => Ok(default),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `role-origin <set dir> <store dir> <ip> <digest> <chunk bytes>`: import, serve, print
/// `ready`, serve until stdin closes.
fn role_origin(a: &[String]) -> Result<()> {
    let (set, root, ip, digest, chunk) = (
        &a[0],
        &a[1],
        a[2].parse::<IpAddr>()?,
        a[3].parse::<Digest>()?,
        a[4].parse()?,
    );
    let store = WeightStore::open(root)?;
    store.import_dir(Path::new(set), &digest, chunk)?;
    rt().block_on(async {
        let listener = tokio::net::TcpListener::bind((ip, PORT)).await?;
        println!("ready");
        let stdin_closed = tokio::task::spawn_blocking(|| std::io::stdin().lines().count());
        ChunkServer::serve(listener, store, ServerConfig::new(secret()), async {
            let _ = stdin_closed.await;
        })
        .await?;
        Ok(())
    })
}

/// `role-joiner <store dir> <ip> <digest> <index> <count> <sources...>`: serve, print
/// `ready`, wait for `go`, fetch, print `done <secs> <bytes> <bytes from members>`,
/// keep serving until stdin closes.
fn role_joiner(a: &[String]) -> Result<()> {
    let (root, ip, digest) = (&a[0], a[1].parse::<IpAddr>()?, a[2].parse::<Digest>()?);
    let (index, count): (usize, usize) = (a[3].parse()?, a[4].parse()?);
    let sources: Vec<SocketAddr> = a[5..].iter().map(|s| s.parse()).collect::<Result<_, _>>()?;
    let store = WeightStore::open(root)?;
    rt().block_on(async move {
        let listener = tokio::net::TcpListener::bind((ip, PORT)).await?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(ChunkServer::serve(
            listener,
            store.clone(),
            ServerConfig::new(secret()),
            async {
                let _ = stop_rx.await;
            },
        ));
        println!("ready");
        let line = tokio::task::spawn_blocking(|| {
            let mut l = String::new();
            std::io::stdin().read_line(&mut l).map(|_| l)
        })
        .await??;
        if line.trim() != "go" {
            bail!("expected go, got {line:?}");
        }
        let mut req = FetchRequest::new(digest, sources, store.clone(), secret());
        req.place = Place::Stripe { index, count };
        req.bind = Some(ip);
        req.parallelism = 4;
        let started = Instant::now();
        let report = fetch(req, Progress::new()).await?;
        let secs = started.elapsed().as_secs_f64();
        let per: Vec<String> = report
            .progress
            .per_source
            .iter()
            .map(|(a, s)| format!("{}={}", a.ip(), s.bytes))
            .collect();
        println!(
            "done {secs:.3} {} {}",
            report.progress.bytes_fetched,
            per.join(",")
        );
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().lines().count()).await;
        let _ = stop_tx.send(());
        let _ = server.await;
        Ok(())
    })
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<std::process::ChildStdout>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Result<Proc> {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Proc { child, stdin, out })
    }
    fn expect(&mut self, prefix: &str) -> Result<String> {
        let mut l = String::new();
        self.out.read_line(&mut l)?;
        if !l.starts_with(prefix) {
            bail!(
                "expected {prefix:?}, got {l:?} (exit {:?})",
                self.child.try_wait()
            );
        }
        Ok(l.trim().to_owned())
    }
    fn send(&mut self, line: &str) -> Result<()> {
        let s = self.stdin.as_mut().context("stdin")?;
        writeln!(s, "{line}")?;
        Ok(s.flush()?)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if self.child.wait_timeout_ish() {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait WaitBriefly {
    fn wait_timeout_ish(&mut self) -> bool;
}
impl WaitBriefly for Child {
    fn wait_timeout_ish(&mut self) -> bool {
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn generate(dir: &Path, mib: u64) -> Result<()> {
    use rand::{RngCore, SeedableRng};
    std::fs::create_dir_all(dir)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let shards = 4;
    for s in 0..shards {
        let mut data = vec![0u8; (mib << 20) as usize / shards];
        rng.fill_bytes(&mut data);
        std::fs::write(
            dir.join(format!("model-{:05}-of-{shards:05}.safetensors", s + 1)),
            data,
        )?;
    }
    std::fs::write(dir.join("config.json"), b"{}")?;
    Ok(())
}

fn orchestrate(args: &[String]) -> Result<()> {
    let mib = flag(args, "--mib", 256)?;
    let rate = flag(args, "--rate-mbit", 200)? as u32;
    let chunk = flag(args, "--chunk-mib", 4)? << 20;
    let exe = std::env::current_exe()?;
    let work = PathBuf::from(format!("/tmp/hcomm-weights-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let set = work.join("set");
    generate(&set, mib)?;
    let manifest = Manifest::build(&set, chunk)?;
    let digest = manifest.digest();
    let bytes = manifest.total_bytes();
    eprintln!(
        "set: {mib} MiB, {} chunks of {} MiB, {digest}",
        manifest.files.iter().map(|f| f.chunks.len()).sum::<usize>(),
        chunk >> 20
    );
    let hosts =
        SimHosts::create(SimHostsOptions::new(ORIGINS + JOINERS).data_shaping(Shaping::rate(rate)))
            .context("creating simulated hosts (needs root)")?;
    let addr = |i: usize| SocketAddr::new(IpAddr::V4(hosts.hosts()[i].data_ip()), PORT);
    let mut origins = Vec::new();
    for i in 0..ORIGINS {
        let mut cmd = hosts.hosts()[i].command(exe.to_str().context("exe path")?);
        cmd.args([
            "role-origin",
            set.to_str().unwrap(),
            work.join(format!("origin{i}")).to_str().unwrap(),
        ]);
        cmd.args([
            addr(i).ip().to_string(),
            digest.to_string(),
            chunk.to_string(),
        ]);
        let mut p = Proc::spawn(cmd)?;
        p.expect("ready")?;
        origins.push(p);
    }
    println!(
        "| sources | joiners | set (MiB) | link (Mbit/s) | slowest joiner (s) | per-joiner goodput (Mbit/s) | fraction of link | served by members (copies) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for joiners in [1usize, 3] {
        for sources in [1usize, 2, 4] {
            let mut procs = Vec::new();
            for j in 0..joiners {
                let h = ORIGINS + j;
                let mut list: Vec<String> = (0..sources).map(|i| addr(i).to_string()).collect();
                list.extend(
                    (0..joiners)
                        .filter(|&o| o != j)
                        .map(|o| addr(ORIGINS + o).to_string()),
                );
                let root = work.join(format!("joiner{j}-{sources}x{joiners}"));
                let mut cmd = hosts.hosts()[h].command(exe.to_str().unwrap());
                cmd.args([
                    "role-joiner",
                    root.to_str().unwrap(),
                    &addr(h).ip().to_string(),
                    &digest.to_string(),
                ]);
                cmd.args([j.to_string(), joiners.to_string()]).args(&list);
                let mut p = Proc::spawn(cmd)?;
                p.expect("ready")?;
                procs.push((p, root));
            }
            for (p, _) in &mut procs {
                p.send("go")?;
            }
            let mut slowest = 0f64;
            let mut from_members = 0u64;
            let mut goodputs = Vec::new();
            for (p, _) in &mut procs {
                let line = p.expect("done")?;
                let f: Vec<&str> = line.split(' ').collect();
                let secs: f64 = f[1].parse()?;
                let got: u64 = f[2].parse()?;
                for kv in f.get(3).unwrap_or(&"").split(',').filter(|s| !s.is_empty()) {
                    let (ip, b) = kv.split_once('=').context("per-source")?;
                    if (0..sources).any(|i| addr(i).ip().to_string() == ip) {
                        from_members += b.parse::<u64>()?;
                    }
                }
                slowest = slowest.max(secs);
                goodputs.push(got as f64 * 8.0 / secs / 1e6);
            }
            let mean = goodputs.iter().sum::<f64>() / goodputs.len() as f64;
            let group = bytes as f64 * 8.0 / slowest / 1e6;
            println!(
                "| {sources} | {joiners} | {mib} | {rate} | {slowest:.2} | {mean:.1} | {:.2} | {:.2} |",
                group / rate as f64,
                from_members as f64 / bytes as f64
            );
            for (p, root) in procs {
                drop(p);
                let _ = std::fs::remove_dir_all(root);
            }
        }
    }
    drop(origins);
    drop(hosts);
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
