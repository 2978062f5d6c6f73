//! `cargo devcluster up|down|status|build`: a local control plane for people.
//!
//! `up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler
//! and kwok detached from this process, installs the hcomm CRDs and prints
//! the kubeconfig; `status` probes each component; `down` stops them all and
//! checks that no process is left; `build` only builds (or finds) the binaries.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use hcomm_e2e::controlplane::detached::DevCluster;
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions, Needs, assets, cache_root};

/// `cargo devcluster <command> [options]`.
#[derive(Debug, Parser)]
#[command(
    name = "devcluster",
    bin_name = "cargo devcluster",
    version,
    propagate_version = true,
    about = "A local control plane for people: etcd, kube-apiserver, controllers, kwok",
    long_about = "A local control plane for people: etcd, kube-apiserver, \
                  kube-controller-manager, kube-scheduler and kwok, detached from this process.\n\n\
                  Binaries come from $KUBEBUILDER_ASSETS when set; whatever is missing is built \
                  with Go once and cached in $HCOMM_CACHE_DIR (default ~/.cache/hcomm).",
    args_override_self = true
)]
struct Args {
    #[command(subcommand)]
    command: Sub,
    /// State folder.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "HCOMM_DEVCLUSTER_DIR",
        default_value = "/tmp/hcomm-devcluster"
    )]
    state_dir: PathBuf,
    /// Address the apiserver listens on (up) [default: 127.0.0.1].
    #[arg(long, global = true, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Start without kwok (up, build).
    #[arg(long, global = true)]
    no_kwok: bool,
    /// Start without kube-controller-manager and kube-scheduler (up, build).
    #[arg(long, global = true)]
    no_controllers: bool,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Start a local control plane in the background and install the hcomm CRDs.
    Up,
    /// Show each component with its pid and health.
    Status,
    /// Stop every component (and check none is left).
    Down,
    /// Build or find the binaries (etcd, kube-apiserver, ..., helm, promtool, Prometheus, KEDA) and print their paths.
    Build,
    /// Run the pinned kubectl against the devcluster, e.g. `cargo devcluster kubectl get
    /// hcg` (kubectl's own help: `cargo devcluster kubectl -- --help`).
    Kubectl {
        /// Arguments passed on to kubectl.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
}

impl Args {
    fn kwok(&self) -> bool {
        !self.no_kwok
    }

    fn controllers(&self) -> bool {
        !self.no_controllers
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // Help and version exit 0, a bad flag 2.
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    match &args.command {
        Sub::Up => up(&args).await,
        Sub::Status => status(&args).await,
        Sub::Down => down(&args),
        Sub::Build => build(&args).await,
        Sub::Kubectl { args: kubectl_args } => kubectl(&args.state_dir, kubectl_args).await,
    }
}

async fn up(args: &Args) -> anyhow::Result<()> {
    if let Some(cluster) = DevCluster::load(&args.state_dir)? {
        if cluster.any_running() {
            println!("devcluster is already up ({})", cluster.server);
            print_kubeconfig(&cluster);
            return Ok(());
        }
        eprintln!(
            "found a stopped devcluster in {}; starting afresh",
            args.state_dir.display()
        );
    }
    if args.state_dir.exists() {
        std::fs::remove_dir_all(&args.state_dir)
            .with_context(|| format!("clear state dir {}", args.state_dir.display()))?;
    }
    std::fs::create_dir_all(&args.state_dir)?;
    let mut options = ControlPlaneOptions {
        state_dir: Some(args.state_dir.clone()),
        controllers: args.controllers(),
        kwok: Some(args.kwok()),
        ..ControlPlaneOptions::default()
    };
    if let Some(bind) = args.bind {
        options.bind_address = bind;
    }
    let control_plane = ControlPlane::start(options).await?;
    // If the CRDs do not install, the control plane is dropped, which stops it.
    control_plane
        .install_crds(&hcomm_crds::all_crds())
        .await
        .context("install the hcomm CRDs")?;
    let cluster = control_plane.detach()?;
    println!("devcluster is up ({})", cluster.server);
    for component in &cluster.components {
        println!(
            "  {:<24} pid {:<8} log {}",
            component.name,
            component.pid,
            component.log.display()
        );
    }
    print_kubeconfig(&cluster);
    Ok(())
}

fn print_kubeconfig(cluster: &DevCluster) {
    println!("kubeconfig: {}", cluster.kubeconfig.display());
    println!("export KUBECONFIG={}", cluster.kubeconfig.display());
}

async fn status(args: &Args) -> anyhow::Result<()> {
    let Some(cluster) = DevCluster::load(&args.state_dir)? else {
        println!(
            "devcluster is down (no state in {})",
            args.state_dir.display()
        );
        return Ok(());
    };
    println!(
        "devcluster {} (state {})",
        cluster.server,
        cluster.state_dir.display()
    );
    let mut healthy = true;
    for health in cluster.health().await {
        let state = match (&health.running, &health.health) {
            (true, Ok(())) => "healthy".to_owned(),
            (true, Err(error)) => format!("unhealthy: {error}"),
            (false, _) => "not running".to_owned(),
        };
        healthy &= health.running && health.health.is_ok();
        println!(
            "  {:<24} pid {:<8} {state}",
            health.component.name, health.component.pid
        );
    }
    print_kubeconfig(&cluster);
    if !healthy {
        bail!(
            "some components are not healthy; logs are in {}",
            cluster.state_dir.join("logs").display()
        );
    }
    Ok(())
}

fn down(args: &Args) -> anyhow::Result<()> {
    let Some(cluster) = DevCluster::load(&args.state_dir)? else {
        println!(
            "devcluster is already down (no state in {})",
            args.state_dir.display()
        );
        return Ok(());
    };
    cluster.stop()?;
    if cluster.any_running() {
        bail!("some components are still running");
    }
    println!(
        "devcluster is down; no component process is left (logs kept in {})",
        cluster.state_dir.join("logs").display()
    );
    Ok(())
}

async fn build(args: &Args) -> anyhow::Result<()> {
    let needs = Needs {
        controllers: args.controllers(),
        kwok: args.kwok(),
    };
    let started = std::time::Instant::now();
    let binaries = tokio::task::spawn_blocking(move || assets::resolve(needs)).await??;
    println!(
        "kubernetes {} binaries (cache {}), ready after {:.1?}:",
        assets::kubernetes_version()?,
        cache_root().display(),
        started.elapsed()
    );
    let optional = [
        ("kube-controller-manager", &binaries.kube_controller_manager),
        ("kube-scheduler", &binaries.kube_scheduler),
        ("kwok", &binaries.kwok),
    ];
    for (name, path) in [
        ("etcd", &binaries.etcd),
        ("kube-apiserver", &binaries.kube_apiserver),
        ("kubectl", &binaries.kubectl),
    ] {
        println!("  {name:<24} {}", path.display());
    }
    for (name, path) in optional {
        if let Some(path) = path {
            println!("  {name:<24} {}", path.display());
        }
    }
    // Helm is not part of the control plane, but the chart tests need it: build it here
    // too so CI's build step leaves nothing for the tests to build.
    let helm = tokio::task::spawn_blocking(assets::helm).await??;
    println!("  {:<24} {}", "helm", helm.display());
    // So is promtool, which the metrics tests run.
    let promtool = tokio::task::spawn_blocking(assets::promtool).await??;
    println!("  {:<24} {}", "promtool", promtool.display());
    // And the Prometheus server and KEDA, which the autoscaling chain runs.
    let prometheus = tokio::task::spawn_blocking(assets::prometheus).await??;
    println!("  {:<24} {}", "prometheus", prometheus.display());
    let keda = tokio::task::spawn_blocking(assets::keda).await??;
    println!("  {:<24} {}", "keda", keda.display());
    Ok(())
}

/// Runs the pinned kubectl with the devcluster's kubeconfig, passing every argument on,
/// so the demo works the same on machines without (or with another) kubectl.
async fn kubectl(state_dir: &Path, kubectl_args: &[String]) -> anyhow::Result<()> {
    let cluster = DevCluster::load(state_dir)?
        .filter(DevCluster::any_running)
        .with_context(|| {
            format!(
                "no devcluster runs in {}; run `cargo devcluster up`",
                state_dir.display()
            )
        })?;
    let binaries = tokio::task::spawn_blocking(|| assets::resolve(Needs::default())).await??;
    let status = std::process::Command::new(&binaries.kubectl)
        .args(kubectl_args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .status()
        .with_context(|| format!("running {}", binaries.kubectl.display()))?;
    if !status.success() {
        bail!("kubectl exited with {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(line: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("devcluster").chain(line.split_whitespace()))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn options_go_before_or_after_the_command() {
        let a = parse("--state-dir /s up --bind 127.0.0.2 --no-kwok").unwrap();
        assert!(matches!(a.command, Sub::Up));
        assert_eq!(a.state_dir, PathBuf::from("/s"));
        assert_eq!(a.bind, Some("127.0.0.2".parse().unwrap()));
        assert!(!a.kwok() && a.controllers());
        let a = parse("build --no-controllers").unwrap();
        assert!(matches!(a.command, Sub::Build) && !a.controllers() && a.kwok());
        for (line, sub) in [("status", "status"), ("down", "down")] {
            let a = parse(line).unwrap();
            assert_eq!(format!("{:?}", a.command).to_lowercase(), sub);
        }
    }

    #[test]
    fn kubectl_passes_every_argument_on() {
        let a = parse("kubectl get hcg -o yaml --all-namespaces --help").unwrap();
        let Sub::Kubectl { args } = a.command else {
            panic!("not kubectl")
        };
        assert_eq!(
            args,
            ["get", "hcg", "-o", "yaml", "--all-namespaces", "--help"]
        );
    }

    #[test]
    fn a_command_is_required_and_unknown_ones_are_named() {
        assert!(parse("").is_err());
        let e = parse("explode").unwrap_err().to_string();
        assert!(e.contains("explode"), "{e}");
        let e = parse("up --bind nowhere").unwrap_err().to_string();
        assert!(e.contains("--bind"), "{e}");
    }

    #[test]
    fn every_subcommand_renders_its_help() {
        let mut cmd = Args::command();
        let top = cmd.render_long_help().to_string();
        for sub in ["up", "status", "down", "build", "kubectl"] {
            assert!(top.contains(sub), "{sub} missing:\n{top}");
            let help = cmd
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            assert!(help.contains("--state-dir"), "{sub}:\n{help}");
        }
    }
}
