//! `cargo agent-scale-bench`: the node agent under many members (issue 20, point 4), on the
//! testbed's real agents, operator and control plane.
//!
//! Two shapes, each on a testbed of its own:
//! - **one node, many groups**: one host with `4 × --members-per-group` NPUs and four
//!   groups of `--members-per-group` members each, all on that host, so one agent serves
//!   every member: all four groups come up at once, then all drain to half at once, then
//!   all grow back at once (joins while the others keep serving);
//! - **one wide domain**: `--hosts` hosts of `--ranks / --hosts` NPUs and one group of
//!   `--ranks` single-rank members (a `--ranks`-rank TCP domain): it comes up, then an
//!   eighth of it drains.
//!
//! Each step has a deadline (the bench fails past it, naming the step); after each shape
//! is up, nothing is asked of it for `--hold-s` seconds while the agents' CPU time and
//! RSS are sampled (`/proc/<pid>/stat`, `status`), and at the end every group must still
//! have its links up (no `LinksHealthy=False` for `LinkDown`, a probe past its deadline;
//! a slow one, `LinkDegraded`, is printed) and none of the members that were never
//! scaled away may have been replaced. The last line is for
//! scripts: `one_node_members=… one_node_ready_s=… one_node_drain_s=… one_node_rejoin_s=…
//! one_node_agent_cpu_pct=… one_node_agent_rss_mib=… ranks=… hosts=… wide_ready_s=…
//! wide_drain_s=… wide_agent_cpu_pct_max=… wide_agent_rss_mib_max=…`.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use hcomm_crds::contract::{CONDITION_LINKS_HEALTHY, GroupReason};
use hcomm_e2e::bench::{self, Clock};
use hcomm_e2e::testbed::examples::NAMESPACE as NS;
use hcomm_e2e::testbed::{PoolCopy, Testbed, TestbedOptions, binaries, weights};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "agent-scale-bench",
    about = "The node agent under many members (issue 20, point 4)"
)]
struct Args {
    /// Members of each of the four groups on the one node.
    #[arg(long, default_value_t = 4)]
    members_per_group: u32,
    /// Ranks of the wide domain (one per member).
    #[arg(long, default_value_t = 64)]
    ranks: u32,
    /// Hosts the wide domain spreads over (`--ranks` must divide evenly).
    #[arg(long, default_value_t = 8)]
    hosts: usize,
    /// The wide domain's `spec.scaling.maxJoining` (the example's is 4): how many members
    /// verify, sync and join at once, so roughly how many epochs the domain forms in.
    #[arg(long, default_value_t = 4)]
    wide_max_joining: u32,
    /// Size of the weights every member syncs, in MiB.
    #[arg(long, default_value_t = 8)]
    weights_mib: u64,
    /// Quiet window in which the agents' CPU and memory are sampled, in seconds.
    #[arg(long, default_value_t = 30)]
    hold_s: u64,
    /// Use the binaries already built instead of building them first.
    #[arg(long)]
    no_build: bool,
}

/// Deadline of each step (the bench fails past it).
const STEP_DEADLINE: Duration = Duration::from_secs(600);
/// The example pool the groups are copies of.
const EXAMPLE: &str = "examples/decode-pool.yaml";

fn main() -> ExitCode {
    let args = Args::parse();
    hcomm_e2e::bench::main("agent-scale-bench", bench(args))
}

/// One agent's cost over the quiet window.
#[derive(Debug, Clone, Copy)]
struct AgentCost {
    cpu_pct: f64,
    rss_mib: f64,
}

async fn bench(args: Args) -> Result<()> {
    ensure!(
        args.hosts > 0 && (args.ranks as usize).is_multiple_of(args.hosts),
        "--ranks {} does not spread evenly over --hosts {}",
        args.ranks,
        args.hosts
    );
    let clock = Clock::start();
    if !args.no_build && std::env::var_os("CARGO").is_some() {
        clock.say("building hcomm-agent, hcomm-operator, hcomm-worker");
        binaries::build_programs()?;
    }
    let one = one_node(&args, &clock)
        .await
        .context("one node, four groups")?;
    let wide = wide_domain(&args, &clock)
        .await
        .context("one wide domain")?;
    let max = |f: fn(&AgentCost) -> f64| wide.costs.iter().map(f).fold(0.0, f64::max);
    println!(
        "one_node_members={} one_node_ready_s={:.2} one_node_drain_s={:.2} one_node_rejoin_s={:.2} \
         one_node_agent_cpu_pct={:.1} one_node_agent_rss_mib={:.1} ranks={} hosts={} \
         wide_ready_s={:.2} wide_drain_s={:.2} wide_agent_cpu_pct_max={:.1} wide_agent_rss_mib_max={:.1}",
        4 * args.members_per_group,
        one.ready_s,
        one.drain_s,
        one.rejoin_s,
        one.cost.cpu_pct,
        one.cost.rss_mib,
        args.ranks,
        args.hosts,
        wide.ready_s,
        wide.drain_s,
        max(|c| c.cpu_pct),
        max(|c| c.rss_mib),
    );
    Ok(())
}

struct OneNode {
    ready_s: f64,
    drain_s: f64,
    rejoin_s: f64,
    cost: AgentCost,
}

/// Four groups of `members_per_group` on one host: up, quiet, all half, all back.
async fn one_node(args: &Args, clock: &Clock) -> Result<OneNode> {
    let n = args.members_per_group;
    clock.say(format!(
        "one node: starting a testbed of 1 host with {} NPUs",
        4 * n
    ));
    let bed = Testbed::start(TestbedOptions {
        hosts: 1,
        devices_per_host: 4 * n,
        ..Default::default()
    })
    .await?;
    let groups: Vec<String> = (0..4).map(|g| format!("group-{g}")).collect();
    let result = async {
        let (models, digest) = seed(&bed, args.weights_mib)?;
        let start = Instant::now();
        for g in &groups {
            bed.apply_pool_copy(&copy(g, n, &models, &digest))?;
        }
        all_ready(&bed, &groups, n).await?;
        let ready_s = start.elapsed().as_secs_f64();
        clock.say(format!(
            "one node: 4 groups × {n} members Ready in {ready_s:.2} s"
        ));
        let kept = first_members(&bed, &groups, n / 2).await?;
        let cost = quiet(&bed, args.hold_s, clock).await?[0];
        let start = Instant::now();
        for g in &groups {
            bed.scale(g, n / 2)?;
        }
        all_settled(&bed, &groups, n / 2).await?;
        let drain_s = start.elapsed().as_secs_f64();
        clock.say(format!(
            "one node: all drained to {} in {drain_s:.2} s",
            n / 2
        ));
        let start = Instant::now();
        for g in &groups {
            bed.scale(g, n)?;
        }
        all_ready(&bed, &groups, n).await?;
        let rejoin_s = start.elapsed().as_secs_f64();
        clock.say(format!("one node: all back to {n} in {rejoin_s:.2} s"));
        still_healthy(&bed, &groups, &kept).await?;
        Ok(OneNode {
            ready_s,
            drain_s,
            rejoin_s,
            cost,
        })
    }
    .await;
    bed.stop().await;
    result
}

struct Wide {
    ready_s: f64,
    drain_s: f64,
    costs: Vec<AgentCost>,
}

/// One group of `ranks` members over `hosts` hosts: up, quiet, an eighth drained.
async fn wide_domain(args: &Args, clock: &Clock) -> Result<Wide> {
    let per_host = args.ranks / args.hosts as u32;
    clock.say(format!(
        "wide domain: starting a testbed of {} hosts with {per_host} NPUs each",
        args.hosts
    ));
    let bed = Testbed::start(TestbedOptions {
        hosts: args.hosts,
        devices_per_host: per_host,
        ..Default::default()
    })
    .await?;
    let group = vec!["wide".to_owned()];
    let result = async {
        let (models, digest) = seed(&bed, args.weights_mib)?;
        let start = Instant::now();
        bed.apply_pool_copy(&copy(&group[0], args.ranks, &models, &digest))?;
        let scaling = format!(
            r#"{{"spec":{{"scaling":{{"maxJoining":{}}}}}}}"#,
            args.wide_max_joining
        );
        bed.kubectl(&[
            "-n",
            NS,
            "patch",
            "hcg",
            &group[0],
            "--type=merge",
            "-p",
            &scaling,
        ])?;
        all_ready(&bed, &group, args.ranks).await?;
        let ready_s = start.elapsed().as_secs_f64();
        clock.say(format!(
            "wide domain: {} ranks Ready in {ready_s:.2} s",
            args.ranks
        ));
        let after = args.ranks - (args.ranks / 8).max(1);
        let kept = first_members(&bed, &group, after).await?;
        let costs = quiet(&bed, args.hold_s, clock).await?;
        let start = Instant::now();
        bed.scale(&group[0], after)?;
        all_settled(&bed, &group, after).await?;
        let drain_s = start.elapsed().as_secs_f64();
        clock.say(format!("wide domain: drained to {after} in {drain_s:.2} s"));
        still_healthy(&bed, &group, &kept).await?;
        Ok(Wide {
            ready_s,
            drain_s,
            costs,
        })
    }
    .await;
    bed.stop().await;
    result
}

/// The weights every group names (a local source below the testbed's models folder).
fn seed(bed: &Testbed, mib: u64) -> Result<(std::path::PathBuf, String)> {
    let models = bed.dir().join("models/v1");
    let digest = weights::generate(&models, mib, 1)?;
    Ok((models, digest))
}

fn copy<'a>(
    name: &'a str,
    replicas: u32,
    models: &'a std::path::Path,
    digest: &'a str,
) -> PoolCopy<'a> {
    PoolCopy {
        example: EXAMPLE,
        name,
        replicas,
        devices_per_member: 1,
        weights_source: models,
        digest,
    }
}

/// Every group Ready at `n` members, within the step deadline.
async fn all_ready(bed: &Testbed, groups: &[String], n: u32) -> Result<()> {
    for g in groups {
        bed.wait_pool_ready(NS, g, n as usize, STEP_DEADLINE)
            .await?;
    }
    Ok(())
}

/// Every group down to exactly `n` member Pods, all Ready.
async fn all_settled(bed: &Testbed, groups: &[String], n: u32) -> Result<()> {
    for g in groups {
        bed.wait_members(NS, g, n as usize, STEP_DEADLINE).await?;
    }
    all_ready(bed, groups, n).await
}

/// The members of each group a scale to `n` keeps (the lowest member indices).
async fn first_members(bed: &Testbed, groups: &[String], n: u32) -> Result<BTreeSet<String>> {
    let mut kept = BTreeSet::new();
    for g in groups {
        let mut members = bed.members(NS, g).await?;
        members.sort_by_key(|m| m.index);
        kept.extend(members.into_iter().take(n as usize).map(|m| m.name));
    }
    Ok(kept)
}

/// The agents' CPU share and RSS over `hold_s` quiet seconds.
async fn quiet(bed: &Testbed, hold_s: u64, clock: &Clock) -> Result<Vec<AgentCost>> {
    let pids: Vec<u32> = (0..bed.hosts().len())
        .map(|i| {
            bed.agent_pid(i)
                .with_context(|| format!("host-{i} runs no agent"))
        })
        .collect::<Result<_>>()?;
    let cpu_s = |pid: &u32| -> Result<f64> { Ok(bench::process(*pid)?.0) };
    let before: Vec<f64> = pids.iter().map(cpu_s).collect::<Result<_>>()?;
    clock.say(format!("quiet for {hold_s} s: sampling the agents"));
    tokio::time::sleep(Duration::from_secs(hold_s)).await;
    let mut costs = Vec::new();
    for (pid, before) in pids.iter().zip(before) {
        let (cpu_s, rss_mib) = bench::process(*pid)?;
        costs.push(AgentCost {
            cpu_pct: 100.0 * (cpu_s - before) / hold_s as f64,
            rss_mib,
        });
    }
    clock.say(format!("agents: {costs:?}"));
    Ok(costs)
}

/// Every group's links healthy by the agents' probes, and every member in `kept` still there.
async fn still_healthy(bed: &Testbed, groups: &[String], kept: &BTreeSet<String>) -> Result<()> {
    let mut present = BTreeSet::new();
    for g in groups {
        present.extend(bed.members(NS, g).await?.into_iter().map(|m| m.name));
        let json = bed.kubectl(&["get", "hcg", g, "-n", NS, "-o", "json"])?;
        let group: serde_json::Value = serde_json::from_str(&json)?;
        let conditions = group["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // A probe that missed its deadline (LinkDown) fails the bench; one that answered
        // slower than the operator's latency threshold (LinkDegraded, 20 ms) is reported:
        // on two cores running 64 workers that says more about the machine than the agent.
        for c in &conditions {
            if c["type"] != CONDITION_LINKS_HEALTHY || c["status"] != "False" {
                continue;
            }
            if c["reason"] == GroupReason::LinkDown.as_str() {
                bail!("{g}: LinksHealthy=False: {}", c["message"]);
            }
            eprintln!(
                "note: {g}: LinksHealthy=False ({}): {}",
                c["reason"], c["message"]
            );
        }
    }
    let replaced: Vec<&String> = kept.difference(&present).collect();
    ensure!(
        replaced.is_empty(),
        "members replaced though never scaled away: {replaced:?}"
    );
    Ok(())
}
