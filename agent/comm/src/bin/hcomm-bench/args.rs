//! Command-line flags (clap; nccl-tests spellings where they exist: `-b`, `-e`, `-f`),
//! resolved into [`Args`], which the launcher and the workers read.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use hcomm_comm::{Algorithm, DataType};

use crate::plan::{self, Op};

/// `hcomm-bench [worker] [options]`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "hcomm-bench",
    version,
    propagate_version = true,
    args_override_self = true,
    about = "nccl-tests-style benchmark of the TCP backend's collectives",
    long_about = "nccl-tests-style benchmark of the TCP backend's collectives. The launcher \
                  (default) runs every world size of --ranks as local worker processes and \
                  prints rank 0's rows; `worker` is one rank (started by the launcher or by \
                  agent/comm/bench/run.sh inside network namespaces).\n\n\
                  HCOMM_SPIN_US=N: receives poll up to N µs before parking, 0 never [default: \
                  100] (EndpointConfig::spin)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Option<Mode>,
    /// World sizes the launcher runs, e.g. 2,4,8.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_values_t = [2, 4, 8],
          value_parser = world_size)]
    pub ranks: Vec<usize>,
    #[command(flatten)]
    pub common: Common,
}

/// The launcher's alternative.
#[derive(Debug, Clone, Subcommand)]
pub enum Mode {
    /// One rank: rank 0 writes the root info to --root-info-file, the others wait for it.
    Worker {
        /// This rank.
        #[arg(long, value_name = "R")]
        rank: usize,
        /// The world size.
        #[arg(long, value_name = "N", value_parser = world_size)]
        world: usize,
        /// Rank 0 writes the root info here, the others read it.
        #[arg(long, value_name = "F")]
        root_info_file: PathBuf,
    },
}

/// Options of every rank (the launcher passes them on to its workers).
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Collectives: all_reduce,all_gather,reduce_scatter,broadcast,all_to_all [default: all].
    #[arg(long, global = true, value_name = "LIST", value_delimiter = ',', value_parser = op)]
    pub ops: Vec<Op>,
    /// Smallest size (4K, 1M, ...).
    #[arg(short = 'b', long, global = true, value_name = "SIZE", default_value = "4K",
          value_parser = plan::parse_bytes)]
    pub min_bytes: usize,
    /// Largest size.
    #[arg(short = 'e', long, global = true, value_name = "SIZE", default_value = "256M",
          value_parser = plan::parse_bytes)]
    pub max_bytes: usize,
    /// Size multiplier.
    #[arg(
        short = 'f',
        long,
        global = true,
        value_name = "N",
        default_value_t = 4
    )]
    pub factor: usize,
    /// Bytes timed per size (iterations = budget/size, 2..max).
    #[arg(long, global = true, value_name = "SIZE", default_value = "256M",
          value_parser = plan::parse_bytes)]
    pub budget: usize,
    /// Most timed iterations per size.
    #[arg(long, global = true, value_name = "N", default_value_t = plan::MAX_ITERS)]
    pub max_iters: usize,
    /// f32|f64|f16|bf16|i8|u8|i32|i64.
    #[arg(long, global = true, value_name = "T", default_value = "f32", value_parser = dtype)]
    pub dtype: DataType,
    /// auto|ring|tree|halving-doubling [default: auto, or HCOMM_ALGO].
    #[arg(long, global = true, value_name = "A", value_parser = algo)]
    pub algo: Option<Algorithm>,
    /// Pipeline segment of ring/chain schedules [default: the engine's].
    #[arg(long, global = true, value_name = "SIZE", value_parser = plan::parse_bytes)]
    pub segment: Option<usize>,
    /// Interface (NCCL SOCKET_IFNAME syntax) or IP.
    #[arg(long, global = true, value_name = "SPEC", default_value = "127.0.0.1")]
    pub bind: String,
    /// Group secret.
    #[arg(long, global = true, value_name = "S", default_value = "hcomm-bench")]
    pub secret: String,
    /// Append one JSON object per row to FILE (for the comparison table).
    #[arg(long, global = true, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Transport label in the JSON rows.
    #[arg(long, global = true, value_name = "L", default_value = "tcp")]
    pub label: String,
    /// Per-operation timeout, in seconds.
    #[arg(long, global = true, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
    /// Threads per rank (1: a current-thread runtime).
    #[arg(long, global = true, value_name = "N", default_value_t = 1)]
    pub threads: usize,
}

fn world_size(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?}: world sizes are numbers of at least 1")),
    }
}

fn op(s: &str) -> Result<Op, String> {
    s.parse()
}

fn dtype(s: &str) -> Result<DataType, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn algo(s: &str) -> Result<Algorithm, String> {
    s.parse().map_err(|e| format!("{e}"))
}

/// Parsed flags, as the launcher and the workers use them.
#[derive(Debug, Clone)]
pub struct Args {
    pub worker: bool,
    pub ranks: Vec<usize>,
    pub rank: usize,
    pub world: usize,
    pub root_info_file: Option<PathBuf>,
    pub ops: Vec<Op>,
    pub min_bytes: usize,
    pub max_bytes: usize,
    pub factor: usize,
    pub budget: usize,
    pub max_iters: usize,
    pub dtype: DataType,
    pub algo: Option<Algorithm>,
    pub segment: Option<usize>,
    pub bind: String,
    pub secret: String,
    pub json: Option<PathBuf>,
    pub label: String,
    pub timeout_secs: u64,
    /// Threads of each rank's runtime (1: current-thread, more: multi-thread workers).
    pub threads: usize,
    /// Flags to pass on to workers (everything but launcher-only ones).
    pub passthrough: Vec<String>,
}

/// Flags only the launcher reads (with their values): never passed on to workers.
const LAUNCHER_ONLY: [&str; 4] = ["--ranks", "--rank", "--world", "--root-info-file"];

/// `argv` without the `worker` word and the launcher-only flags: what the launcher
/// passes on to its workers (pure).
fn passthrough(argv: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "worker" {
            continue;
        }
        if LAUNCHER_ONLY.contains(&a.as_str()) {
            it.next();
            continue;
        }
        if LAUNCHER_ONLY
            .iter()
            .any(|f| a.strip_prefix(f).is_some_and(|rest| rest.starts_with('=')))
        {
            continue;
        }
        out.push(a.clone());
    }
    out
}

impl Args {
    /// Parses `argv` (without the program name); `--help` and `--version` come back as
    /// clap's display "errors" (exit code 0).
    pub fn parse(argv: Vec<String>) -> Result<Args, clap::Error> {
        let cli = Cli::try_parse_from(
            std::iter::once("hcomm-bench".to_owned()).chain(argv.iter().cloned()),
        )?;
        let c = cli.common;
        let (worker, rank, world, root_info_file) = match cli.mode {
            Some(Mode::Worker {
                rank,
                world,
                root_info_file,
            }) => {
                if rank >= world {
                    return Err(Cli::command_error(format!(
                        "--rank {rank} must be below --world {world}"
                    )));
                }
                (true, rank, world, Some(root_info_file))
            }
            None => (false, 0, 0, None),
        };
        Ok(Args {
            worker,
            ranks: cli.ranks,
            rank,
            world,
            root_info_file,
            ops: if c.ops.is_empty() {
                Op::ALL.to_vec()
            } else {
                c.ops
            },
            min_bytes: c.min_bytes,
            max_bytes: c.max_bytes,
            factor: c.factor,
            budget: c.budget,
            max_iters: c.max_iters,
            dtype: c.dtype,
            algo: c.algo,
            segment: c.segment,
            bind: c.bind,
            secret: c.secret,
            json: c.json,
            label: c.label,
            timeout_secs: c.timeout,
            threads: c.threads.max(1),
            passthrough: passthrough(&argv),
        })
    }
}

impl Cli {
    fn command_error(message: String) -> clap::Error {
        use clap::CommandFactory;
        Cli::command().error(clap::error::ErrorKind::ValueValidation, message)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(s: &str) -> Result<Args, clap::Error> {
        Args::parse(s.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn nccl_tests_spellings_parse_and_worker_flags_are_not_passed_on() {
        let a = parse("--ranks 2,3 -b 1M -e 64M -f 2 --ops all_reduce --dtype bf16 --algo ring")
            .unwrap();
        assert_eq!(a.ranks, [2, 3]);
        assert_eq!((a.min_bytes, a.max_bytes, a.factor), (1 << 20, 64 << 20, 2));
        assert_eq!(a.ops, [Op::AllReduce]);
        assert_eq!(a.dtype, DataType::BF16);
        assert!(!a.passthrough.contains(&"--ranks".to_string()));
        assert!(!a.passthrough.contains(&"2,3".to_string()));
        assert!(a.passthrough.contains(&"--algo".to_string()));
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let a = parse("").unwrap();
        assert!(!a.worker);
        assert_eq!(a.ranks, [2, 4, 8]);
        assert_eq!(a.ops, Op::ALL.to_vec());
        assert_eq!(
            (a.min_bytes, a.max_bytes, a.budget),
            (4 << 10, 256 << 20, 256 << 20)
        );
        assert_eq!((a.factor, a.max_iters, a.threads), (4, plan::MAX_ITERS, 1));
        assert_eq!(
            (a.bind.as_str(), a.secret.as_str()),
            ("127.0.0.1", "hcomm-bench")
        );
        assert_eq!((a.label.as_str(), a.timeout_secs), ("tcp", 120));
        assert_eq!((a.algo, a.segment, a.json), (None, None, None));
        assert_eq!(a.dtype, DataType::F32);
    }

    #[test]
    fn a_worker_without_its_rank_table_is_refused() {
        assert!(parse("worker --world 2").is_err());
        let e = parse("worker --world 2 --rank 2 --root-info-file /x").unwrap_err();
        assert!(e.to_string().contains("--rank"), "{e}");
        assert!(
            parse("worker --world 2 --rank 1 --root-info-file /x")
                .unwrap()
                .worker
        );
        let e = parse("--bogus 1").unwrap_err().to_string();
        assert!(e.contains("--bogus"), "{e}");
    }

    #[test]
    fn the_launchers_and_run_sh_worker_lines_parse() {
        // launch.rs: `worker --rank R --world N --root-info-file F` + the passthrough;
        // run.sh and docs/benchmarks.md put common flags after the worker flags.
        let a = parse("worker --rank 1 --world 4 --root-info-file /tmp/root --bind eth0 --ops all_reduce,all_gather -b 4K -e 256M -f 4 --max-iters 200 --budget 64M --json /tmp/r.jsonl --label tcp/1gbit").unwrap();
        assert!(a.worker);
        assert_eq!((a.rank, a.world), (1, 4));
        assert_eq!(a.root_info_file, Some(PathBuf::from("/tmp/root")));
        assert_eq!(a.bind, "eth0");
        assert_eq!(a.ops, [Op::AllReduce, Op::AllGather]);
        assert_eq!((a.max_iters, a.budget), (200, 64 << 20));
        assert_eq!(a.label, "tcp/1gbit");
        // Common flags before the `worker` word count too.
        let a = parse("--threads 2 worker --rank 0 --world 2 --root-info-file /x").unwrap();
        assert_eq!(a.threads, 2);
    }

    #[test]
    fn the_passthrough_drops_the_worker_word_and_launcher_only_flags_in_both_spellings() {
        let argv: Vec<String> = "--ranks 2,4 --ranks=8 -b 1M worker --rank 0 --world=2 --bind eth0"
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(passthrough(&argv), ["-b", "1M", "--bind", "eth0"]);
    }

    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        for (line, flag) in [
            ("--ranks 0", "--ranks"),
            ("-b big", "--min-bytes"),
            ("--dtype f128", "--dtype"),
            ("--algo best", "--algo"),
            ("--ops sum", "--ops"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(flag), "{line}: {e}");
        }
    }
}
