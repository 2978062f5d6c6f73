//! The `hcomm-operator` binary: flags and environment → telemetry → [`hcomm_operator::run`].

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = hcomm_operator::config::Args::parse();
    let config = hcomm_operator::Config::from_args(args, |key| std::env::var(key).ok());
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    hcomm_operator::run(config).await?;
    Ok(())
}
