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
//! Each (strategy, k) gets a fresh group (`bench-inc-2`, `bench-reb-4`, ...; `bench-inc-2-n3` with
//! `--repeat`) with its own
//! weights set (a distinct seed), so no joiner's content-addressed store already holds it.
//! The group is applied with one member, which imports the set from the source folder;
//! then the clock starts, the group is scaled, and it stops when `wait_pool_ready` sees
//! `1+k` Ready members. A member timeline (Pod watch) gives each joiner's sync
//! (weights-synced − verified) and join (ready − weights-synced) durations.
//!
//! Needs root (network namespaces, tc); exits 2 otherwise. With `--output FILE` the
//! section between `<!-- scaleout:begin -->` and `<!-- scaleout:end -->` is rewritten
//! (created at the end if absent); nothing else in the file is touched.
//!
//! This file holds the sequence (testbed up, each rate, each run, report); the modules
//! hold one job each: [`args`] the command line, [`run`] one measurement, [`link`] the raw
//! link check, [`machine`] CPU accounting and the report's provenance, [`report`] the
//! rows, targets and Markdown, [`section`] the rewrite of the output file.

mod args;
mod link;
mod machine;
mod report;
mod run;
mod section;

use std::process::ExitCode;

use anyhow::{Context, Result, ensure};
use hcomm_e2e::hosts::Shaping;
use hcomm_e2e::testbed::{self, Testbed, TestbedOptions, Timeline};

use args::Args;
use hcomm_e2e::bench::Clock;
use link::LinkResult;
use report::Report;
use run::{NS, RunResult};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // Helpers this binary runs inside a simulated host for the raw link check.
    match argv.first().map(String::as_str) {
        Some("__blast-recv") => return exit_of(link::blast::receive(&argv[1..])),
        Some("__blast-send") => return exit_of(link::blast::send(&argv[1..])),
        _ => {}
    }
    // Help and version exit 0, a bad flag 2 (as before clap).
    let args = Args::parse_from_argv(&argv).unwrap_or_else(|e| e.exit());
    if effective_uid() != Some(0) {
        eprintln!(
            "scaleout-bench must run as root: it builds network namespaces and shapes their \
             links with tc (e.g. `sudo -E cargo scaleout-bench ...`)"
        );
        return ExitCode::from(2);
    }
    hcomm_e2e::bench::main("scaleout-bench", bench(args, argv))
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

async fn bench(args: Args, argv: Vec<String>) -> Result<()> {
    let clock = Clock::start();
    if args.build() && std::env::var_os("CARGO").is_some() {
        clock.say("building hcomm-agent, hcomm-operator, hcomm-worker, hcomm-router");
        testbed::binaries::build_programs()?;
    }
    let hosts = args.hosts();
    let load_before = machine::loadavg();
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
    let load_after = machine::loadavg();
    let report = Report {
        args: &args,
        argv: &argv,
        links,
        results: &results,
        load_before,
        load_after,
        wall: clock.elapsed(),
        provenance: machine::provenance(),
    };
    println!();
    print!("{}", report.rows());
    println!();
    let section = report.markdown();
    println!("{section}");
    if let Some(path) = &args.output {
        section::write(path, &section)?;
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
        let link = match link::measure(bed, args.link_check) {
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
        // k-major order, strategies (and repeats) interleaved: background load hits all
        // alike.
        for &k in &args.joiners {
            let order = (0..args.repeat).flat_map(|_| args.strategies.iter().copied());
            for strategy in order {
                seed += 1;
                let r = run::run_one(bed, &timeline, args, clock, rate, strategy, k, seed)
                    .await
                    .with_context(|| {
                        format!("{} with {k} joiner(s) at {rate} Mbit/s", strategy.name())
                    })?;
                clock.say(format!(
                    "{} k={k} {rate} Mbit/s: {:.3} s (floor {:.3} s, +{:.3} s); slowest joiner: \
                     sync {} s, join {} s; no member Ready for {:.2} s; machine CPU {:.0} % busy, \
                     agents {:.1} CPU-s ({} per GiB received)",
                    strategy.name(),
                    r.time_s,
                    r.floor_s,
                    r.over_floor(),
                    report::opt(r.sync_s),
                    report::opt(r.join_s),
                    r.outage_s,
                    100.0 * r.machine_busy,
                    r.agent_cpu_s,
                    report::opt(r.cpu_per_gib()),
                ));
                results.push(r);
            }
        }
    }
    Ok((links, results))
}
