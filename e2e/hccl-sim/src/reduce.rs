//! Element-wise reduction of the ranks' contributions, for the `HcclDataType` /
//! `HcclReduceOp` values of hccl_types.h. Written independently of the product's reduction
//! kernels, so that a wrong product result cannot be confirmed by the same code.

/// Bytes per element of an `HcclDataType` the simulator reduces; `None` for types it does
/// not (INT128, the FP8 family): a collective on those answers `HCCL_E_NOT_SUPPORT`.
pub fn element_size(dtype: u32) -> Option<usize> {
    Some(match dtype {
        0 | 7 => 1,          // INT8, UINT8
        1 | 3 | 8 | 11 => 2, // INT16, FP16, UINT16, BFP16
        2 | 4 | 9 => 4,      // INT32, FP32, UINT32
        5 | 6 | 10 => 8,     // INT64, UINT64, FP64
        _ => return None,
    })
}

/// Whether `op` is an `HcclReduceOp` (SUM, PROD, MAX, MIN).
pub fn valid_op(op: u32) -> bool {
    op <= 3
}

macro_rules! fold {
    ($ty:ty, $acc:expr, $x:expr, $op:expr) => {{
        let a = <$ty>::from_le_bytes((&*$acc).try_into().expect("element width"));
        let b = <$ty>::from_le_bytes($x.try_into().expect("element width"));
        let r = match $op {
            0 => a + b,
            1 => a * b,
            2 => {
                if b > a {
                    b
                } else {
                    a
                }
            }
            _ => {
                if b < a {
                    b
                } else {
                    a
                }
            }
        };
        $acc.copy_from_slice(&r.to_le_bytes());
    }};
}

macro_rules! fold_int {
    ($ty:ty, $acc:expr, $x:expr, $op:expr) => {{
        let a = <$ty>::from_le_bytes((&*$acc).try_into().expect("element width"));
        let b = <$ty>::from_le_bytes($x.try_into().expect("element width"));
        let r = match $op {
            0 => a.wrapping_add(b),
            1 => a.wrapping_mul(b),
            2 => a.max(b),
            _ => a.min(b),
        };
        $acc.copy_from_slice(&r.to_le_bytes());
    }};
}

/// Reduces `parts` (equal lengths, rank order) into one vector.
pub fn reduce(parts: &[Vec<u8>], dtype: u32, op: u32) -> Vec<u8> {
    let size = element_size(dtype).expect("checked by the caller");
    let mut out = parts[0].clone();
    for part in &parts[1..] {
        for (acc, x) in out.chunks_exact_mut(size).zip(part.chunks_exact(size)) {
            match dtype {
                0 => fold_int!(i8, acc, x, op),
                7 => fold_int!(u8, acc, x, op),
                1 => fold_int!(i16, acc, x, op),
                8 => fold_int!(u16, acc, x, op),
                2 => fold_int!(i32, acc, x, op),
                9 => fold_int!(u32, acc, x, op),
                5 => fold_int!(i64, acc, x, op),
                6 => fold_int!(u64, acc, x, op),
                4 => fold!(f32, acc, x, op),
                10 => fold!(f64, acc, x, op),
                3 => fold!(half::f16, acc, x, op),
                _ => fold!(half::bf16, acc, x, op),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn sums_and_maxes_fp32_in_rank_order() {
        let parts = [f32s(&[1.0, -2.0]), f32s(&[2.5, 4.0]), f32s(&[0.5, 1.0])];
        assert_eq!(reduce(&parts, 4, 0), f32s(&[4.0, 3.0]));
        assert_eq!(reduce(&parts, 4, 2), f32s(&[2.5, 4.0]));
        assert_eq!(reduce(&parts, 4, 3), f32s(&[0.5, -2.0]));
    }

    #[test]
    fn integer_sums_wrap_like_the_device() {
        assert_eq!(reduce(&[vec![200u8], vec![100u8]], 7, 0), vec![44u8]);
        assert_eq!(element_size(12), None, "INT128 is not simulated");
    }
}
