//! `hcomm-agent`: parse the command line ([`hcomm_agent::cli`]), start logging, run.
use clap::Parser;
use hcomm_agent::cli::weights::WeightsCommand;
use hcomm_agent::cli::{Cli, Command};
use hcomm_agent::weights::tool;

fn run_weights(w: &WeightsCommand) -> hcomm_agent::weights::Result<String> {
    match w {
        WeightsCommand::Manifest {
            dir,
            chunk_size,
            chunk_hash,
            json,
        } => {
            if let Some(note) = tool::chunk_size_note(*chunk_size) {
                eprintln!("{note}");
            }
            tool::manifest(dir, *chunk_size, *chunk_hash, *json)
        }
        WeightsCommand::Generate { dir, .. } => {
            let spec = w.generate_spec().expect("generate has a spec");
            tool::generate_set(dir, &spec)
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    hcomm_agent::cli::log_format::init(cli.log.log_format, "info");
    match cli.command {
        Command::Run(args) => hcomm_agent::run::run(args.into_config()?).await?,
        Command::Weights(w) => {
            let out = tokio::task::spawn_blocking(move || run_weights(&w)).await??;
            print!("{out}");
        }
        Command::Diagnose(d) => {
            let (rows, text) = hcomm_agent::diagnose::run(&d.into_args()?).await;
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
