//! `cargo demo`: hcomm end to end on this machine, in about a minute after the first
//! build. It builds the programs, brings up 4 simulated hosts and a real control plane,
//! installs the chart's RBAC and the CRDs, starts the agents and the operator, applies
//! the prefill/decode example, puts load on both pools through the reference router,
//! scales decode 2 → 4 → 2 with `kubectl scale`, prints progress and a per-member
//! timeline, cleans up, and ends with one line a script can read:
//! `served=N failed=N wrong_digest=N scale_out_s=S scale_in_s=S`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hcomm_e2e::testbed::{self, LoadOptions, LoadStats, Testbed, TestbedOptions, binaries};

const USAGE: &str = "\
usage: cargo demo [--hosts N] [--weights-mib N] [--hold-secs S]

Runs the whole system locally (needs root for network namespaces; without it the hosts
run on loopback addresses). Logs stay in the folder printed at the start when
HCOMM_E2E_KEEP_STATE=1.";

const NAMESPACE: &str = "default";
/// The seed of the demo's weights; the example manifests carry its digest.
const WEIGHTS_SEED: u64 = 1;

struct Args {
    hosts: usize,
    weights_mib: u64,
    hold: Duration,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        hosts: 4,
        weights_mib: 256,
        hold: Duration::from_secs(5),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--hosts" => a.hosts = value("--hosts")?.parse()?,
            "--weights-mib" => a.weights_mib = value("--weights-mib")?.parse()?,
            "--hold-secs" => a.hold = Duration::from_secs(value("--hold-secs")?.parse()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    if a.hosts < 4 {
        bail!("--hosts must be at least 4 (prefill 2 + decode 4 members on 2 devices each)");
    }
    Ok(a)
}

/// Progress lines, stamped with the time since the demo began.
struct Clock(Instant);

impl Clock {
    fn say(&self, what: impl std::fmt::Display) {
        println!("[{:>6.1}s] {what}", self.0.elapsed().as_secs_f64());
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HCOMM_DEMO_LOG")
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(demo(args)) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn demo(args: Args) -> Result<String> {
    let clock = Clock(Instant::now());
    clock.say("building hcomm-agent, hcomm-operator, hcomm-worker, hcomm-router");
    binaries::build_programs()?;
    clock.say(format!(
        "starting {} simulated hosts, a control plane, the chart's RBAC, agents and the operator",
        args.hosts
    ));
    let bed = Testbed::start(TestbedOptions {
        hosts: args.hosts,
        allow_loopback: true,
        ..Default::default()
    })
    .await
    .context("testbed")?;
    if !bed.hosts().is_isolated() {
        clock.say("not root: no network namespaces, so the hosts run on loopback addresses (no isolation, no link faults)");
    }
    clock.say(format!(
        "up: {} (API server {}); logs in {}",
        bed.hosts()
            .hosts()
            .iter()
            .map(|h| format!("{} data {} mgmt {}", h.name(), h.data_ip(), h.mgmt_ip()))
            .collect::<Vec<_>>()
            .join(", "),
        bed.control_plane().server_url(),
        bed.dir().join("logs").display()
    ));
    let result = run(&bed, &args, &clock).await;
    clock.say("cleaning up");
    bed.stop().await;
    result
}

async fn run(bed: &Testbed, args: &Args, clock: &Clock) -> Result<String> {
    let models = bed.dir().join("models/demo-v1");
    let digest = testbed::weights::generate(&models, args.weights_mib, WEIGHTS_SEED)?;
    clock.say(format!(
        "model weights: {} MiB at {} ({digest})",
        args.weights_mib,
        models.display()
    ));
    let timeline = testbed::Timeline::start(bed.client().await?, NAMESPACE);
    let applied = bed.apply_examples(&models, &digest)?;
    clock.say(format!("kubectl apply -f examples/:\n{}", indent(&applied)));
    for (pool, n) in [("prefill", 2), ("decode", 2)] {
        let members = bed
            .wait_pool_ready(NAMESPACE, pool, n, Duration::from_secs(180))
            .await?;
        clock.say(format!("{pool}: {} members Ready: {}", n, names(&members)));
    }
    clock.say(format!(
        "kubectl get hcg:\n{}",
        indent(&bed.kubectl(&["get", "hcg", "-n", NAMESPACE])?)
    ));
    let load = |service: &str| LoadOptions {
        service: service.into(),
        namespace: NAMESPACE.into(),
        concurrency: 4,
        tokens: 5,
        expect_digests: vec![digest.clone()],
    };
    let prefill_load = bed.start_load(&load("prefill"))?;
    let decode_load = bed.start_load(&load("decode"))?;
    clock.say("load running on both pools through the router (4 in flight each)");
    tokio::time::sleep(args.hold).await;
    report(clock, "decode", &decode_load.latest());

    clock.say("kubectl scale hcg/decode --replicas=4");
    let t = Instant::now();
    bed.scale("decode", 4)?;
    let members = bed
        .wait_pool_ready(NAMESPACE, "decode", 4, Duration::from_secs(180))
        .await?;
    let scale_out = t.elapsed();
    clock.say(format!(
        "decode: 4 members Ready after {:.2}s: {}",
        scale_out.as_secs_f64(),
        names(&members)
    ));
    tokio::time::sleep(args.hold).await;
    report(clock, "decode", &decode_load.latest());

    clock.say("kubectl scale hcg/decode --replicas=2");
    let t = Instant::now();
    bed.scale("decode", 2)?;
    let members = bed
        .wait_pool_ready(NAMESPACE, "decode", 2, Duration::from_secs(180))
        .await?;
    wait_gone(bed, "decode", 2).await?;
    let scale_in = t.elapsed();
    clock.say(format!(
        "decode: back to 2 after {:.2}s (victims drained, then deleted): {}",
        scale_in.as_secs_f64(),
        names(&members)
    ));
    tokio::time::sleep(args.hold).await;

    let decode = decode_load.stop().await?;
    let prefill = prefill_load.stop().await?;
    report(clock, "decode", &decode);
    report(clock, "prefill", &prefill);
    let marks = timeline.members();
    println!("\ntimeline (seconds since the pools were applied; phase start (duration)):");
    print!(
        "{}",
        testbed::timeline::render(&marks, |pod| {
            let s = decode.by_pod.get(pod).or_else(|| prefill.by_pod.get(pod));
            s.map(|s| {
                format!(
                    "served={} refused_draining={} errors={}",
                    s.served, s.refused_draining, s.errors
                )
            })
            .unwrap_or_default()
        })
    );
    println!();
    let served = decode.served + prefill.served;
    let failed = decode.failed + prefill.failed;
    let wrong = decode.wrong_digest + prefill.wrong_digest;
    Ok(format!(
        "served={served} failed={failed} wrong_digest={wrong} scale_out_s={:.2} scale_in_s={:.2}",
        scale_out.as_secs_f64(),
        scale_in.as_secs_f64()
    ))
}

/// Waits until only `n` members of `group` exist (the victims' Pods are gone).
async fn wait_gone(bed: &Testbed, group: &str, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while bed.members(NAMESPACE, group).await?.len() != n {
        if Instant::now() > deadline {
            bail!("{group}: victims not gone within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn report(clock: &Clock, pool: &str, s: &LoadStats) {
    clock.say(format!(
        "{pool}: served={} failed={} wrong_digest={} retried={} per member: {}",
        s.served,
        s.failed,
        s.wrong_digest,
        s.retried,
        s.by_pod
            .iter()
            .map(|(p, st)| format!("{p}={}", st.served))
            .collect::<Vec<_>>()
            .join(" ")
    ));
}

fn names(members: &[testbed::MemberPod]) -> String {
    members
        .iter()
        .map(|m| format!("{}@{}(rank {})", m.name, m.node, m.rank))
        .collect::<Vec<_>>()
        .join(", ")
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("          {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
