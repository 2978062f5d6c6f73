//! `cargo scale-bench`: the operator's cost from 100 to 1,000 members and up to 50 groups
//! (issue 20, point 1).
//!
//! On a real control plane with `--nodes` kwok Nodes (8 NPUs each) and the real
//! `hcomm-operator`, a driver plays every node's agent and device plugin ([`driver`]).
//! For each total in `--sizes` (spread over `--groups` groups of `size/groups` members):
//! every group is brought to half size (setup), then one group alone is scaled to full
//! size and back (the single-group time), then every group is scaled to full size at once
//! (the storm), then nothing happens for `--steady-s` seconds (the quiet window). Over
//! the single and storm phases it records the operator's reconciles, their p50/p99 (and
//! the p99 of each phase alone), its apiserver requests per reconcile by verb, its CPU
//! time and that of the control plane's components and the bench (which process the
//! machine was busy with); over the quiet window, the list calls every client made; and
//! the operator's RSS at the end.
//!
//! `--max-joining` sets the groups' `scaling.maxJoining` (how many joiners a group creates
//! at once); `--agent-writes-in-flight` bounds the played agents' writes (all nodes share
//! one client here).
//!
//! Modules, one job each: [`args`] the command line, [`setup`] the cluster and operator,
//! [`driver`] the played agents, [`phases`] one timed scale step, [`measure`] samples and
//! deltas, [`report`] the table and the last line.

mod args;
mod driver;
mod measure;
mod phases;
mod report;
mod setup;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use hcomm_crds::HcommGroup;
use kube::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use args::Args;
use driver::{Driver, OwnRequests};
use hcomm_e2e::bench::Clock;
use phases::{Scaler, group_name};
use report::Row;
use setup::{Bench, NS};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = Args::parse_from_argv(&argv).unwrap_or_else(|e| e.exit());
    hcomm_e2e::bench::main("scale-bench", bench(args, argv))
}

async fn bench(args: Args, argv: Vec<String>) -> Result<()> {
    let clock = Clock::start();
    if !args.no_build && std::env::var_os("CARGO").is_some() {
        clock.say("building hcomm-operator");
        setup::build_operator()?;
    }
    let load_before = loadavg();
    clock.say(format!(
        "starting the control plane, {} kwok Nodes with 8 NPUs and their HcommNodes, the operator",
        args.nodes
    ));
    let mut bench = Bench::start(args.nodes).await?;
    clock.say(format!(
        "up; control plane state in {}, operator log {}",
        bench.cp.state_dir().display(),
        bench.operator_log.display()
    ));
    let result = run_sizes(&mut bench, &args, &clock).await;
    if result.is_err() {
        eprintln!(
            "operator log: {} (kept with HCOMM_E2E_KEEP_STATE=1)",
            bench.operator_log.display()
        );
    }
    let rows = result?;
    let load_after = loadavg();
    drop(bench);
    println!();
    println!("command: scale-bench {}", argv.join(" "));
    println!(
        "machine: {} CPUs, load average {load_before} before, {load_after} after; agent delay {} ms, {} agent writes in flight, HcommNodes republished every {} s",
        std::thread::available_parallelism().map_or(0, usize::from),
        args.agent_delay_ms,
        args.agent_writes_in_flight,
        args.node_publish_s
    );
    println!();
    let table = report::markdown(&rows);
    print!("{table}");
    if let Some(path) = &args.output {
        std::fs::write(path, &table).with_context(|| format!("write {}", path.display()))?;
    }
    if let Some(last) = rows.last() {
        println!("{}", report::last_line(last));
    }
    Ok(())
}

async fn run_sizes(bench: &mut Bench, args: &Args, clock: &Clock) -> Result<Vec<Row>> {
    let own = OwnRequests::default();
    let driver = Driver::start(
        bench.client.clone(),
        args.nodes,
        args.agent_delay(),
        args.agent_writes_in_flight,
        Duration::from_secs(args.node_publish_s),
        own.clone(),
    );
    let groups: Api<HcommGroup> = Api::namespaced(bench.client.clone(), NS);
    let (group_cache, writer) = reflector::store();
    let group_watch = tokio::spawn(
        reflector::reflector(writer, watcher(groups.clone(), watcher::Config::default()))
            .default_backoff()
            .for_each(|_| async {}),
    );
    tokio::time::timeout(Duration::from_secs(30), async {
        driver.pods.wait_until_ready().await?;
        group_cache.wait_until_ready().await
    })
    .await
    .context("the bench's watches did not start within 30 s")??;
    let scaler = Scaler {
        groups,
        group_cache: &group_cache,
        pod_cache: &driver.pods,
        own: own.clone(),
        timeout: args.phase_timeout(),
        max_joining: args.max_joining,
    };
    let names: Vec<String> = (0..args.groups).map(group_name).collect();
    let dpm = args.devices_per_member;
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let m = args.per_group(size);
        let half = (m / 2).max(1);
        clock.say(format!(
            "size {size}: {} groups to {half} members each (setup)",
            args.groups
        ));
        let setup = scaler.scale(&names, half, dpm).await?;
        clock.say(format!("  setup Ready after {:.1} s", setup.ready_s));
        tokio::time::sleep(Duration::from_secs(2)).await;
        bench.check_operator()?;
        let own_before = own.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let busy_start = Instant::now();
        let before = bench.sample().await?;
        let single = scaler.scale(&names[..1], m, dpm).await?;
        let single_p99_ms = before
            .delta(&bench.sample().await?)
            .reconcile_quantile_ms(0.99);
        clock.say(format!(
            "  one group {half} → {m}: Pods created {:.2} s, Ready {:.2} s; reconcile p99 {}",
            single.created_s,
            single.ready_s,
            report::ms(single_p99_ms)
        ));
        let mut storm = None;
        let mut storm_p99_ms = None;
        if args.groups > 1 {
            let back = scaler.scale(&names[..1], half, dpm).await?;
            clock.say(format!("  one group back to {half}: {:.2} s", back.ready_s));
            let storm_start = bench.sample().await?;
            let t = scaler.scale(&names, m, dpm).await?;
            storm_p99_ms = storm_start
                .delta(&bench.sample().await?)
                .reconcile_quantile_ms(0.99);
            clock.say(format!(
                "  storm, {} groups {half} → {m} at once (all {} requests answered after {:.2} s): Pods created {:.2} s, Ready {:.2} s; reconcile p99 {}",
                args.groups,
                args.groups,
                t.requested_s,
                t.created_s,
                t.ready_s,
                report::ms(storm_p99_ms)
            ));
            storm = Some(t);
        }
        let after = bench.sample().await?;
        let busy_wall_s = busy_start.elapsed().as_secs_f64();
        let own_after = own.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let own_busy = own_after
            .iter()
            .map(|(k, v)| (k.clone(), v - own_before.get(k).copied().unwrap_or(0)))
            .collect();
        let busy = before.delta(&after);
        eprint!("{}", report::requests_detail(&busy, &own_busy));
        eprint!("{}", report::call_latency_detail(&busy));
        eprint!("{}", report::cpu_detail(&busy, busy_wall_s));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let quiet_start = bench.sample().await?;
        tokio::time::sleep(Duration::from_secs(args.steady_s)).await;
        let quiet_end = bench.sample().await?;
        bench.check_operator()?;
        let steady = quiet_start.delta(&quiet_end);
        let row = Row {
            members: size,
            groups: args.groups,
            per_group: m,
            setup_s: setup.ready_s,
            single_created_s: single.created_s,
            single_ready_s: single.ready_s,
            storm_created_s: storm.map(|t| t.created_s),
            storm_ready_s: storm.map(|t| t.ready_s),
            single_p99_ms,
            storm_p99_ms,
            busy,
            own_busy,
            steady_s: args.steady_s as f64,
            rss_mib: steady.rss_mib,
            steady,
        };
        clock.say(format!(
            "  reconciles {:.0}, p50 {:.1} ms, p99 {:.1} ms; quiet window: {:.0} list calls, {:.0} reconciles; RSS {:.0} MiB",
            row.busy.reconciles,
            row.p50_ms(),
            row.p99_ms(),
            row.list_calls_steady(),
            row.steady.reconciles,
            row.rss_mib
        ));
        rows.push(row);
    }
    group_watch.abort();
    Ok(rows)
}

/// The 1-minute load average, as `/proc/loadavg` says.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
