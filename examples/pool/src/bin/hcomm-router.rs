//! `hcomm-router`: a router in front of a pool, or a load generator through one.
//!
//! ```text
//! hcomm-router serve --service SVC [--namespace NS] [--listen 0.0.0.0:8000]
//!     [--max-attempts 3] [--request-timeout 10s] [--connect-timeout 1s] [--attempt-timeout T]
//!     [--discovery endpointslices|pods]
//! hcomm-router load --service SVC [--namespace NS] [--concurrency 8] [--rate REQ_PER_S]
//!     [--duration 30s] [--requests N] [--tokens 16] [--expect-digest sha256:...[,sha256:...]]
//!     [--max-attempts 3] [--request-timeout 10s] [--connect-timeout 1s] [--attempt-timeout T]
//!     [--wait-ready 30s] [--progress 1s] [--progress-format text|json] [--records FILE.jsonl]
//!     [--discovery endpointslices|pods]
//! ```
//! `--discovery pods` follows the Service's Pods by their Ready condition instead of its
//! EndpointSlices, for Pod addresses the EndpointSlice API refuses (loopback test hosts).
//! Without `--duration` or `--requests`, `load` runs until SIGINT or SIGTERM.
//! Kubernetes access: in-cluster config or `KUBECONFIG`. `--namespace` defaults to the
//! config's namespace. `load` prints progress lines on stderr and one final JSON line
//! (the stats) on stdout; it exits 2 if a request failed, got a wrong digest, or a member
//! answered with two digests.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use hcomm_examples::flags::parse_duration;
use hcomm_examples::load::{self, AllowedDigests, LoadConfig, LoadStats};
use hcomm_examples::proxy::{self, Proxy};
use hcomm_examples::router::{self, Balancer, Dispatcher, HttpClient};

/// `hcomm-router serve|load`.
#[derive(Debug, Parser)]
#[command(
    name = "hcomm-router",
    version,
    propagate_version = true,
    about = "A router in front of an hcomm pool, or a load generator through one",
    long_about = "A router in front of an hcomm pool, or a load generator through one. \
                  Kubernetes access: in-cluster config or KUBECONFIG."
)]
struct Cli {
    #[command(subcommand)]
    command: Sub,
    #[command(flatten)]
    log: hcomm_agent::cli::log_format::LogArgs,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Route requests to the pool's ready members, retrying on another one.
    Serve(ServeArgs),
    /// Put load on the pool through the router logic; prints progress on stderr and one
    /// final JSON stats line on stdout; exits 2 if a request failed, got a wrong digest,
    /// or a member answered with two digests. Without --duration or --requests it runs
    /// until SIGINT or SIGTERM.
    Load(Box<LoadArgs>),
}

/// Flags both subcommands share: where the pool is and how requests are sent.
#[derive(Debug, Args)]
struct Common {
    /// The pool's Service.
    #[arg(long, value_name = "SVC")]
    service: String,
    /// Its namespace [default: the Kubernetes config's namespace].
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// Attempts per request (a 503 or a reset is retried on another member).
    #[arg(long, value_name = "N", default_value_t = 3)]
    max_attempts: u32,
    /// Bound of one request, all attempts included.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    request_timeout: Duration,
    /// Bound of one connection attempt.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration)]
    connect_timeout: Duration,
    /// Bound of one attempt [default: none].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    attempt_timeout: Option<Duration>,
    /// How members are found: the Service's EndpointSlices, or its Pods by their Ready
    /// condition (for Pod addresses the EndpointSlice API refuses, e.g. loopback hosts).
    #[arg(long, value_name = "endpointslices|pods", default_value = "endpointslices",
          value_parser = discovery)]
    discovery: router::Discovery,
}

fn discovery(s: &str) -> Result<router::Discovery, String> {
    s.parse()
}

/// `hcomm-router serve`.
#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    common: Common,
    /// Where the router listens.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8000")]
    listen: std::net::SocketAddr,
}

/// How progress is reported besides the text line on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProgressFormat {
    /// Text lines on stderr only.
    Text,
    /// Also the stats as a JSON line on stdout at every tick (for harnesses).
    Json,
}

/// `hcomm-router load`.
#[derive(Debug, Args)]
struct LoadArgs {
    #[command(flatten)]
    common: Common,
    /// Requests in flight at once.
    #[arg(long, value_name = "N", default_value_t = LoadConfig::default().concurrency)]
    concurrency: usize,
    /// Requests per second [default: as fast as the concurrency allows].
    #[arg(long, value_name = "REQ_PER_S")]
    rate: Option<f64>,
    /// Stop after this long.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many requests.
    #[arg(long, value_name = "N")]
    requests: Option<u64>,
    /// Tokens asked of each request.
    #[arg(long, value_name = "N", default_value_t = LoadConfig::default().tokens)]
    tokens: u32,
    /// Accepted weights digests, comma-separated [default: any].
    #[arg(long, value_name = "sha256:...[,sha256:...]")]
    expect_digest: Option<String>,
    /// How long to wait for a ready endpoint.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    wait_ready: Duration,
    /// Interval of the progress lines.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration)]
    progress: Duration,
    /// Progress format.
    #[arg(long, value_enum, default_value_t = ProgressFormat::Text)]
    progress_format: ProgressFormat,
    /// Write one JSON record per request to FILE.jsonl at the end.
    #[arg(long, value_name = "FILE.jsonl")]
    records: Option<PathBuf>,
}

impl Common {
    /// Connects to the cluster, follows the Service, builds the dispatcher.
    async fn dispatcher(&self) -> anyhow::Result<(router::Follower, Dispatcher)> {
        let client = kube::Client::try_default()
            .await
            .context("Kubernetes client (in-cluster or KUBECONFIG)")?;
        let ns = self
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let follower = router::follow(client, &ns, &self.service, self.discovery);
        let mut dispatcher = Dispatcher::new(
            Balancer::new(follower.endpoints()),
            HttpClient::new(self.connect_timeout),
            self.max_attempts,
        );
        dispatcher.attempt_timeout = self.attempt_timeout;
        tracing::info!(service = %self.service, namespace = %ns, discovery = ?self.discovery, "following the Service");
        Ok((follower, dispatcher))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Help and version exit 0, a bad flag 2.
    let cli = Cli::parse();
    hcomm_agent::cli::log_format::init(cli.log.log_format, "info");
    match cli.command {
        Sub::Serve(args) => serve(args).await,
        Sub::Load(args) => {
            let ok = load(*args).await?;
            if !ok {
                std::process::exit(2);
            }
            Ok(())
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs { common, listen } = args;
    let (_follower, dispatcher) = common.dispatcher().await?;
    let p = Proxy {
        dispatcher,
        request_timeout: common.request_timeout,
    };
    proxy::serve(listen, p, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// Runs the load; true when every request was served with an accepted digest.
async fn load(args: LoadArgs) -> anyhow::Result<bool> {
    let common = args.common;
    let cfg = LoadConfig {
        request_timeout: common.request_timeout,
        concurrency: args.concurrency,
        rate: args.rate,
        duration: args.duration,
        max_requests: args.requests,
        tokens: args.tokens,
        ..LoadConfig::default()
    };
    let allowed = match args.expect_digest {
        Some(list) => {
            AllowedDigests::only(list.split(',').map(str::trim).filter(|s| !s.is_empty()))
        }
        None => AllowedDigests::any(),
    };
    let (wait_ready, progress, records_path) = (args.wait_ready, args.progress, args.records);
    // `json`: the stats as a JSON line on stdout at every progress tick (for harnesses),
    // besides the text line on stderr.
    let json_progress = args.progress_format == ProgressFormat::Json;

    let (_follower, dispatcher) = common.dispatcher().await?;
    if tokio::time::timeout(wait_ready, dispatcher.balancer().wait_ready())
        .await
        .ok()
        != Some(true)
    {
        bail!(
            "no ready endpoint of service {} within {wait_ready:?}",
            common.service
        );
    }
    let run = load::start(dispatcher.clone(), cfg, allowed);
    let mut tick = tokio::time::interval(progress);
    tick.tick().await;
    // Without --duration or --requests the load runs until SIGINT or SIGTERM; either ends
    // it gracefully (requests in flight finish) with the final stats line.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("install the SIGTERM handler")?;
    while !run.is_finished() {
        tokio::select! {
            _ = tick.tick() => {
                let stats = run.stats();
                eprintln!("{}", progress_line(&stats, dispatcher.balancer().ready().len()));
                if json_progress {
                    println!("{}", stats_line(&stats, false)?);
                }
            }
            _ = tokio::signal::ctrl_c() => run.stop(),
            _ = terminate.recv() => run.stop(),
        }
    }
    let report = run.finish().await;
    if let Some(path) = records_path {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("create {}", path.display()))?,
        );
        for r in &report.records {
            serde_json::to_writer(&mut out, r)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    let s = &report.stats;
    println!("{}", stats_line(s, true)?);
    Ok(s.failed == 0 && s.wrong_digest == 0 && s.mixed_digest_members.is_empty())
}

/// The stats as one JSON object, with `"final"` telling the last line from progress.
fn stats_line(s: &LoadStats, last: bool) -> anyhow::Result<String> {
    let mut v = serde_json::to_value(s)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("final".into(), last.into());
    }
    Ok(v.to_string())
}

fn progress_line(s: &LoadStats, ready: usize) -> String {
    let pods: Vec<String> = s
        .by_pod
        .iter()
        .map(|(p, st)| format!("{p}:{}", st.served))
        .collect();
    format!(
        "t={:.1}s ready={ready} served={} failed={} wrong_digest={} retried={} refused_not_ready={} refused_draining={} inflight={} p99={:.0}ms pods=[{}]",
        s.elapsed_s,
        s.served,
        s.failed,
        s.wrong_digest,
        s.retried,
        s.refused_not_ready,
        s.refused_draining,
        s.inflight,
        s.latency_ms.p99,
        pods.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("hcomm-router").chain(line.split_whitespace()))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_takes_the_common_flags_and_a_listen_address() {
        let Sub::Serve(s) =
            parse("serve --service decode --listen 127.0.0.1:9000 --discovery pods")
                .unwrap()
                .command
        else {
            panic!("not serve")
        };
        assert_eq!(s.common.service, "decode");
        assert_eq!(s.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(s.common.discovery, router::Discovery::Pods);
        assert_eq!(s.common.max_attempts, 3);
        assert_eq!(s.common.request_timeout, Duration::from_secs(10));
        assert_eq!(s.common.connect_timeout, Duration::from_secs(1));
    }

    #[test]
    fn the_testbeds_load_arguments_parse() {
        // e2e/src/testbed/load.rs
        let Sub::Load(l) = parse(
            "load --service decode --namespace default --concurrency 4 --tokens 8 \
             --progress 500ms --progress-format json --attempt-timeout 2s \
             --records /tmp/r.jsonl --expect-digest sha256:aa,sha256:bb --discovery pods",
        )
        .unwrap()
        .command
        else {
            panic!("not load")
        };
        assert_eq!((l.concurrency, l.tokens), (4, 8));
        assert_eq!(l.progress, Duration::from_millis(500));
        assert_eq!(l.progress_format, ProgressFormat::Json);
        assert_eq!(l.common.attempt_timeout, Some(Duration::from_secs(2)));
        assert_eq!(l.records, Some(PathBuf::from("/tmp/r.jsonl")));
        assert_eq!(l.expect_digest.as_deref(), Some("sha256:aa,sha256:bb"));
        assert_eq!(l.wait_ready, Duration::from_secs(30));
        assert_eq!((l.duration, l.requests, l.rate), (None, None, None));
    }

    #[test]
    fn errors_name_the_flag() {
        for (line, flag) in [
            ("serve", "--service"),
            ("load --service s --duration soon", "--duration"),
            (
                "load --service s --progress-format xml",
                "--progress-format",
            ),
            ("serve --service s --discovery dns", "--discovery"),
            ("serve --service s --bogus 1", "--bogus"),
            ("load --service a --service b", "--service"),
            ("explode", "explode"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(flag), "{line}: {e}");
        }
    }

    #[test]
    fn every_subcommand_renders_its_help() {
        let mut cmd = Cli::command();
        for sub in ["serve", "load"] {
            let help = cmd
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            assert!(
                help.contains("--service") && help.contains("--discovery"),
                "{help}"
            );
        }
    }
}
