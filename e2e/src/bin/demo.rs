//! `cargo demo`: hcomm end to end on this machine, in about a minute after the first
//! build. It builds the programs, brings up 4 simulated hosts and a real control plane,
//! installs the chart's RBAC and the CRDs, starts the agents and the operator, applies
//! the prefill/decode example, puts load on both pools through the reference router,
//! scales decode 2 → 4 → 2 with `kubectl scale`, prints progress and a per-member
//! timeline, cleans up, and ends with one line a script can read:
//! `backend=B served=N failed=N wrong_digest=N scale_out_s=S scale_in_s=S` (see
//! `hcomm_e2e::demo`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use hcomm_e2e::demo::{self, Clock, DemoOptions};
use hcomm_e2e::testbed::{HostsMode, binaries};

/// `cargo demo [options]`.
#[derive(Debug, Parser)]
#[command(
    name = "demo",
    bin_name = "cargo demo",
    version,
    about = "hcomm end to end on this machine: hosts, control plane, agents, operator, load, scaling",
    long_about = "hcomm end to end on this machine: builds the programs, brings up simulated hosts \
                  and a real control plane, starts the agents and the operator, applies the \
                  prefill/decode example, puts load on both pools and scales decode 2 → 4 → 2, \
                  then prints one line a script can read: \
                  backend=B served=N failed=N wrong_digest=N scale_out_s=S scale_in_s=S \
                  (with --autoscale also hpa_scaled_to=N hpa_scaled_back_to=N).\n\n\
                  Hosts: as root, network namespaces with their own NICs; without root, or with \
                  --loopback, loopback addresses. Logs stay in the folder printed at the start \
                  when HCOMM_E2E_KEEP_STATE=1.",
    after_help = "Modes:\n  \
                  (default)   as root: one network namespace per host, with data and management \
                  NICs and NPU ports\n  \
                  --loopback  hosts on loopback addresses (what a run without root gets)\n  \
                  --autoscale decode moved by Prometheus → KEDA → HPA on a load step\n\n\
                  Environment:\n  \
                  HCOMM_E2E_KEEP_STATE=1  keep every process's log and each published rank \
                  table; prints state_dir=<path>\n  \
                  KUBEBUILDER_ASSETS=DIR  use the etcd, kube-apiserver and kubectl found there \
                  (as setup-envtest sets it) instead of building them\n  \
                  HCOMM_CACHE_DIR=DIR     where the built Kubernetes binaries are kept \
                  (default ~/.cache/hcomm)\n  \
                  HCOMM_DEMO_LOG=FILTER   the demo's own log filter (tracing syntax; default \
                  warn)\n  \
                  HCOMM_LOG_FORMAT=json   JSON log lines from the demo and, inherited, from \
                  every hcomm process it starts\n  \
                  RUST_LOG=FILTER         log filter of the hcomm processes it starts\n\n\
                  The first run builds the Kubernetes binaries from pinned Go modules into \
                  ~/.cache/hcomm (about 10 minutes on 2 cores) and prints progress meanwhile.",
    args_override_self = true
)]
struct Cli {
    /// Simulated hosts (at least 4: prefill 2 + decode 4 members on 2 devices each).
    #[arg(long, value_name = "N", default_value_t = DemoOptions::default().hosts,
          value_parser = hosts)]
    hosts: usize,
    /// Size of the generated weights set, in MiB.
    #[arg(long, value_name = "N", default_value_t = DemoOptions::default().weights_mib)]
    weights_mib: u64,
    /// How long each state is held under load before the next step, in seconds.
    #[arg(long, value_name = "S", default_value_t = DemoOptions::default().hold.as_secs())]
    hold_secs: u64,
    /// Run the hosts on loopback addresses even as root (the path a user without root
    /// gets), instead of network namespaces.
    #[arg(long)]
    loopback: bool,
    /// Both pools' collective backend. `hccl` runs them on the HCCL conformance simulator
    /// (a test double of the CANN runtime, built from e2e/hccl-sim) installed as every
    /// host's runtime; it needs network-namespace hosts (root, no --loopback).
    #[arg(long, value_enum, default_value_t = BackendArg::Tcp)]
    backend: BackendArg,
    /// Also write the per-member timeline as an SVG chart to FILE.
    #[arg(long, value_name = "FILE")]
    timeline_svg: Option<std::path::PathBuf>,
    /// Let an autoscaler scale decode instead of `kubectl scale`: Prometheus scrapes the
    /// workers, KEDA (built from its pinned Go module) serves the example ScaledObject's
    /// metric to its HPA, a load step makes the HPA raise decode 2 → 4, and back to 2
    /// once it ends. Needs network-namespace hosts (root, no --loopback).
    #[arg(long, conflicts_with = "loopback")]
    autoscale: bool,
    /// With --autoscale: where to write the chart of the chain (load, metric, HPA
    /// desired, Ready members) [default: docs/benchmarks/demo-autoscale.svg].
    #[arg(long, value_name = "FILE", requires = "autoscale")]
    autoscale_plot: Option<std::path::PathBuf>,
    /// Log line format of the demo's own logs: text, or json (span fields included).
    #[arg(long, value_enum, env = "HCOMM_LOG_FORMAT", default_value_t)]
    log_format: LogFormat,
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendArg {
    /// hcomm's TCP engine.
    Tcp,
    /// HCCL, on the conformance simulator.
    Hccl,
}

/// How the demo's log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line, with the span fields.
    Json,
}

/// Installs the demo's subscriber on stderr: `HCOMM_DEMO_LOG`, else warnings only.
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HCOMM_DEMO_LOG")
        .unwrap_or_else(|_| "warn,kube_client=off".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

fn hosts(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 4 => Ok(n),
        _ => Err("at least 4 (prefill 2 + decode 4 members on 2 devices each)".into()),
    }
}

impl Cli {
    fn options(&self) -> DemoOptions {
        DemoOptions {
            hosts: self.hosts,
            weights_mib: self.weights_mib,
            hold: Duration::from_secs(self.hold_secs),
            hosts_mode: if self.loopback {
                HostsMode::Loopback
            } else {
                DemoOptions::default().hosts_mode
            },
            timeline_svg: self.timeline_svg.clone(),
            backend: match self.backend {
                BackendArg::Tcp => hcomm_crds::Backend::Tcp,
                BackendArg::Hccl => hcomm_crds::Backend::Hccl,
            },
            autoscale: self.autoscale,
            autoscale_plot: self.autoscale.then(|| {
                self.autoscale_plot.clone().unwrap_or_else(|| {
                    hcomm_e2e::testbed::pools::workspace_root()
                        .join("docs/benchmarks/demo-autoscale.svg")
                })
            }),
        }
    }
}

fn main() -> ExitCode {
    // Help and version exit 0, a bad flag 2.
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let options = cli.options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let clock = Clock::start();
    // The first run builds the Kubernetes binaries for ~10 minutes: say so as it goes.
    hcomm_e2e::controlplane::progress::on_progress(move |line| clock.say(line));
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("demo").chain(line.split_whitespace()))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn without_flags_the_demo_runs_its_defaults() {
        let o = parse("").unwrap().options();
        let d = DemoOptions::default();
        assert_eq!(
            (o.hosts, o.weights_mib, o.hold),
            (d.hosts, d.weights_mib, d.hold)
        );
        assert_eq!(o.hosts_mode, HostsMode::NamespacesOrLoopback);
    }

    #[test]
    fn flags_set_the_options_and_loopback_selects_that_mode() {
        let o = parse("--hosts 6 --weights-mib 64 --hold-secs 1 --loopback")
            .unwrap()
            .options();
        assert_eq!((o.hosts, o.weights_mib), (6, 64));
        assert_eq!(o.hold, Duration::from_secs(1));
        assert_eq!(o.hosts_mode, HostsMode::Loopback);
    }

    #[test]
    fn autoscale_writes_its_chart_beside_the_benchmarks_unless_told_otherwise() {
        let o = parse("--autoscale").unwrap().options();
        assert!(o.autoscale);
        assert!(
            o.autoscale_plot
                .unwrap()
                .ends_with("docs/benchmarks/demo-autoscale.svg")
        );
        let o = parse("--autoscale --autoscale-plot /tmp/x.svg")
            .unwrap()
            .options();
        assert_eq!(
            o.autoscale_plot.unwrap(),
            std::path::Path::new("/tmp/x.svg")
        );
        assert!(parse("--autoscale --loopback").is_err());
        assert!(parse("--autoscale-plot /tmp/x.svg").is_err());
        assert!(parse("").unwrap().options().autoscale_plot.is_none());
    }

    #[test]
    fn too_few_hosts_and_unknown_flags_are_refused_by_name() {
        for (line, flag) in [("--hosts 3", "--hosts"), ("--bogus", "--bogus")] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(flag), "{line}: {e}");
        }
    }

    #[test]
    fn help_lists_the_modes_and_options() {
        let help = Cli::command().render_long_help().to_string();
        for part in [
            "--loopback",
            "--hosts",
            "--weights-mib",
            "--hold-secs",
            "--autoscale",
            "network namespaces",
        ] {
            assert!(help.contains(part), "{part} missing:\n{help}");
        }
    }
}
