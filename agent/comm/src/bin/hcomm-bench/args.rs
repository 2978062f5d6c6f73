//! Command-line flags (nccl-tests spellings where they exist: `-b`, `-e`, `-f`).

use std::path::PathBuf;

use hcomm_comm::{Algorithm, DataType};

use crate::plan::{self, Op};

pub const USAGE: &str = "\
usage: hcomm-bench [worker] [options]

launcher (default): runs every world size of --ranks as local worker processes
  --ranks LIST          world sizes, e.g. 2,4,8                       [2,4,8]
worker: one rank (started by the launcher or by agent/comm/bench/run.sh)
  --rank R --world N    this rank and the world size
  --root-info-file F    rank 0 writes the root info here, others read it
common:
  --ops LIST            all_reduce,all_gather,reduce_scatter,broadcast,all_to_all [all]
  -b, --min-bytes SIZE  smallest size (4K, 1M, ...)                  [4K]
  -e, --max-bytes SIZE  largest size                                 [256M]
  -f, --factor N        size multiplier                              [4]
  --budget SIZE         bytes timed per size (iterations = budget/size, 2..max) [256M]
  --max-iters N         most timed iterations per size                [50]
  --dtype T             f32|f64|f16|bf16|i8|u8|i32|i64               [f32]
  --algo A              auto|ring|tree|halving-doubling              [auto, or HCOMM_ALGO]
  --segment SIZE        pipeline segment of ring/chain schedules      [engine default]
  --bind SPEC           interface (NCCL SOCKET_IFNAME syntax) or IP   [127.0.0.1]
  --secret S            group secret                                 [hcomm-bench]
  --json FILE           append one JSON object per row (for the comparison table)
  --label L             transport label in the JSON rows              [tcp]
  --timeout SECS        per-operation timeout                        [120]
  --threads N           threads per rank (1: a current-thread runtime) [1]
  (HCOMM_SPIN_US=N: receives poll up to N µs before parking, 0 never [100]; EndpointConfig::spin)";

/// Parsed flags.
#[derive(Debug, Clone)]
pub struct Args {
    pub help: bool,
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

impl Args {
    pub fn parse(it: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            help: false,
            worker: false,
            ranks: vec![2, 4, 8],
            rank: 0,
            world: 0,
            root_info_file: None,
            ops: Op::ALL.to_vec(),
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            factor: 4,
            budget: 256 << 20,
            max_iters: plan::MAX_ITERS,
            dtype: DataType::F32,
            algo: None,
            segment: None,
            bind: "127.0.0.1".into(),
            secret: "hcomm-bench".into(),
            json: None,
            label: "tcp".into(),
            timeout_secs: 120,
            threads: 1,
            passthrough: Vec::new(),
        };
        let mut it = it.into_iter();
        while let Some(flag) = it.next() {
            if flag == "worker" {
                a.worker = true;
                continue;
            }
            if flag == "-h" || flag == "--help" {
                a.help = true;
                continue;
            }
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let launcher_only = matches!(
                flag.as_str(),
                "--ranks" | "--rank" | "--world" | "--root-info-file"
            );
            if !launcher_only {
                a.passthrough.extend([flag.clone(), value.clone()]);
            }
            let num = |v: &str| {
                v.parse::<usize>()
                    .map_err(|_| format!("{flag}: not a number: {v:?}"))
            };
            match flag.as_str() {
                "--ranks" => a.ranks = value.split(',').map(num).collect::<Result<_, _>>()?,
                "--rank" => a.rank = num(&value)?,
                "--world" => a.world = num(&value)?,
                "--root-info-file" => a.root_info_file = Some(value.into()),
                "--ops" => a.ops = value.split(',').map(str::parse).collect::<Result<_, _>>()?,
                "-b" | "--min-bytes" => a.min_bytes = plan::parse_bytes(&value)?,
                "-e" | "--max-bytes" => a.max_bytes = plan::parse_bytes(&value)?,
                "-f" | "--factor" => a.factor = num(&value)?,
                "--budget" => a.budget = plan::parse_bytes(&value)?,
                "--max-iters" => a.max_iters = num(&value)?,
                "--dtype" => a.dtype = value.parse().map_err(|e| format!("{e}"))?,
                "--algo" => a.algo = Some(value.parse().map_err(|e| format!("{e}"))?),
                "--segment" => a.segment = Some(plan::parse_bytes(&value)?),
                "--threads" => a.threads = num(&value)?.max(1),
                "--bind" => a.bind = value,
                "--secret" => a.secret = value,
                "--json" => a.json = Some(value.into()),
                "--label" => a.label = value,
                "--timeout" => a.timeout_secs = num(&value)? as u64,
                other => return Err(format!("unknown flag {other}")),
            }
        }
        if a.worker && (a.world == 0 || a.rank >= a.world || a.root_info_file.is_none()) {
            return Err("worker needs --world N, --rank R < N and --root-info-file".into());
        }
        if a.ranks.contains(&0) {
            return Err("--ranks: world sizes must be at least 1".into());
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, String> {
        Args::parse(s.split_whitespace().map(String::from))
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
        assert!(a.passthrough.contains(&"--algo".to_string()));
    }

    #[test]
    fn a_worker_without_its_rank_table_is_refused() {
        assert!(parse("worker --world 2").is_err());
        assert!(parse("worker --world 2 --rank 2 --root-info-file /x").is_err());
        assert!(
            parse("worker --world 2 --rank 1 --root-info-file /x")
                .unwrap()
                .worker
        );
        assert!(parse("--bogus 1").is_err());
    }
}
