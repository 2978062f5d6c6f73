//! The values a collective call carries: element [`DataType`], [`ReduceOp`], [`Algorithm`]
//! choice, [`VLayout`] of an all-to-all-v, and the [`ParseError`] of their text forms.

use std::fmt;
use std::str::FromStr;

use super::error::CommError;

/// Element type of a buffer. The numbering is ours; backends map it (HCCL has its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    U8,
    I32,
    I64,
}

impl DataType {
    /// How many elements of this type `len` bytes hold; an invalid-argument error for `op`
    /// when `len` is not a whole number of them. Every backend checks buffers this way
    /// before any traffic.
    pub fn element_count(self, op: &str, len: usize) -> Result<usize, CommError> {
        if !len.is_multiple_of(self.size()) {
            return Err(CommError::invalid(
                op,
                format!("{len} bytes is not a whole number of {self} elements"),
            ));
        }
        Ok(len / self.size())
    }

    /// Every data type, for tests and benchmarks.
    pub const ALL: [DataType; 8] = [
        DataType::F32,
        DataType::F64,
        DataType::F16,
        DataType::BF16,
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::I64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::BF16 => 2,
            DataType::F32 | DataType::I32 => 4,
            DataType::F64 | DataType::I64 => 8,
        }
    }

    /// Short lowercase name, as printed by benchmarks ("float", "half" are accepted on input).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::F16 => "f16",
            DataType::BF16 => "bf16",
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::I64 => "i64",
        }
    }

    /// True for the floating-point types (results compared with a tolerance).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F32 | DataType::F64 | DataType::F16 | DataType::BF16
        )
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DataType {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float" | "float32" => DataType::F32,
            "f64" | "double" | "float64" => DataType::F64,
            "f16" | "half" | "float16" => DataType::F16,
            "bf16" | "bfloat16" => DataType::BF16,
            "i8" | "int8" => DataType::I8,
            "u8" | "uint8" => DataType::U8,
            "i32" | "int" | "int32" => DataType::I32,
            "i64" | "int64" => DataType::I64,
            _ => {
                return Err(ParseError::new(
                    "data type",
                    s,
                    "f32|f64|f16|bf16|i8|u8|i32|i64",
                ));
            }
        })
    }
}

/// Reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];

    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "sum" => ReduceOp::Sum,
            "prod" | "product" => ReduceOp::Prod,
            "min" => ReduceOp::Min,
            "max" => ReduceOp::Max,
            _ => return Err(ParseError::new("reduce op", s, "sum|prod|min|max")),
        })
    }
}

/// Collective algorithm. `Auto` picks by message size and world size (see the crate README
/// for the measured crossover); the others force one family for every size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    #[default]
    Auto,
    /// Bandwidth-optimal: ring reduce-scatter + all-gather, segmented and pipelined; chain
    /// broadcast/reduce.
    Ring,
    /// Latency-optimal: log2(n) rounds — recursive doubling for all-reduce (non-power-of-two
    /// ranks folded in first), binomial trees for broadcast and reduce, Bruck's all-gather.
    /// `rd` and `recursive-doubling` also parse.
    Tree,
    /// Rabenseifner's all-reduce for mid-size messages: reduce-scatter by recursive halving,
    /// all-gather by recursive doubling — the ring's bytes in 2·log2(n) rounds. Other
    /// collectives take `Tree` for it. `hd` and `rabenseifner` also parse.
    HalvingDoubling,
}

impl Algorithm {
    /// Environment variable that overrides the algorithm (`auto`, `ring`, `tree`).
    pub const ENV: &'static str = "HCOMM_ALGO";

    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::HalvingDoubling => "halving-doubling",
        }
    }

    /// Reads [`Algorithm::ENV`]; unset or empty means `Auto`, a bad value is an error (never
    /// silently ignored).
    pub fn from_env() -> Result<Algorithm, ParseError> {
        match std::env::var(Self::ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(Algorithm::Auto),
        }
    }

    /// The effective choice: an explicit override wins, then the environment, then `Auto`.
    pub fn resolve(explicit: Option<Algorithm>) -> Result<Algorithm, ParseError> {
        match explicit {
            Some(a) => Ok(a),
            None => Self::from_env(),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(
            match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
                "auto" => Algorithm::Auto,
                "ring" => Algorithm::Ring,
                "tree" | "rd" | "recursive-doubling" => Algorithm::Tree,
                "halving-doubling" | "hd" | "rabenseifner" => Algorithm::HalvingDoubling,
                _ => {
                    return Err(ParseError::new(
                        "algorithm",
                        s,
                        "auto|ring|tree|halving-doubling",
                    ));
                }
            },
        )
    }
}

/// A value that did not parse; names what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: expected {expected}")]
pub struct ParseError {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl ParseError {
    pub fn new(what: &'static str, value: &str, expected: &'static str) -> Self {
        ParseError {
            what,
            value: value.to_string(),
            expected,
        }
    }
}

/// Per-peer counts and displacements of an all-to-all-v, in elements of the call's
/// [`DataType`] (as HCCL's `HcclAlltoAllV` and MPI's `Alltoallv` take them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VLayout {
    pub counts: Vec<usize>,
    pub displs: Vec<usize>,
}

impl VLayout {
    /// Blocks packed back to back: displacement i = sum of counts before i.
    pub fn packed(counts: Vec<usize>) -> VLayout {
        let mut displs = Vec::with_capacity(counts.len());
        let mut at = 0;
        for c in &counts {
            displs.push(at);
            at += c;
        }
        VLayout { counts, displs }
    }

    /// Elements the layout spans (max of displ + count).
    pub fn extent(&self) -> usize {
        self.counts
            .iter()
            .zip(&self.displs)
            .map(|(c, d)| c + d)
            .max()
            .unwrap_or(0)
    }
}
