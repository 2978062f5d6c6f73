//! `hcomm-bench`: nccl-tests-style benchmark of the TCP backend's collectives.
//!
//! Two modes:
//! - launcher (default): for each world size in `--ranks`, starts that many `worker`
//!   processes of itself on this machine and prints rank 0's rows;
//! - `worker`: one rank. Rank 0 creates the root info and writes it to `--root-info-file`;
//!   the other ranks wait for that file. The bench scripts start workers themselves inside
//!   network namespaces (agent/comm/bench/run.sh) to measure over tc-shaped links.
//!
//! ```text
//! cargo run --release -p hcomm-comm --bin hcomm-bench -- --ranks 2,4,8 -b 4K -e 256M -f 4
//! ```

mod args;
mod launch;
mod measure;
mod plan;
mod worker;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Help and version exit 0, a bad flag 2.
    let args = args::Args::parse(std::env::args().skip(1).collect()).unwrap_or_else(|e| e.exit());
    let result = if args.worker {
        worker::run(&args)
    } else {
        launch::run(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hcomm-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
