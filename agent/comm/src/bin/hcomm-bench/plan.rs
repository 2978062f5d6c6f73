//! What to measure and how to report it, nccl-tests style. Pure: sizes, iteration policy,
//! bus-bandwidth factors, row formatting. The Python comparison scripts
//! (agent/comm/bench/policy.py) follow the same rules so that rows compare one to one.

use std::fmt::Write as _;
use std::str::FromStr;

use hcomm_comm::DataType;

/// A primitive the benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    AllToAll,
}

impl Op {
    pub const ALL: [Op; 5] = [
        Op::AllReduce,
        Op::AllGather,
        Op::ReduceScatter,
        Op::Broadcast,
        Op::AllToAll,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::Broadcast => "broadcast",
            Op::AllToAll => "all_to_all",
        }
    }

    /// nccl-tests' bus-bandwidth factor (PERFORMANCE.md): the fraction of the data each rank
    /// must move over its link for an optimal algorithm, so that busbw is comparable to the
    /// link speed whatever the rank count.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Op::AllReduce => 2.0 * (n - 1.0) / n,
            Op::AllGather | Op::ReduceScatter | Op::AllToAll => (n - 1.0) / n,
            Op::Broadcast => 1.0,
        }
    }

    /// Whether the op reduces (prints a redop, needs a numeric check).
    pub fn reduces(self) -> bool {
        matches!(self, Op::AllReduce | Op::ReduceScatter)
    }

    /// Bytes actually measured for a nominal `size` (nccl-tests' size is the all-reduce /
    /// broadcast buffer, the all-gather output, the reduce-scatter input, the all-to-all send
    /// buffer): per-rank blocks are rounded down to whole elements.
    pub fn effective_bytes(self, size: usize, n: usize, dtype: DataType) -> usize {
        let elems = size / dtype.size();
        match self {
            Op::AllReduce | Op::Broadcast => elems * dtype.size(),
            _ => (elems / n) * n * dtype.size(),
        }
    }
}

impl FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Op::ALL
            .into_iter()
            .find(|o| o.name() == s.trim() || o.name().replace('_', "") == s.trim())
            .ok_or_else(|| format!("unknown op {s:?}; expected one of all_reduce, all_gather, reduce_scatter, broadcast, all_to_all"))
    }
}

/// Parses "4K", "16M", "1G", "4096".
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .map(|v| v * mult)
        .map_err(|_| format!("bad size {s:?} (e.g. 4K, 16M, 256M)"))
}

/// Sizes from `min` to `max` (inclusive) multiplying by `factor`.
pub fn sizes(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        if factor < 2 {
            break;
        }
        s *= factor;
    }
    out
}

/// Warm-up iterations: 3 below 16 MiB, 1 above (2 cores: keep big sizes cheap).
pub fn warmup(size: usize) -> usize {
    if size < 16 << 20 { 3 } else { 1 }
}

/// Timed iterations unless `--max-iters` says otherwise.
pub const MAX_ITERS: usize = 50;

/// Timed iterations: about `budget` bytes per size, at least 2, at most `max`.
pub fn iters(size: usize, budget: usize, max: usize) -> usize {
    (budget / size.max(1)).clamp(2, max.max(2))
}

/// One measured row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub op: Op,
    pub bytes: usize,
    pub dtype: DataType,
    pub world: usize,
    pub seconds: f64,
    pub wrong: u64,
}

impl Row {
    pub fn count(&self) -> usize {
        self.bytes / self.dtype.size()
    }
    /// GB/s (1e9 bytes), as nccl-tests.
    pub fn algbw(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
    pub fn busbw(&self) -> f64 {
        self.algbw() * self.op.bus_factor(self.world)
    }

    pub fn header() -> String {
        format!(
            "# {:<15}{:>12}{:>12}{:>6}{:>6}{:>12}{:>9}{:>9}{:>8}\n# {:<15}{:>12}{:>12}{:>6}{:>6}{:>12}{:>9}{:>9}",
            "op",
            "size",
            "count",
            "type",
            "redop",
            "time_us",
            "algbw",
            "busbw",
            "#wrong",
            "",
            "(B)",
            "(elems)",
            "",
            "",
            "",
            "(GB/s)",
            "(GB/s)"
        )
    }

    pub fn line(&self) -> String {
        format!(
            "  {:<15}{:>12}{:>12}{:>6}{:>6}{:>12.1}{:>9.3}{:>9.3}{:>8}",
            self.op.name(),
            self.bytes,
            self.count(),
            self.dtype.name(),
            if self.op.reduces() { "sum" } else { "none" },
            self.seconds * 1e6,
            self.algbw(),
            self.busbw(),
            self.wrong
        )
    }

    /// One JSON object (the driver script's results file), same keys as policy.py.
    pub fn json(&self, implementation: &str, transport: &str) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"impl\":\"{implementation}\",\"transport\":\"{transport}\",\"world\":{},\"op\":\"{}\",\"bytes\":{},\"count\":{},\"dtype\":\"{}\",\"time_us\":{:.3},\"algbw\":{:.6},\"busbw\":{:.6},\"wrong\":{}}}",
            self.world,
            self.op.name(),
            self.bytes,
            self.count(),
            self.dtype.name(),
            self.seconds * 1e6,
            self.algbw(),
            self.busbw(),
            self.wrong
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(Op::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Op::AllGather.bus_factor(4), 0.75);
        assert_eq!(Op::ReduceScatter.bus_factor(8), 0.875);
        assert_eq!(Op::AllToAll.bus_factor(2), 0.5);
        assert_eq!(Op::Broadcast.bus_factor(8), 1.0);
    }

    #[test]
    fn sizes_span_4k_to_256m_by_the_factor() {
        let s = sizes(4 << 10, 256 << 20, 4);
        assert_eq!(s.first(), Some(&4096));
        assert_eq!(s.last(), Some(&(256 << 20)));
        assert_eq!(s.len(), 9);
        assert_eq!(parse_bytes("16M").unwrap(), 16 << 20);
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn iterations_shrink_with_size_within_bounds() {
        assert_eq!(iters(4096, 256 << 20, MAX_ITERS), 50);
        assert_eq!(iters(4096, 256 << 20, 400), 400);
        assert_eq!(iters(256 << 20, 256 << 20, 400), 2);
        assert_eq!(iters(16 << 20, 256 << 20, MAX_ITERS), 16);
    }

    #[test]
    fn row_reports_bandwidths_and_rounds_blocks_to_the_world() {
        let r = Row {
            op: Op::AllReduce,
            bytes: 1_000_000_000,
            dtype: DataType::F32,
            world: 4,
            seconds: 1.0,
            wrong: 0,
        };
        assert!((r.algbw() - 1.0).abs() < 1e-12);
        assert!((r.busbw() - 1.5).abs() < 1e-12);
        assert!(r.json("hcomm", "tcp").contains("\"busbw\":1.500000"));
        assert_eq!(Op::AllGather.effective_bytes(4096, 3, DataType::F32), 4092);
        assert_eq!(Op::AllReduce.effective_bytes(4096, 3, DataType::F32), 4096);
    }
}
