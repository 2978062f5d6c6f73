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
use std::time::Duration;

use anyhow::{Context, bail};
use hcomm_examples::flags::Flags;
use hcomm_examples::load::{self, AllowedDigests, LoadConfig, LoadStats};
use hcomm_examples::proxy::{self, Proxy};
use hcomm_examples::router::{self, Balancer, Dispatcher, HttpClient};

const USAGE: &str = "usage:\n  hcomm-router serve --service SVC [--namespace NS] [--listen 0.0.0.0:8000] \
[--max-attempts 3] [--request-timeout 10s] [--connect-timeout 1s] [--attempt-timeout T] \
[--discovery endpointslices|pods]\n  hcomm-router load --service SVC \
[--namespace NS] [--concurrency 8] [--rate REQ_PER_S] [--duration 30s] [--requests N] [--tokens 16] \
[--expect-digest sha256:..[,..]] [--max-attempts 3] [--request-timeout 10s] [--connect-timeout 1s] [--attempt-timeout T] \
[--wait-ready 30s] [--progress 1s] [--progress-format text|json] [--records FILE.jsonl] \
[--discovery endpointslices|pods]\n\
load runs until --duration, --requests, SIGINT or SIGTERM, then prints the final JSON stats line.";

/// Flags both subcommands share: where the pool is and how requests are sent.
struct Common {
    service: String,
    namespace: Option<String>,
    max_attempts: u32,
    request_timeout: Duration,
    connect_timeout: Duration,
    attempt_timeout: Option<Duration>,
    discovery: router::Discovery,
}

impl Common {
    fn take(f: &mut Flags) -> anyhow::Result<Common> {
        Ok(Common {
            service: f.take("service").context("--service is required")?,
            namespace: f.take("namespace"),
            max_attempts: f.take_parsed("max-attempts")?.unwrap_or(3),
            request_timeout: f
                .take_duration("request-timeout")?
                .unwrap_or(Duration::from_secs(10)),
            connect_timeout: f
                .take_duration("connect-timeout")?
                .unwrap_or(Duration::from_secs(1)),
            attempt_timeout: f.take_duration("attempt-timeout")?,
            discovery: match f.take("discovery") {
                Some(d) => d.parse().map_err(anyhow::Error::msg)?,
                None => router::Discovery::EndpointSlices,
            },
        })
    }

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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, rest)) => (c.as_str(), rest),
        None => ("help", &[][..]),
    };
    let Some(f) = Flags::parse(rest)? else {
        println!("{USAGE}");
        return Ok(());
    };
    match cmd {
        "serve" => serve(f).await,
        "load" => {
            let ok = load(f).await?;
            if !ok {
                std::process::exit(2);
            }
            Ok(())
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown subcommand {other:?}\n{USAGE}"),
    }
}

async fn serve(mut f: Flags) -> anyhow::Result<()> {
    let common = Common::take(&mut f)?;
    let listen = f
        .take_parsed("listen")?
        .unwrap_or_else(|| ([0, 0, 0, 0], 8000).into());
    f.finish()?;
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
async fn load(mut f: Flags) -> anyhow::Result<bool> {
    let common = Common::take(&mut f)?;
    let mut cfg = LoadConfig {
        request_timeout: common.request_timeout,
        ..LoadConfig::default()
    };
    if let Some(c) = f.take_parsed("concurrency")? {
        cfg.concurrency = c;
    }
    cfg.rate = f.take_parsed("rate")?;
    cfg.duration = f.take_duration("duration")?;
    cfg.max_requests = f.take_parsed("requests")?;
    if let Some(t) = f.take_parsed("tokens")? {
        cfg.tokens = t;
    }
    let allowed = match f.take("expect-digest") {
        Some(list) => {
            AllowedDigests::only(list.split(',').map(str::trim).filter(|s| !s.is_empty()))
        }
        None => AllowedDigests::any(),
    };
    let wait_ready = f
        .take_duration("wait-ready")?
        .unwrap_or(Duration::from_secs(30));
    let progress = f
        .take_duration("progress")?
        .unwrap_or(Duration::from_secs(1));
    let records_path = f.take("records");
    // `json`: the stats as a JSON line on stdout at every progress tick (for harnesses),
    // besides the text line on stderr.
    let json_progress = match f.take("progress-format").as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => bail!("--progress-format {other:?}: text or json"),
    };
    f.finish()?;

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
            std::fs::File::create(&path).with_context(|| format!("create {path}"))?,
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
