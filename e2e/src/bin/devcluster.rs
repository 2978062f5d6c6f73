//! `cargo devcluster up|down|status|build`: a local control plane for people.
//!
//! `up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler
//! and kwok detached from this process, installs the hcomm CRDs and prints
//! the kubeconfig; `status` probes each component; `down` stops them all and
//! checks that no process is left; `build` only builds (or finds) the binaries.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use hcomm_e2e::controlplane::detached::DevCluster;
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions, Needs, assets, cache_root};

const USAGE: &str = "\
usage: cargo devcluster <command> [options]

commands:
  up       start a local control plane in the background and install the hcomm CRDs
  status   show each component with its pid and health
  down     stop every component (and check none is left)
  build    build or find the binaries (etcd, kube-apiserver, ..., helm, promtool) and print their paths
  kubectl  run the pinned kubectl against the devcluster, e.g. `cargo devcluster kubectl get hcg`

options:
  --state-dir DIR     state folder (default $HCOMM_DEVCLUSTER_DIR or /tmp/hcomm-devcluster)
  --bind ADDR         address the apiserver listens on (up; default 127.0.0.1)
  --no-kwok           start without kwok (up, build)
  --no-controllers    start without kube-controller-manager and kube-scheduler (up, build)

Binaries come from $KUBEBUILDER_ASSETS when set; whatever is missing is built
with Go once and cached in $HCOMM_CACHE_DIR (default ~/.cache/hcomm).";

struct Args {
    command: String,
    state_dir: PathBuf,
    bind: Option<IpAddr>,
    kwok: bool,
    controllers: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut parsed = Args {
        command: String::new(),
        state_dir: std::env::var_os("HCOMM_DEVCLUSTER_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp/hcomm-devcluster")),
        bind: None,
        kwok: true,
        controllers: true,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--state-dir" => {
                parsed.state_dir = args.next().context("--state-dir needs a folder")?.into()
            }
            "--bind" => {
                let value = args.next().context("--bind needs an address")?;
                parsed.bind = Some(value.parse().with_context(|| format!("--bind {value}"))?);
            }
            "--no-kwok" => parsed.kwok = false,
            "--no-controllers" => parsed.controllers = false,
            "-h" | "--help" | "help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other if other.starts_with('-') => bail!("unknown option {other}\n\n{USAGE}"),
            other if parsed.command.is_empty() => parsed.command = other.to_owned(),
            other => bail!("unexpected argument {other}\n\n{USAGE}"),
        }
    }
    if parsed.command.is_empty() {
        bail!("{USAGE}");
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let mut raw = std::env::args().skip(1).peekable();
    if raw.peek().is_some_and(|first| first == "kubectl") {
        return kubectl(raw.skip(1).collect()).await;
    }
    let args = parse(raw)?;
    match args.command.as_str() {
        "up" => up(&args).await,
        "status" => status(&args).await,
        "down" => down(&args),
        "build" => build(&args).await,
        other => bail!("unknown command {other}\n\n{USAGE}"),
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
        controllers: args.controllers,
        kwok: Some(args.kwok),
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
        controllers: args.controllers,
        kwok: args.kwok,
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
    Ok(())
}

/// Runs the pinned kubectl with the devcluster's kubeconfig, passing every argument on,
/// so the demo works the same on machines without (or with another) kubectl.
async fn kubectl(kubectl_args: Vec<String>) -> anyhow::Result<()> {
    let state_dir = std::env::var_os("HCOMM_DEVCLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/hcomm-devcluster"));
    let cluster = DevCluster::load(&state_dir)?
        .filter(DevCluster::any_running)
        .with_context(|| {
            format!(
                "no devcluster runs in {}; run `cargo devcluster up`",
                state_dir.display()
            )
        })?;
    let binaries = tokio::task::spawn_blocking(|| assets::resolve(Needs::default())).await??;
    let status = std::process::Command::new(&binaries.kubectl)
        .args(&kubectl_args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .status()
        .with_context(|| format!("running {}", binaries.kubectl.display()))?;
    if !status.success() {
        bail!("kubectl exited with {status}");
    }
    Ok(())
}
