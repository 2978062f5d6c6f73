//! `hcomm-worker`: the reference inference worker (see `hcomm_examples::worker`).

use anyhow::Context;
use hcomm_examples::worker::{self, WorkerConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cfg) = WorkerConfig::from_args(&args)? else {
        println!("{}", worker::USAGE);
        return Ok(());
    };
    let w = worker::start(cfg).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: finishing requests in flight"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: finishing requests in flight"),
    }
    w.shutdown().await?;
    Ok(())
}
