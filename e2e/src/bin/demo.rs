//! `cargo demo`: hcomm end to end on this machine, in about a minute after the first
//! build. It builds the programs, brings up 4 simulated hosts and a real control plane,
//! installs the chart's RBAC and the CRDs, starts the agents and the operator, applies
//! the prefill/decode example, puts load on both pools through the reference router,
//! scales decode 2 → 4 → 2 with `kubectl scale`, prints progress and a per-member
//! timeline, cleans up, and ends with one line a script can read:
//! `served=N failed=N wrong_digest=N scale_out_s=S scale_in_s=S` (see `hcomm_e2e::demo`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hcomm_e2e::demo::{self, Clock, DemoOptions};
use hcomm_e2e::testbed::{HostsMode, binaries};

const USAGE: &str = "\
usage: cargo demo [--hosts N] [--weights-mib N] [--hold-secs S] [--loopback]

Runs the whole system locally (needs root for network namespaces; without it, or with
--loopback, the hosts run on loopback addresses). Logs stay in the folder printed at
the start when HCOMM_E2E_KEEP_STATE=1.";

fn parse() -> Result<DemoOptions> {
    let mut a = DemoOptions::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--hosts" => a.hosts = value("--hosts")?.parse()?,
            "--weights-mib" => a.weights_mib = value("--weights-mib")?.parse()?,
            "--hold-secs" => a.hold = Duration::from_secs(value("--hold-secs")?.parse()?),
            "--loopback" => a.hosts_mode = HostsMode::Loopback,
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

fn main() -> ExitCode {
    let options = match parse() {
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
    let clock = Clock::start();
    clock.say("building hcomm-agent, hcomm-operator, hcomm-worker, hcomm-router");
    let result = binaries::build_programs()
        .context("build")
        .and_then(|()| Ok(runtime.block_on(demo::run(&options, &clock))?));
    match result {
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
