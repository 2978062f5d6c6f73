//! The backend-neutral collective API: data types, reduction operators, algorithm choice,
//! the [`Communicator`] trait and the one error type, [`CommError`].
//!
//! Both backends implement this: `tcp` (the portable engine in [`crate::tcp`]) and `hccl`
//! (the run-time-loaded Ascend library in `crate::hccl`). Buffers are host byte slices in the
//! machine's native byte order; the element type travels beside them as a [`DataType`]. Typed
//! wrappers live in [`CommunicatorExt`].
//!
//! Ordering contract (as in NCCL/HCCL): every rank of a communicator issues the same
//! collectives in the same order. Collectives on one communicator are serialised (send/recv
//! are not); use separate communicators (e.g. from `split`) for concurrent collectives.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

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

/// Where a failure happened: every network error carries one, so a message names the
/// operation, the epoch, the peer (rank and address) and the local interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorContext {
    /// What was being done, e.g. "all_reduce", "connect", "handshake", "rendezvous".
    pub op: String,
    pub epoch: u64,
    /// The peer's rank in the communicator, when known (None e.g. for the rendezvous root).
    pub peer_rank: Option<usize>,
    /// The peer's address, when known.
    pub peer_addr: Option<String>,
    /// Local interface and address, e.g. "eth1 (10.0.0.2:40123)".
    pub local: String,
}

impl fmt::Display for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "during {} at epoch {}", self.op, self.epoch)?;
        match (&self.peer_rank, &self.peer_addr) {
            (Some(r), Some(a)) => write!(f, ", peer rank {r} at {a}")?,
            (Some(r), None) => write!(f, ", peer rank {r}")?,
            (None, Some(a)) => write!(f, ", peer at {a}")?,
            (None, None) => {}
        }
        write!(f, ", local {}", self.local)
    }
}

/// The one error type of the collective engine. [`CommError::category`] gives a short fixed
/// name for metrics labels and Kubernetes Event reasons.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("timed out after {after:?} {ctx}")]
    Timeout {
        ctx: Box<ErrorContext>,
        after: Duration,
    },
    #[error("peer closed the connection {ctx}: {detail}")]
    PeerClosed {
        ctx: Box<ErrorContext>,
        detail: String,
    },
    #[error("peer unreachable {ctx}: {source}")]
    Unreachable {
        ctx: Box<ErrorContext>,
        #[source]
        source: std::io::Error,
    },
    #[error("network I/O failed {ctx}: {source}")]
    Io {
        ctx: Box<ErrorContext>,
        #[source]
        source: std::io::Error,
    },
    #[error("authentication failed {ctx}: {reason}")]
    Auth {
        ctx: Box<ErrorContext>,
        reason: String,
    },
    #[error(
        "stale epoch {ctx}: local epoch {local_epoch}, remote epoch {remote_epoch} (the older side is refused)"
    )]
    StaleEpoch {
        ctx: Box<ErrorContext>,
        local_epoch: u64,
        remote_epoch: u64,
    },
    #[error("protocol violation {ctx}: {reason}")]
    Protocol {
        ctx: Box<ErrorContext>,
        reason: String,
    },
    /// The communicator is unusable: an earlier operation failed here or on a peer.
    #[error("communicator aborted {ctx}: {reason}")]
    Aborted {
        ctx: Box<ErrorContext>,
        reason: String,
    },
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument { op: String, reason: String },
    /// The bind interface/address could not be resolved or bound.
    #[error("network interface {spec:?}: {reason}")]
    Interface { spec: String, reason: String },
    /// A run-time library (e.g. libhccl.so) is absent.
    #[error(
        "library {library} not found (searched {search_path}; ASCEND_HOME_PATH={ascend_home:?})"
    )]
    LibraryMissing {
        library: String,
        search_path: String,
        ascend_home: Option<String>,
    },
    /// A backend library returned an error code.
    #[error("{backend} {op} failed: {name} (code {code})")]
    Backend {
        backend: &'static str,
        op: String,
        code: i64,
        name: String,
    },
    #[error("{op} is not supported by the {backend} backend")]
    Unsupported { backend: &'static str, op: String },
}

impl CommError {
    /// Short fixed name for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            CommError::Timeout { .. } => "timeout",
            CommError::PeerClosed { .. } => "peer_closed",
            CommError::Unreachable { .. } => "unreachable",
            CommError::Io { .. } => "io",
            CommError::Auth { .. } => "auth",
            CommError::StaleEpoch { .. } => "stale_epoch",
            CommError::Protocol { .. } => "protocol",
            CommError::Aborted { .. } => "aborted",
            CommError::InvalidArgument { .. } => "invalid_argument",
            CommError::Interface { .. } => "interface",
            CommError::LibraryMissing { .. } => "library_missing",
            CommError::Backend { .. } => "backend",
            CommError::Unsupported { .. } => "unsupported",
        }
    }

    /// The network context, for the variants that have one.
    pub fn context(&self) -> Option<&ErrorContext> {
        match self {
            CommError::Timeout { ctx, .. }
            | CommError::PeerClosed { ctx, .. }
            | CommError::Unreachable { ctx, .. }
            | CommError::Io { ctx, .. }
            | CommError::Auth { ctx, .. }
            | CommError::StaleEpoch { ctx, .. }
            | CommError::Protocol { ctx, .. }
            | CommError::Aborted { ctx, .. } => Some(ctx),
            _ => None,
        }
    }

    /// The peer rank named by the error, if any.
    pub fn peer_rank(&self) -> Option<usize> {
        self.context().and_then(|c| c.peer_rank)
    }

    pub(crate) fn invalid(op: &str, reason: impl Into<String>) -> CommError {
        CommError::InvalidArgument {
            op: op.to_string(),
            reason: reason.into(),
        }
    }
}

/// A communicator: one rank's handle on a group at one epoch.
///
/// Buffer-size rules (violations are [`CommError::InvalidArgument`], checked before any
/// traffic): `all_reduce`/`reduce` buffers are whole elements; `all_gather` takes
/// `recv.len() == world_size * send.len()`; `reduce_scatter` takes
/// `send.len() == world_size * recv.len()`; `all_to_all` takes equal-size send and receive
/// buffers divisible by `world_size`. Zero-length buffers are valid everywhere.
///
/// The futures are `Send`; the trait is not object-safe (use generics or an enum of backends).
pub trait Communicator: Send + Sync {
    /// "tcp" or "hccl".
    fn backend(&self) -> &'static str;
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// The membership epoch this communicator was built for.
    fn epoch(&self) -> u64;

    /// In-place all-reduce: every rank ends with the element-wise reduction of all buffers,
    /// bit-identical on every rank.
    fn all_reduce(
        &self,
        buf: &mut [u8],
        dtype: DataType,
        op: ReduceOp,
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// Rank r's `send` lands at `recv[r * send.len()..]` on every rank.
    fn all_gather(
        &self,
        send: &[u8],
        recv: &mut [u8],
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// Reduces `send` (world_size blocks) across ranks; rank r receives block r in `recv`.
    fn reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: ReduceOp,
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// `root`'s buffer is copied into every rank's `buf` (same length everywhere).
    fn broadcast(
        &self,
        buf: &mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// In-place reduce to `root`: root's `buf` ends with the reduction; other ranks' buffers
    /// are left unchanged.
    fn reduce(
        &self,
        buf: &mut [u8],
        dtype: DataType,
        op: ReduceOp,
        root: usize,
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// Block j of rank i's `send` lands as block i of rank j's `recv` (equal blocks).
    fn all_to_all(
        &self,
        send: &[u8],
        recv: &mut [u8],
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// Variable-size all-to-all; layouts are in elements of `dtype`. `send_layout.counts[j]`
    /// on rank i must equal `recv_layout.counts[i]` on rank j.
    fn all_to_all_v(
        &self,
        send: &[u8],
        send_layout: &VLayout,
        recv: &mut [u8],
        recv_layout: &VLayout,
        dtype: DataType,
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// Point-to-point send of `buf` to `peer`, matched by (`peer`, `tag`) in order.
    fn send(
        &self,
        buf: &[u8],
        peer: usize,
        tag: u32,
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// Receives exactly `buf.len()` bytes sent by `peer` with `tag`.
    fn recv(
        &self,
        buf: &mut [u8],
        peer: usize,
        tag: u32,
    ) -> impl Future<Output = Result<(), CommError>> + Send;

    /// Returns once every rank has entered the barrier.
    fn barrier(&self) -> impl Future<Output = Result<(), CommError>> + Send;
}

/// Element types with a [`DataType`], for the typed wrappers of [`CommunicatorExt`].
pub trait Element: bytemuck::Pod + Send + Sync {
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => { $(impl Element for $t { const DTYPE: DataType = DataType::$d; })* };
}
element!(f32 => F32, f64 => F64, half::f16 => F16, half::bf16 => BF16, i8 => I8, u8 => U8,
         i32 => I32, i64 => I64);

/// Typed conveniences over any [`Communicator`].
pub trait CommunicatorExt: Communicator {
    /// All-reduce of a typed slice.
    fn all_reduce_typed<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> impl Future<Output = Result<(), CommError>> + Send {
        async move {
            self.all_reduce(bytemuck::cast_slice_mut(buf), T::DTYPE, op)
                .await
        }
    }

    /// Broadcast of a typed slice.
    fn broadcast_typed<T: Element>(
        &self,
        buf: &mut [T],
        root: usize,
    ) -> impl Future<Output = Result<(), CommError>> + Send {
        async move { self.broadcast(bytemuck::cast_slice_mut(buf), root).await }
    }
}

impl<C: Communicator + ?Sized> CommunicatorExt for C {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_type_sizes_match_the_element_types() {
        assert_eq!(DataType::F32.size(), 4);
        assert_eq!(DataType::F64.size(), 8);
        assert_eq!(DataType::F16.size(), 2);
        assert_eq!(DataType::BF16.size(), 2);
        assert_eq!(DataType::I8.size(), 1);
        assert_eq!(DataType::U8.size(), 1);
        assert_eq!(DataType::I32.size(), 4);
        assert_eq!(DataType::I64.size(), 8);
        for d in DataType::ALL {
            assert_eq!(d.name().parse::<DataType>().unwrap(), d);
        }
    }

    #[test]
    fn algorithm_parses_its_spellings_and_refuses_garbage() {
        assert_eq!("auto".parse::<Algorithm>().unwrap(), Algorithm::Auto);
        assert_eq!("Ring".parse::<Algorithm>().unwrap(), Algorithm::Ring);
        for s in ["tree", "rd", "recursive_doubling"] {
            assert_eq!(s.parse::<Algorithm>().unwrap(), Algorithm::Tree, "{s}");
        }
        for s in ["halving-doubling", "HD", "halving_doubling", "rabenseifner"] {
            assert_eq!(
                s.parse::<Algorithm>().unwrap(),
                Algorithm::HalvingDoubling,
                "{s}"
            );
        }
        let err = "rign".parse::<Algorithm>().unwrap_err();
        assert!(err.to_string().contains("auto|ring|tree"));
        assert_eq!(
            Algorithm::resolve(Some(Algorithm::Ring)).unwrap(),
            Algorithm::Ring
        );
    }

    #[test]
    fn errors_name_peer_address_interface_operation_and_epoch() {
        let e = CommError::Timeout {
            ctx: Box::new(ErrorContext {
                op: "all_reduce".into(),
                epoch: 7,
                peer_rank: Some(3),
                peer_addr: Some("10.0.0.4:4000".into()),
                local: "eth1 (10.0.0.2:4001)".into(),
            }),
            after: Duration::from_secs(2),
        };
        let s = e.to_string();
        for part in ["all_reduce", "epoch 7", "rank 3", "10.0.0.4:4000", "eth1"] {
            assert!(s.contains(part), "{s}");
        }
        assert_eq!(e.category(), "timeout");
        assert_eq!(e.peer_rank(), Some(3));
    }
}
