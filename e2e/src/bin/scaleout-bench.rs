//! `cargo scaleout-bench`: the scale-out benchmark of issue #6.
//!
//! For a freshly generated weights set of `--size-mib` over `tc`-shaped data links of
//! `--rate-mbit` per host (each direction), it measures, in one run of a whole local
//! installation (`hcomm_e2e::testbed`): the time from `kubectl scale hcg/<g> --replicas=1+k`
//! to all `1+k` members Ready, for `k` joiners, with `scaling.strategy: Incremental` and
//! with `Rebuild` (teardown of the domain and a new set built from scratch); and the
//! physical floor, the weights over one joiner's link rate. Every member sits on its own
//! host (one device per host), so each joiner's downlink is a separate shaped link.
//!
//! Each (strategy, k) gets a fresh group (`bench-inc-2`, `bench-reb-4`, ...) with its own
//! weights set (a distinct seed), so no joiner's content-addressed store already holds it.
//! The group is applied with one member, which imports the set from the source folder;
//! then the clock starts, the group is scaled, and it stops when `wait_pool_ready` sees
//! `1+k` Ready members. A member timeline (Pod watch) gives each joiner's sync
//! (weights-synced − verified) and join (ready − weights-synced) durations.
//!
//! Needs root (network namespaces, tc); exits 2 otherwise. With `--output FILE` the
//! section between `<!-- scaleout:begin -->` and `<!-- scaleout:end -->` is rewritten
//! (created at the end if absent); nothing else in the file is touched.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::LABEL_GROUP;
use hcomm_e2e::hosts::Shaping;
use hcomm_e2e::testbed::{self, MemberPod, Testbed, TestbedOptions, Timeline, binaries};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

const USAGE: &str = "\
usage: cargo scaleout-bench [--size-mib N] [--rate-mbit 2000[,500...]] [--joiners 1,2,4]
                            [--strategies incremental,rebuild] [--output FILE]
                            [--link-check auto|iperf3|blast|none] [--timeout-secs S]
                            [--connect-timeout-secs S]
                            [--keep-weights] [--no-build]

Scale-out time (scale request → all members Ready) for k joiners, Incremental vs Rebuild,
against the floor weights ÷ link rate, on simulated hosts (network namespaces, tc htb on
every data link) with the real control plane, operator and agents. Needs root.

  --size-mib N        weights set size (default 1024)
  --rate-mbit LIST    data link rate per host and direction (default 2000); with several,
                      the whole matrix runs at each, the links reshaped in between
  --joiners LIST      joiner counts (default 1,2,4); hosts = 1 + the largest
  --strategies LIST   incremental, rebuild or both (default both)
  --output FILE       rewrite the scaleout section of FILE (e.g. docs/benchmarks.md)
  --link-check MODE   raw link measurement between two hosts (default auto: iperf3 if
                      installed, else a built-in TCP blast)
  --timeout-secs S    limit of every wait (default 300)
  --connect-timeout-secs S
                      the groups' comm.connectTimeoutSeconds (default 120). The agents give
                      a domain's initialisation twice that; with Rebuild, members whose
                      weights are already local wait in Joining for the ones still syncing,
                      so a sync longer than that fails the join and rebuilds again
  --keep-weights      keep each run's weights (source and host stores) until the end
  --no-build          do not build agent/operator/worker/router first (when run by cargo)";

const NS: &str = "default";
const BEGIN: &str = "<!-- scaleout:begin -->";
const END: &str = "<!-- scaleout:end -->";
/// Target: incremental scale-out within this much of the floor.
const FLOOR_SLACK_S: f64 = 0.5;
/// Target: 4 joiners within this factor of one joiner.
const FANOUT_FACTOR: f64 = 1.15;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Strategy {
    Incremental,
    Rebuild,
}

impl Strategy {
    fn parse(s: &str) -> Result<Strategy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "incremental" | "inc" => Ok(Strategy::Incremental),
            "rebuild" | "reb" => Ok(Strategy::Rebuild),
            other => bail!("unknown strategy {other:?} (incremental, rebuild)"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Strategy::Incremental => "incremental",
            Strategy::Rebuild => "rebuild",
        }
    }
    fn crd(self) -> &'static str {
        match self {
            Strategy::Incremental => "Incremental",
            Strategy::Rebuild => "Rebuild",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Strategy::Incremental => "inc",
            Strategy::Rebuild => "reb",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkCheck {
    Auto,
    Iperf3,
    Blast,
    None,
}

#[derive(Debug, Clone)]
struct Args {
    size_mib: u64,
    rates: Vec<u32>,
    joiners: Vec<usize>,
    strategies: Vec<Strategy>,
    output: Option<PathBuf>,
    link_check: LinkCheck,
    timeout: Duration,
    connect_timeout_s: u32,
    keep_weights: bool,
    build: bool,
}

fn parse(argv: &[String]) -> Result<Args> {
    let mut a = Args {
        size_mib: 1024,
        rates: vec![2000],
        joiners: vec![1, 2, 4],
        strategies: vec![Strategy::Incremental, Strategy::Rebuild],
        output: None,
        link_check: LinkCheck::Auto,
        timeout: Duration::from_secs(300),
        connect_timeout_s: 120,
        keep_weights: false,
        build: true,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--size-mib" => a.size_mib = value("--size-mib")?.parse()?,
            "--rate-mbit" => {
                a.rates = value("--rate-mbit")?
                    .split(',')
                    .map(|s| s.trim().parse::<u32>())
                    .collect::<std::result::Result<_, _>>()
                    .context("--rate-mbit: comma-separated numbers")?;
            }
            "--joiners" => {
                a.joiners = value("--joiners")?
                    .split(',')
                    .map(|s| s.trim().parse::<usize>())
                    .collect::<std::result::Result<_, _>>()
                    .context("--joiners: comma-separated numbers")?;
            }
            "--strategies" => {
                a.strategies = value("--strategies")?
                    .split(',')
                    .map(Strategy::parse)
                    .collect::<Result<_>>()?;
            }
            "--output" => a.output = Some(PathBuf::from(value("--output")?)),
            "--link-check" => {
                a.link_check = match value("--link-check")?.as_str() {
                    "auto" => LinkCheck::Auto,
                    "iperf3" => LinkCheck::Iperf3,
                    "blast" => LinkCheck::Blast,
                    "none" => LinkCheck::None,
                    other => bail!("--link-check {other:?}: auto, iperf3, blast or none"),
                }
            }
            "--timeout-secs" => a.timeout = Duration::from_secs(value("--timeout-secs")?.parse()?),
            "--connect-timeout-secs" => {
                a.connect_timeout_s = value("--connect-timeout-secs")?.parse()?;
            }
            "--keep-weights" => a.keep_weights = true,
            "--no-build" => a.build = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    ensure!(a.size_mib > 0, "--size-mib must be positive");
    ensure!(
        !a.rates.is_empty() && a.rates.iter().all(|&r| r > 0),
        "--rate-mbit: positive rates"
    );
    ensure!(
        !a.joiners.is_empty() && a.joiners.iter().all(|&k| (1..=16).contains(&k)),
        "--joiners: each between 1 and 16"
    );
    ensure!(!a.strategies.is_empty(), "--strategies: at least one");
    ensure!(
        (1..=600).contains(&a.connect_timeout_s),
        "--connect-timeout-secs: 1 to 600"
    );
    a.joiners.sort_unstable();
    a.joiners.dedup();
    a.strategies.sort_unstable();
    a.strategies.dedup();
    Ok(a)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // Helpers this binary runs inside a simulated host for the raw link check.
    match argv.first().map(String::as_str) {
        Some("__blast-recv") => return exit_of(blast::receive(&argv[1..])),
        Some("__blast-send") => return exit_of(blast::send(&argv[1..])),
        _ => {}
    }
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(2);
        }
    };
    if effective_uid() != Some(0) {
        eprintln!(
            "scaleout-bench must run as root: it builds network namespaces and shapes their \
             links with tc (e.g. `sudo -E cargo scaleout-bench ...`)"
        );
        return ExitCode::from(2);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HCOMM_BENCH_LOG")
                // The control plane's first seconds answer 500s; the client logs each.
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(bench(args, argv)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scaleout-bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn exit_of(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The effective uid, from `/proc/self/status` (`Uid: real effective saved fs`).
fn effective_uid() -> Option<u32> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Progress lines, stamped with the time since the benchmark began.
struct Clock(Instant);

impl Clock {
    fn say(&self, what: impl std::fmt::Display) {
        eprintln!("[{:>7.1}s] {what}", self.0.elapsed().as_secs_f64());
    }
}

/// One (strategy, joiners) measurement.
#[derive(Debug, Clone)]
struct RunResult {
    rate_mbit: u32,
    strategy: Strategy,
    joiners: usize,
    bytes: u64,
    floor_s: f64,
    time_s: f64,
    /// First new member Pod seen, after the scale request.
    first_pod_s: Option<f64>,
    /// Rebuild: the old member's Pod deleted, after the scale request.
    teardown_s: Option<f64>,
    /// Time with no member Ready (Rebuild: old member's gate False → first new one Ready).
    outage_s: f64,
    /// Slowest new member (the last whose weights arrived): verified − first seen.
    verify_s: Option<f64>,
    /// Slowest new member: weights-synced − verified.
    sync_s: Option<f64>,
    /// Slowest new member: ready − weights-synced.
    join_s: Option<f64>,
    /// Share of all cores busy during the scale-out (whole machine).
    machine_busy: f64,
    /// CPU seconds all agents used during the scale-out.
    agent_cpu_s: f64,
}

impl RunResult {
    fn over_floor(&self) -> f64 {
        self.time_s - self.floor_s
    }
}

async fn bench(args: Args, argv: Vec<String>) -> Result<()> {
    let clock = Clock(Instant::now());
    if args.build && std::env::var_os("CARGO").is_some() {
        clock.say("building hcomm-agent, hcomm-operator, hcomm-worker, hcomm-router");
        testbed::binaries::build_programs()?;
    }
    let hosts = 1 + *args.joiners.iter().max().expect("joiners");
    let load_before = loadavg();
    clock.say(format!(
        "starting {hosts} simulated hosts (1 device each, data links {} Mbit/s per direction), \
         a control plane, agents and the operator",
        args.rates[0]
    ));
    let mut bed = Testbed::start(TestbedOptions {
        hosts,
        devices_per_host: 1,
        data_shaping: Shaping::rate(args.rates[0]),
        ..Default::default()
    })
    .await
    .context("testbed")?;
    ensure!(
        bed.hosts().is_isolated(),
        "the hosts are not network namespaces; the links would not be shaped"
    );
    clock.say(format!("up; logs in {}", bed.dir().join("logs").display()));
    let result = run_all(&mut bed, &args, &clock).await;
    if result.is_err() {
        eprintln!(
            "logs: {} (kept with HCOMM_E2E_KEEP_STATE=1)",
            bed.dir().join("logs").display()
        );
    }
    clock.say("cleaning up");
    bed.stop().await;
    let (links, results) = result?;
    let load_after = loadavg();
    let report = Report {
        args: &args,
        argv: &argv,
        links,
        results: &results,
        load_before,
        load_after,
        wall: clock.0.elapsed(),
    };
    println!();
    print!("{}", report.rows());
    println!();
    let section = report.markdown();
    println!("{section}");
    if let Some(path) = &args.output {
        write_section(path, &section)?;
        eprintln!("wrote the scaleout section of {}", path.display());
    }
    Ok(())
}

async fn run_all(
    bed: &mut Testbed,
    args: &Args,
    clock: &Clock,
) -> Result<(Vec<(u32, Option<LinkResult>)>, Vec<RunResult>)> {
    let timeline = Timeline::start(bed.client().await?, NS);
    let mut links = Vec::new();
    let mut results = Vec::new();
    let mut seed = 0x5ca1_e000_u64 + u64::from(std::process::id()) * 100;
    for (i, &rate) in args.rates.iter().enumerate() {
        if i > 0 {
            clock.say(format!("reshaping every data link to {rate} Mbit/s"));
            for h in 0..bed.hosts().len() {
                bed.hosts().shape(h, Shaping::rate(rate))?;
            }
        }
        let link = match measure_link(bed, args.link_check) {
            Ok(l) => {
                if let Some(l) = &l {
                    clock.say(format!(
                        "raw link host-0 → host-1 ({}): {:.0} Mbit/s goodput ({:.1} % of the tc rate)",
                        l.tool,
                        l.mbit,
                        100.0 * l.mbit / f64::from(rate)
                    ));
                }
                l
            }
            Err(e) => {
                clock.say(format!("raw link check failed (continuing): {e:#}"));
                None
            }
        };
        links.push((rate, link));
        // k-major order, strategies interleaved: background load hits both alike.
        for &k in &args.joiners {
            for &strategy in &args.strategies {
                seed += 1;
                let r = run_one(bed, &timeline, args, clock, rate, strategy, k, seed)
                    .await
                    .with_context(|| {
                        format!("{} with {k} joiner(s) at {rate} Mbit/s", strategy.name())
                    })?;
                clock.say(format!(
                    "{} k={k} {rate} Mbit/s: {:.3} s (floor {:.3} s, +{:.3} s); slowest joiner: \
                     sync {} s, join {} s; no member Ready for {:.2} s; machine CPU {:.0} % busy, \
                     agents {:.1} CPU-s",
                    strategy.name(),
                    r.time_s,
                    r.floor_s,
                    r.over_floor(),
                    opt(r.sync_s),
                    opt(r.join_s),
                    r.outage_s,
                    100.0 * r.machine_busy,
                    r.agent_cpu_s
                ));
                results.push(r);
            }
        }
    }
    Ok((links, results))
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    bed: &Testbed,
    timeline: &Timeline,
    args: &Args,
    clock: &Clock,
    rate_mbit: u32,
    strategy: Strategy,
    k: usize,
    seed: u64,
) -> Result<RunResult> {
    let group = if args.rates.len() > 1 {
        format!("bench-{}-{k}-r{rate_mbit}", strategy.short())
    } else {
        format!("bench-{}-{k}", strategy.short())
    };
    let source = bed.dir().join("models").join(&group);
    let digest = testbed::weights::generate(&source, args.size_mib, seed)?;
    let bytes = args.size_mib * 1024 * 1024;
    let floor_s = bytes as f64 / (f64::from(rate_mbit) * 1e6 / 8.0);
    clock.say(format!(
        "{group}: {} MiB weights (seed {seed}, {digest}); applying with 1 member",
        args.size_mib
    ));
    bed.kubectl_apply(&group_manifest(
        &group,
        strategy,
        &source,
        &digest,
        args.connect_timeout_s,
    )?)?;
    let before = bed.wait_pool_ready(NS, &group, 1, args.timeout).await?;
    // Let the first member's start-up (import, health probes) settle.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // `ip netns exec` execs the agent, so these are the agents' own pids.
    let agents: Vec<u32> = (0..bed.hosts().len())
        .filter_map(|i| bed.agent_pid(i))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == binaries::AGENT)
        })
        .collect();
    ensure!(
        agents.len() == bed.hosts().len(),
        "could not find every agent's pid for the CPU accounting"
    );
    let cpu0 = machine_cpu();
    let agents0 = process_cpu_s(&agents);
    clock.say(format!("{group}: kubectl scale --replicas={}", 1 + k));
    let t0 = Instant::now();
    bed.scale(&group, (1 + k) as u32)?;
    // Looked at every 20 ms: the clock stops at most that late.
    let after = bed
        .wait_pool_ready_polling(NS, &group, 1 + k, args.timeout, Duration::from_millis(20))
        .await?;
    let elapsed = t0.elapsed();
    let cpu1 = machine_cpu();
    let agents1 = process_cpu_s(&agents);

    let nodes: std::collections::BTreeSet<&str> = after.iter().map(|m| m.node.as_str()).collect();
    ensure!(
        nodes.len() == after.len(),
        "members share a host (every member should have its own): {after:?}"
    );
    let new: Vec<&MemberPod> = after
        .iter()
        .filter(|m| !before.iter().any(|b| b.uid == m.uid))
        .collect();
    match strategy {
        Strategy::Incremental => ensure!(
            new.len() == k,
            "incremental: the first member must be kept; before {before:?}, after {after:?}"
        ),
        Strategy::Rebuild => ensure!(
            new.len() == 1 + k,
            "rebuild: every member must be new; before {before:?}, after {after:?}"
        ),
    }
    // The watch may trail the list by a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    let marks = loop {
        let marks: Vec<_> = new
            .iter()
            .filter_map(|m| timeline.member(&m.name))
            .collect();
        if (marks.len() == new.len() && marks.iter().all(|m| m.ready.is_some()))
            || Instant::now() > deadline
        {
            break marks;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let start = timeline.offset(t0);
    // The slowest joiner: the last whose weights arrived.
    let slowest = marks
        .iter()
        .max_by_key(|m| m.synced.unwrap_or(Duration::MAX));
    let secs = |a: Option<Duration>, b: Option<Duration>| Some(b?.saturating_sub(a?).as_secs_f64());
    let verify_s = slowest.and_then(|m| secs(m.created, m.verified));
    let sync_s = slowest.and_then(|m| secs(m.verified, m.synced));
    let join_s = slowest.and_then(|m| secs(m.synced, m.ready));
    // Serving gap: from the old member's gate going False (its drain request) to the
    // first new member's gate True; zero when the old member kept serving.
    let old_gate_off = before
        .first()
        .and_then(|b| timeline.member(&b.name)?.drain_requested)
        .filter(|d| *d >= start);
    let first_ready = marks.iter().filter_map(|m| m.ready).min();
    let outage_s = match (old_gate_off, first_ready) {
        (Some(off), Some(on)) => on.saturating_sub(off).as_secs_f64(),
        _ => 0.0,
    };
    let first_pod_s = marks
        .iter()
        .filter_map(|m| m.created)
        .min()
        .map(|c| c.saturating_sub(start).as_secs_f64());
    let teardown_s = match strategy {
        Strategy::Incremental => None,
        Strategy::Rebuild => before
            .first()
            .and_then(|b| timeline.member(&b.name)?.deleted)
            .map(|d| d.saturating_sub(start).as_secs_f64()),
    };
    let result = RunResult {
        rate_mbit,
        strategy,
        joiners: k,
        bytes,
        floor_s,
        time_s: elapsed.as_secs_f64(),
        first_pod_s,
        teardown_s,
        outage_s,
        verify_s,
        sync_s,
        join_s,
        machine_busy: busy_between(cpu0, cpu1),
        agent_cpu_s: agents1 - agents0,
    };

    clock.say(format!("{group}: deleting"));
    delete_group(bed, &group, args.timeout).await?;
    if !args.keep_weights {
        remove_weights(bed, &source, &digest, &group);
    }
    Ok(result)
}

/// The decode example's `HcommGroup`, renamed, with one member of one device, the
/// strategy, room for every joiner at once (`maxJoining`, `maxReplicas`), the connect
/// timeout, and the weights pointed at `source`.
fn group_manifest(
    group: &str,
    strategy: Strategy,
    source: &Path,
    digest: &str,
    connect_timeout_s: u32,
) -> Result<String> {
    use serde::Deserialize as _;
    let path = testbed::pools::workspace_root().join("examples/decode-pool.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let mut doc = serde_yaml::Deserializer::from_str(&text)
        .map(serde_json::Value::deserialize)
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("parse examples/decode-pool.yaml")?
        .into_iter()
        .find(|d| d["kind"] == "HcommGroup")
        .context("no HcommGroup in examples/decode-pool.yaml")?;
    doc["metadata"]["name"] = group.into();
    doc["metadata"]["namespace"] = NS.into();
    let spec = &mut doc["spec"];
    spec["replicas"] = 1.into();
    let max = spec["maxReplicas"].as_i64().unwrap_or(0).max(17);
    spec["maxReplicas"] = max.into();
    spec["devicesPerMember"] = 1.into();
    spec["scaling"]["strategy"] = strategy.crd().into();
    spec["scaling"]["maxJoining"] = 16.into();
    spec["comm"]["connectTimeoutSeconds"] = connect_timeout_s.into();
    spec["weights"] = serde_json::json!({
        "source": source.display().to_string(),
        "version": format!("{group}-v1"),
        "digest": digest,
    });
    Ok(serde_json::to_string_pretty(&doc)?)
}

/// Deletes the group and waits until it and all its Pods are gone.
async fn delete_group(bed: &Testbed, group: &str, within: Duration) -> Result<()> {
    bed.kubectl(&["delete", "hcg", group, "-n", NS, "--wait=false"])?;
    let client = bed.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let groups: Api<HcommGroup> = Api::namespaced(client, NS);
    let deadline = Instant::now() + within;
    loop {
        let left = pods
            .list(&ListParams::default().labels(&format!("{LABEL_GROUP}={group}")))
            .await
            .context("list pods")?
            .items
            .len();
        let exists = groups.get_opt(group).await.context("get group")?.is_some();
        if left == 0 && !exists {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{group}: {left} Pods left (group exists: {exists}) after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The kubelet stops the worker processes of deleted Pods.
    let prefix = format!("{NS}/{group}-");
    while bed.workers().values().any(|p| p.pod.starts_with(&prefix)) {
        ensure!(Instant::now() < deadline, "{group}: worker processes left");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Frees the disk a finished run used: the source folder and the set in every host's
/// store (no later run uses that digest).
fn remove_weights(bed: &Testbed, source: &Path, digest: &str, group: &str) {
    let _ = std::fs::remove_dir_all(source);
    let hex = digest.trim_start_matches("sha256:");
    for i in 0..bed.hosts().len() {
        let store = bed.weights_dir(i);
        let _ = std::fs::remove_dir_all(store.join("groups").join(format!("{NS}_{group}")));
        let _ = std::fs::remove_dir_all(store.join("versions").join(hex));
        let _ = std::fs::remove_dir_all(store.join("staging").join(hex));
        let _ = std::fs::remove_file(store.join("manifests").join(format!("{hex}.json")));
    }
}

// ---- CPU accounting ----

/// (busy, total) jiffies of all cores, from `/proc/stat`.
fn machine_cpu() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

fn busy_between(a: (u64, u64), b: (u64, u64)) -> f64 {
    let total = b.1.saturating_sub(a.1);
    if total == 0 {
        return 0.0;
    }
    b.0.saturating_sub(a.0) as f64 / total as f64
}

/// CPU seconds (user + system) the processes used so far.
fn process_cpu_s(pids: &[u32]) -> f64 {
    let hz = clock_ticks();
    pids.iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // Fields after the command name, which is in parentheses: state is field 3,
            // utime 14 and stime 15.
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = f.get(11)?.parse().ok()?;
            let stime: u64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) as f64 / hz)
        })
        .sum()
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

// ---- the raw link ----

#[derive(Debug, Clone)]
struct LinkResult {
    tool: &'static str,
    mbit: f64,
}

/// Goodput host-0 → host-1 over the shaped data links for 3 s.
fn measure_link(bed: &Testbed, mode: LinkCheck) -> Result<Option<LinkResult>> {
    let has_iperf3 = Command::new("which")
        .arg("iperf3")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mode = match mode {
        LinkCheck::Auto if has_iperf3 => LinkCheck::Iperf3,
        LinkCheck::Auto => LinkCheck::Blast,
        m => m,
    };
    let hosts = bed.hosts();
    let (from, to) = (hosts.host(0)?, hosts.host(1)?);
    let target = to.data_ip().to_string();
    match mode {
        LinkCheck::None | LinkCheck::Auto => Ok(None),
        LinkCheck::Iperf3 => {
            let mut server = to.command("iperf3");
            server
                .args(["-s", "-1", "-B", &target, "-p", "5299"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _server = to.spawn_command(server)?;
            std::thread::sleep(Duration::from_millis(500));
            let out = from
                .command("iperf3")
                .args(["-c", &target, "-p", "5299", "-t", "3", "-J"])
                .output()
                .context("run iperf3 -c")?;
            ensure!(
                out.status.success(),
                "iperf3: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            let bps = v["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .context("iperf3 JSON without end.sum_received")?;
            Ok(Some(LinkResult {
                tool: "iperf3",
                mbit: bps / 1e6,
            }))
        }
        LinkCheck::Blast => {
            let exe = std::env::current_exe()?.display().to_string();
            let addr = format!("{target}:5299");
            let mut recv = to
                .command(&exe)
                .args(["__blast-recv", &addr])
                .stdout(Stdio::piped())
                .spawn()
                .context("start the blast receiver")?;
            std::thread::sleep(Duration::from_millis(300));
            let sent = from
                .command(&exe)
                .args(["__blast-send", &addr, "3"])
                .status()
                .context("run the blast sender")?;
            let mut out = String::new();
            recv.stdout
                .take()
                .context("receiver stdout")?
                .read_to_string(&mut out)?;
            let _ = recv.wait();
            ensure!(sent.success(), "blast sender failed");
            Ok(Some(LinkResult {
                tool: "TCP blast",
                mbit: out.trim().parse().context("receiver output")?,
            }))
        }
    }
}

/// A plain TCP blast: the sender writes for N seconds, the receiver prints Mbit/s from
/// its first byte to EOF.
mod blast {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result};

    pub fn receive(args: &[String]) -> Result<()> {
        let addr = args.first().context("__blast-recv ADDR")?;
        let listener = TcpListener::bind(addr)?;
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        let mut first: Option<Instant> = None;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            total += n as u64;
        }
        let secs = first.map(|f| f.elapsed().as_secs_f64()).unwrap_or(0.0);
        println!("{:.1}", total as f64 * 8.0 / secs.max(1e-9) / 1e6);
        Ok(())
    }

    pub fn send(args: &[String]) -> Result<()> {
        let addr = args.first().context("__blast-send ADDR SECS")?;
        let secs: f64 = args.get(1).context("__blast-send ADDR SECS")?.parse()?;
        let mut s = TcpStream::connect(addr)?;
        let buf = vec![0x5au8; 1 << 20];
        let until = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < until {
            s.write_all(&buf)?;
        }
        Ok(())
    }
}

// ---- the report ----

struct Report<'a> {
    args: &'a Args,
    argv: &'a [String],
    links: Vec<(u32, Option<LinkResult>)>,
    results: &'a [RunResult],
    load_before: String,
    load_after: String,
    wall: Duration,
}

impl Report<'_> {
    fn find(&self, rate: u32, s: Strategy, k: usize) -> Option<&RunResult> {
        self.results
            .iter()
            .find(|r| r.rate_mbit == rate && r.strategy == s && r.joiners == k)
    }

    /// Time relative to the same strategy and rate with one joiner.
    fn to_one(&self, r: &RunResult) -> Option<f64> {
        self.find(r.rate_mbit, r.strategy, 1)
            .map(|one| r.time_s / one.time_s)
    }

    /// Rebuild time ÷ incremental time for the same k and rate.
    fn rebuild_ratio(&self, rate: u32, k: usize) -> Option<f64> {
        let inc = self.find(rate, Strategy::Incremental, k)?;
        let reb = self.find(rate, Strategy::Rebuild, k)?;
        Some(reb.time_s / inc.time_s)
    }

    fn rebuild_cell(&self, r: &RunResult) -> String {
        match r.strategy {
            Strategy::Rebuild => opt(self.rebuild_ratio(r.rate_mbit, r.joiners)),
            Strategy::Incremental => "-".into(),
        }
    }

    /// nccl-tests-like rows.
    fn rows(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# scale-out: {} MiB weights; time = scale request → all members Ready; slowest joiner = last weights to arrive",
            self.args.size_mib
        );
        let _ = writeln!(
            out,
            "#{:>10} {:>11} {:>7} {:>12} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5}",
            "rate(Mb)",
            "strategy",
            "joiners",
            "size(B)",
            "floor(s)",
            "time(s)",
            "over(s)",
            "xfloor",
            "x1join",
            "reb/inc",
            "pod(s)",
            "vrfy(s)",
            "sync(s)",
            "join(s)",
            "gap(s)",
            "cpu%"
        );
        for r in self.results {
            let _ = writeln!(
                out,
                " {:>10} {:>11} {:>7} {:>12} {:>8.3} {:>8.3} {:>8.3} {:>7.3} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7.2} {:>5.0}",
                r.rate_mbit,
                r.strategy.name(),
                r.joiners,
                r.bytes,
                r.floor_s,
                r.time_s,
                r.over_floor(),
                r.time_s / r.floor_s,
                opt(self.to_one(r)),
                self.rebuild_cell(r),
                opt(r.first_pod_s),
                opt(r.verify_s),
                opt(r.sync_s),
                opt(r.join_s),
                r.outage_s,
                100.0 * r.machine_busy,
            );
        }
        out
    }

    /// PASS/MISS lines for the issue's targets.
    fn targets(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for &(rate, ref link) in &self.links {
            for r in self
                .results
                .iter()
                .filter(|r| r.rate_mbit == rate && r.strategy == Strategy::Incremental)
            {
                let ok = r.time_s <= r.floor_s + FLOOR_SLACK_S;
                lines.push(format!(
                    "**{}** {rate} Mbit/s, incremental, {} joiner{}: {:.2} s against ≤ floor + {FLOOR_SLACK_S} s = {:.2} s ({:.2} s {})",
                    if ok { "PASS" } else { "MISS" },
                    r.joiners,
                    if r.joiners == 1 { "" } else { "s" },
                    r.time_s,
                    r.floor_s + FLOOR_SLACK_S,
                    (r.time_s - (r.floor_s + FLOOR_SLACK_S)).abs(),
                    if ok { "to spare" } else { "over" },
                ));
                // What TCP itself allows: tc shapes Ethernet frames, so even iperf3's payload
                // stays ~4 % under the rate. Reported beside the issue's floor, not instead.
                if let Some(l) = link.as_ref().filter(|l| l.mbit > 0.0) {
                    let goodput_floor = r.floor_s * f64::from(rate) / l.mbit;
                    lines.push(format!(
                        "{rate} Mbit/s, incremental, {} joiner{} (reported, no threshold): {:.2} s is {:+.2} s over the goodput floor {goodput_floor:.2} s (the weights at the {:.0} Mbit/s {} measured on the same link)",
                        r.joiners,
                        if r.joiners == 1 { "" } else { "s" },
                        r.time_s,
                        r.time_s - goodput_floor,
                        l.mbit,
                        l.tool,
                    ));
                }
            }
            match (
                self.find(rate, Strategy::Incremental, 1),
                self.find(rate, Strategy::Incremental, 4),
            ) {
                (Some(one), Some(four)) => {
                    let ratio = four.time_s / one.time_s;
                    lines.push(format!(
                        "**{}** {rate} Mbit/s, incremental, 4 joiners against ≤ {FANOUT_FACTOR} × 1 joiner: {:.2} s / {:.2} s = {ratio:.2}×",
                        if ratio <= FANOUT_FACTOR { "PASS" } else { "MISS" },
                        four.time_s,
                        one.time_s,
                    ));
                }
                _ => lines.push(format!(
                    "not measured at {rate} Mbit/s: 4 joiners ≤ {FANOUT_FACTOR} × 1 joiner (needs incremental runs with 1 and 4 joiners)"
                )),
            }
            let ratios: Vec<String> = self
                .args
                .joiners
                .iter()
                .filter_map(|&k| {
                    let ratio = self.rebuild_ratio(rate, k)?;
                    let gap = self.find(rate, Strategy::Rebuild, k)?.outage_s;
                    Some(format!(
                        "{k} joiner{} {ratio:.2}× (no member Ready for {gap:.2} s)",
                        if k == 1 { "" } else { "s" }
                    ))
                })
                .collect();
            if !ratios.is_empty() {
                lines.push(format!(
                    "{rate} Mbit/s, Rebuild ÷ Incremental (reported, no threshold): {}",
                    ratios.join(", ")
                ));
            }
        }
        lines
    }

    fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "{BEGIN}");
        let _ = writeln!(
            md,
            "<!-- generated by `cargo scaleout-bench --output docs/benchmarks.md`; rerun it rather than editing -->"
        );
        let _ = writeln!(md);
        let _ = writeln!(md, "```text");
        let _ = writeln!(md, "date: {}", utc_now());
        let _ = writeln!(md, "host: {}", host_line());
        let _ = writeln!(
            md,
            "load average before: {}; after: {}; wall time {:.0} s",
            self.load_before,
            self.load_after,
            self.wall.as_secs_f64()
        );
        let _ = writeln!(md, "hcomm: {}, {}", git_rev(), build_line());
        let _ = writeln!(
            md,
            "hosts: {} network-namespace hosts, 1 device each; data links tc htb per host and direction",
            1 + self.args.joiners.iter().max().copied().unwrap_or(1),
        );
        for (rate, link) in &self.links {
            match link {
                Some(l) => {
                    let _ = writeln!(
                        md,
                        "raw link at {rate} Mbit/s, host-0 → host-1 ({}, 3 s): {:.0} Mbit/s goodput = {:.1} % of the tc rate",
                        l.tool,
                        l.mbit,
                        100.0 * l.mbit / f64::from(*rate)
                    );
                }
                None => {
                    let _ = writeln!(md, "raw link at {rate} Mbit/s: not measured");
                }
            }
        }
        let _ = writeln!(
            md,
            "weights: {} MiB per run, generated with a distinct seed per run (4 files, 4 MiB chunks)",
            self.args.size_mib
        );
        let _ = writeln!(md, "```");
        let _ = writeln!(md);
        let _ = writeln!(md, "Command (as root):");
        let _ = writeln!(md);
        let _ = writeln!(md, "```sh");
        let _ = writeln!(md, "cargo scaleout-bench {}", self.argv.join(" "));
        let _ = writeln!(md, "```");
        let _ = writeln!(md);
        let _ = writeln!(
            md,
            "| link (Mbit/s) | strategy | joiners | size (MiB) | floor (s) | time (s) | time − floor (s) | ratio to floor | ratio to 1 joiner | Rebuild / Incremental | no member Ready (s) | first Pod (s) | slowest joiner: verify / sync / join (s) | machine CPU busy | agents CPU (s) |"
        );
        let _ = writeln!(
            md,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for r in self.results {
            let _ = writeln!(
                md,
                "| {} | {}{} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {:.2} | {} | {} / {} / {} | {:.0} % | {:.1} |",
                r.rate_mbit,
                r.strategy.crd(),
                r.teardown_s
                    .map(|t| format!(" (old member gone at {t:.2} s)"))
                    .unwrap_or_default(),
                r.joiners,
                r.bytes / (1024 * 1024),
                r.floor_s,
                r.time_s,
                r.over_floor(),
                r.time_s / r.floor_s,
                opt(self.to_one(r)),
                match r.strategy {
                    Strategy::Rebuild => opt(self.rebuild_ratio(r.rate_mbit, r.joiners)),
                    Strategy::Incremental => "–".into(),
                },
                r.outage_s,
                opt(r.first_pod_s),
                opt(r.verify_s),
                opt(r.sync_s),
                opt(r.join_s),
                100.0 * r.machine_busy,
                r.agent_cpu_s,
            );
        }
        let _ = writeln!(md);
        let _ = writeln!(md, "Targets:");
        let _ = writeln!(md);
        for t in self.targets() {
            let _ = writeln!(md, "- {t}");
        }
        let _ = writeln!(md, "{END}");
        md
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn host_line() -> String {
    let uname = Command::new("uname")
        .args(["-srm"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib as f64 / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    format!("{uname}, {cores} cores, {mem_gib:.0} GiB")
}

fn git_rev() -> String {
    let root = testbed::pools::workspace_root();
    let rev = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(root)
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{rev} + uncommitted changes")
    } else {
        rev
    }
}

/// The profile of the agent the testbed runs (the folder it was found in).
fn build_line() -> String {
    match binaries::find(binaries::AGENT) {
        Ok(p) => {
            let profile = p
                .parent()
                .and_then(|d| d.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let kind = match profile.as_str() {
                "debug" => "debug build (dependencies at opt-level 1)",
                "release" => "release build",
                _ => "build",
            };
            let built = Command::new("date")
                .args(["-u", "-r", &p.display().to_string(), "+%Y-%m-%dT%H:%M:%SZ"])
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default();
            format!(
                "{kind} of agent, operator, worker ({}, built {built})",
                p.display()
            )
        }
        Err(_) => "agent not found".into(),
    }
}

/// Replaces the text between the markers (inclusive) with `section`, or appends it under
/// a heading when the markers are absent.
fn write_section(path: &Path, section: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if b < e => {
            let end = e + END.len();
            let end = if text[end..].starts_with('\n') {
                end + 1
            } else {
                end
            };
            format!("{}{}{}", &text[..b], section, &text[end..])
        }
        _ => {
            let mut t = text.clone();
            if !t.is_empty() && !t.ends_with('\n') {
                t.push('\n');
            }
            t.push_str("\n## Scale-out benchmark (issue #6)\n\n");
            t.push_str(section);
            t
        }
    };
    let tmp = path.with_extension("md.tmp");
    std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(new.as_bytes()))
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}
