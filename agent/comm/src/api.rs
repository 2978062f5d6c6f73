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

use std::future::Future;

mod error;
#[cfg(test)]
mod tests;
mod types;

pub use error::{CommError, ErrorContext};
pub use types::{Algorithm, DataType, ParseError, ReduceOp, VLayout};

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
