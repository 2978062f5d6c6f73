//! `hcomm-agent`: parse the command line, start logging, run.
use hcomm_agent::cli::{self, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::parse(&args)? {
        Command::Help => println!("{}", cli::USAGE),
        Command::Run(cfg) => hcomm_agent::run::run(*cfg).await?,
        Command::Diagnose(a) => {
            let (rows, text) = hcomm_agent::diagnose::run(&a).await;
            print!("{text}");
            if rows
                .iter()
                .any(|r| r.outcome == hcomm_agent::diagnose::Outcome::Fail)
            {
                std::process::exit(2);
            }
        }
    }
    Ok(())
}
