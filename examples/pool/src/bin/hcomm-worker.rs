//! `hcomm-worker`: the reference inference worker (see `hcomm_examples::worker`).

use anyhow::Context;
use clap::Parser;
use hcomm_examples::flags::WorkerArgs;
use hcomm_examples::worker;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Help and version exit 0, a bad flag 2.
    let args = WorkerArgs::parse();
    hcomm_agent::cli::log_format::init(args.log.log_format, "info");
    let cfg = args.into_config(std::env::var("POD_IP").ok().as_deref())?;
    let w = worker::start(cfg).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: finishing requests in flight"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: finishing requests in flight"),
    }
    // The same drain as an operator's request: see `worker::shutdown`.
    worker::shutdown::drain_and_stop(w).await?;
    Ok(())
}
