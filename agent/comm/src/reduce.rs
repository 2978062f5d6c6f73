//! Reduction kernels: `dst[i] = dst[i] op src[i]` over byte buffers of one [`DataType`].
//!
//! Called by every reducing collective on each received segment, in place, without
//! allocation. Aligned buffers are reinterpreted as typed slices (tight loops the compiler
//! vectorises); unaligned ones fall back to unaligned loads. f16/bf16 are combined in f32 and
//! rounded back once per element. Integers wrap on overflow (as NCCL/MPI do). Every operator
//! is commutative bit for bit, so both sides of an exchange compute identical results.

use bytemuck::Pod;
use half::{bf16, f16};

use crate::api::{DataType, ReduceOp};

/// Combines `src` into `dst`. Lengths must be equal and a multiple of the element size (the
/// collectives check this before any traffic).
pub fn reduce_into(dtype: DataType, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    debug_assert_eq!(dst.len() % dtype.size(), 0);
    macro_rules! int {
        ($t:ty) => {
            match op {
                ReduceOp::Sum => apply::<$t>(dst, src, |a, b| a.wrapping_add(b)),
                ReduceOp::Prod => apply::<$t>(dst, src, |a, b| a.wrapping_mul(b)),
                ReduceOp::Min => apply::<$t>(dst, src, |a, b| a.min(b)),
                ReduceOp::Max => apply::<$t>(dst, src, |a, b| a.max(b)),
            }
        };
    }
    macro_rules! float {
        ($t:ty) => {
            match op {
                ReduceOp::Sum => apply::<$t>(dst, src, |a, b| a + b),
                ReduceOp::Prod => apply::<$t>(dst, src, |a, b| a * b),
                ReduceOp::Min => apply::<$t>(dst, src, |a, b| a.min(b)),
                ReduceOp::Max => apply::<$t>(dst, src, |a, b| a.max(b)),
            }
        };
    }
    macro_rules! half {
        ($t:ty) => {
            match op {
                ReduceOp::Sum => {
                    apply::<$t>(dst, src, |a, b| <$t>::from_f32(a.to_f32() + b.to_f32()))
                }
                ReduceOp::Prod => {
                    apply::<$t>(dst, src, |a, b| <$t>::from_f32(a.to_f32() * b.to_f32()))
                }
                ReduceOp::Min => {
                    apply::<$t>(dst, src, |a, b| <$t>::from_f32(a.to_f32().min(b.to_f32())))
                }
                ReduceOp::Max => {
                    apply::<$t>(dst, src, |a, b| <$t>::from_f32(a.to_f32().max(b.to_f32())))
                }
            }
        };
    }
    match dtype {
        DataType::F32 => float!(f32),
        DataType::F64 => float!(f64),
        DataType::F16 => half!(f16),
        DataType::BF16 => half!(bf16),
        DataType::I8 => int!(i8),
        DataType::U8 => int!(u8),
        DataType::I32 => int!(i32),
        DataType::I64 => int!(i64),
    }
}

#[inline]
fn apply<T: Pod>(dst: &mut [u8], src: &[u8], f: impl Fn(T, T) -> T) {
    let aligned = bytemuck::try_cast_slice::<u8, T>(dst).is_ok()
        && bytemuck::try_cast_slice::<u8, T>(src).is_ok();
    if aligned {
        let d: &mut [T] = bytemuck::cast_slice_mut(dst);
        let s: &[T] = bytemuck::cast_slice(src);
        for (a, b) in d.iter_mut().zip(s) {
            *a = f(*a, *b);
        }
    } else {
        let n = size_of::<T>();
        for (a, b) in dst.chunks_exact_mut(n).zip(src.chunks_exact(n)) {
            let x: T = bytemuck::pod_read_unaligned(a);
            let y: T = bytemuck::pod_read_unaligned(b);
            a.copy_from_slice(bytemuck::bytes_of(&f(x, y)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Pod>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn integer_ops_wrap_and_compare() {
        let mut d = bytes(&[100i8, -5, 7]);
        reduce_into(DataType::I8, ReduceOp::Sum, &mut d, &bytes(&[100i8, 3, -7]));
        assert_eq!(d, bytes(&[-56i8, -2, 0]));
        let mut d = bytes(&[3i64, -9]);
        reduce_into(DataType::I64, ReduceOp::Min, &mut d, &bytes(&[4i64, -10]));
        assert_eq!(d, bytes(&[3i64, -10]));
        let mut d = bytes(&[200u8, 2]);
        reduce_into(DataType::U8, ReduceOp::Prod, &mut d, &bytes(&[2u8, 3]));
        assert_eq!(d, bytes(&[144u8, 6]));
    }

    #[test]
    fn half_types_reduce_through_f32() {
        let mut d = bytes(&[f16::from_f32(1.5), f16::from_f32(-2.0)]);
        reduce_into(
            DataType::F16,
            ReduceOp::Max,
            &mut d,
            &bytes(&[f16::from_f32(1.0), f16::from_f32(4.0)]),
        );
        assert_eq!(d, bytes(&[f16::from_f32(1.5), f16::from_f32(4.0)]));
        let mut d = bytes(&[bf16::from_f32(3.0)]);
        reduce_into(
            DataType::BF16,
            ReduceOp::Prod,
            &mut d,
            &bytes(&[bf16::from_f32(0.5)]),
        );
        assert_eq!(d, bytes(&[bf16::from_f32(1.5)]));
    }

    #[test]
    fn unaligned_buffers_give_the_same_result_as_aligned_ones() {
        let a: Vec<f32> = (0..33).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..33).map(|i| 10.0 - i as f32).collect();
        let mut aligned = bytes(&a);
        reduce_into(DataType::F32, ReduceOp::Sum, &mut aligned, &bytes(&b));
        let mut store = vec![0u8; 1 + a.len() * 4];
        store[1..].copy_from_slice(&bytes(&a));
        let mut src = vec![0u8; 3 + b.len() * 4];
        src[3..].copy_from_slice(&bytes(&b));
        reduce_into(DataType::F32, ReduceOp::Sum, &mut store[1..], &src[3..]);
        assert_eq!(&store[1..], &aligned[..]);
    }
}
