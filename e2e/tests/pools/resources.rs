//! Scale cycles leave nothing behind: no Pods, worker processes, communicators, fds,
//! threads or memory.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, Testbed};

/// Pause before each resource reading.
const SETTLE: Duration = Duration::from_secs(3);

/// Scale-up/down cycles before measuring, and then measured.
const WARM_UP_CYCLES: usize = 10;
const CYCLES: usize = 20;

/// 30 scale up/down cycles (20 measured after 10 warm-up) leave no Pods, processes,
/// communicators, fds, threads or memory behind. Measured in the steady state: the
/// warm-up cycles let bounded caches fill (e.g. an endpoint's pooled links to each peer
/// address, at most hosts × devices of them), so what still grows afterwards is a leak —
/// one fd per cycle would show as +20.
///
/// Precondition: decode at 4 members, Ready.
pub async fn thirty_scale_cycles_leave_nothing_behind(pools: &mut ExamplePools) -> Result<()> {
    pools.decode_at(4).await?;
    let bed = &pools.bed;
    for cycle in 0..WARM_UP_CYCLES {
        scale_cycle(bed)
            .await
            .with_context(|| format!("warm-up cycle {cycle}"))?;
    }
    // Read after the connections of the last cycle's joins settle (probe, chunk-server
    // and rendezvous connections close within a second or two): a leak is what stays.
    tokio::time::sleep(SETTLE).await;
    let before = resources(bed).await?;
    for cycle in 0..CYCLES {
        scale_cycle(bed)
            .await
            .with_context(|| format!("cycle {cycle}"))?;
    }
    tokio::time::sleep(SETTLE).await;
    let after = resources(bed).await?;
    eprintln!("scale cycles: before {before:?}\n              after  {after:?}");
    ensure!(
        after.workers == before.workers,
        "worker processes: {before:?} → {after:?}"
    );
    // Joiners may land on other hosts from one cycle to the next: compare the totals (each
    // host's created − destroyed = open was checked when it was read).
    let total = |r: &Resources| r.communicators.iter().sum::<f64>();
    ensure!(
        total(&after) == total(&before),
        "communicators open: {:?} → {:?}",
        before.communicators,
        after.communicators
    );
    for (who, b) in &before.procs {
        // An agent whose host gained or lost members between the two readings (placement
        // varies from cycle to cycle) opened or closed their endpoints and links for the
        // first time; only agents hosting the same members at both readings are compared.
        if let Some(i) = who
            .strip_prefix("agent host-")
            .and_then(|i| i.parse::<usize>().ok())
            && (before.communicators[i] == 0.0 || before.communicators[i] != after.communicators[i])
        {
            continue;
        }
        let a = after.procs.get(who).context("process gone")?;
        // +8: a leak of one fd every few cycles fails. Before the rendezvous root let go of
        // the socket of a rank that gave up on an abandoned epoch (it held it 10 min), the
        // root's agent gained 9–11 sockets over the 20 cycles in some runs; since, every
        // agent reads the same before and after.
        ensure!(
            a.fds <= b.fds + 8,
            "{who}: open fds grew {} → {} ({:?} → {:?})",
            b.fds,
            a.fds,
            b.fd_kinds,
            a.fd_kinds
        );
        ensure!(
            a.threads <= b.threads + 4,
            "{who}: threads grew {} → {}",
            b.threads,
            a.threads
        );
        ensure!(
            a.rss_kib <= b.rss_kib + 64 * 1024,
            "{who}: RSS grew {} → {} KiB",
            b.rss_kib,
            a.rss_kib
        );
    }
    crate::check::clean(
        &pools.decode_load.latest(),
        "decode through the scale cycles",
    )
}

/// decode 4 → 2 → 4, waiting for each to settle.
async fn scale_cycle(bed: &Testbed) -> Result<()> {
    bed.scale("decode", 2)?;
    bed.wait_pool_ready(NS, "decode", 2, POOL_WAIT).await?;
    bed.wait_members(NS, "decode", 2, POOL_WAIT).await?;
    bed.scale("decode", 4)?;
    bed.wait_pool_ready(NS, "decode", 4, POOL_WAIT).await?;
    Ok(())
}

/// The value of the unlabelled metric `name` in a Prometheus text exposition (shared with
/// the benchmarks).
pub use hcomm_e2e::bench::metric;

#[derive(Debug)]
struct ProcUsage {
    fds: usize,
    /// Open fds by kind (`socket`, `pipe`, `anon_inode:[eventpoll]`, `file`, ...).
    fd_kinds: BTreeMap<String, usize>,
    threads: usize,
    rss_kib: u64,
}

#[derive(Debug)]
struct Resources {
    workers: usize,
    /// `hcomm_agent_communicators_open` per host (created − destroyed).
    communicators: Vec<f64>,
    procs: BTreeMap<String, ProcUsage>,
}

async fn resources(bed: &Testbed) -> Result<Resources> {
    let mut procs = BTreeMap::new();
    let mut pids: Vec<(String, u32)> = (0..bed.hosts().len())
        .filter_map(|i| Some((format!("agent host-{i}"), bed.agent_pid(i)?)))
        .collect();
    pids.extend(bed.operator_pid().map(|p| ("operator".to_owned(), p)));
    for (who, pid) in pids {
        procs.insert(who, usage(pid)?);
    }
    let mut communicators = Vec::new();
    for i in 0..bed.hosts().len() {
        let text = bed.agent_metrics(i)?;
        let value = |name: &str| metric(&text, name).unwrap_or(f64::NAN);
        let open = value("hcomm_agent_communicators_open");
        let created = value("hcomm_agent_communicators_created_total");
        let destroyed = value("hcomm_agent_communicators_destroyed_total");
        ensure!(
            created - destroyed == open,
            "host-{i}: created {created} − destroyed {destroyed} ≠ open {open}"
        );
        communicators.push(open);
    }
    Ok(Resources {
        workers: bed.workers().len(),
        communicators,
        procs,
    })
}

fn usage(pid: u32) -> Result<ProcUsage> {
    let mut fd_kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut fds = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        fds += 1;
        let target = std::fs::read_link(entry.path())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = match target.split_once(':') {
            Some((k, rest)) if k == "anon_inode" => format!("{k}:{rest}"),
            Some((k, _)) => k.to_owned(),
            None => "file".to_owned(),
        };
        *fd_kinds.entry(kind).or_default() += 1;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Ok(ProcUsage {
        fds,
        fd_kinds,
        threads: field("Threads:") as usize,
        rss_kib: field("VmRSS:"),
    })
}
