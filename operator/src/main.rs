//! The `hcomm-operator` binary: flags and environment → telemetry → [`hcomm_operator::run`].

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = hcomm_operator::config::Args::parse();
    let config = hcomm_operator::Config::from_args(args, |key| std::env::var(key).ok());
    hcomm_operator::telemetry::init(config.log_format);
    hcomm_operator::run(config).await?;
    Ok(())
}
