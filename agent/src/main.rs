//! `hcomm-agent`: parse the command line, start logging, run.
use hcomm_agent::cli::{self, Command, WeightsCommand};
use hcomm_agent::weights::tool;

fn run_weights(w: &WeightsCommand) -> hcomm_agent::weights::Result<String> {
    match w {
        WeightsCommand::Manifest {
            dir,
            chunk_size,
            json,
        } => tool::manifest(dir, *chunk_size, *json),
        WeightsCommand::Generate { dir, spec } => tool::generate_set(dir, spec),
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
    match cli::parse(&args)? {
        Command::Help => println!("{}", cli::USAGE),
        Command::Run(cfg) => hcomm_agent::run::run(*cfg).await?,
        Command::Weights(w) => {
            let out = tokio::task::spawn_blocking(move || run_weights(&w)).await??;
            print!("{out}");
        }
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
