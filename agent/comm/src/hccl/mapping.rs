//! Our [`DataType`] / [`ReduceOp`] to HCCL's enums, and the HCCL errors as [`CommError`]s.
//!
//! Every one of our eight data types has an `HcclDataType`, but not every HCCL operator takes
//! every type: hccl.h documents `HcclAllReduce`, `HcclReduceScatter` and `HcclReduce` as taking
//! "int8, int16, uint64, int32, int64, float16, float32, float64, bfp16" — no `uint8`. So a
//! *reduction* over `u8` is refused here with a clear error instead of an opaque
//! `HCCL_E_PARA` from the device; data movement (all-gather, broadcast, all-to-all, send/recv)
//! takes `u8` fine.

use crate::api::{CommError, DataType, ErrorContext, ReduceOp};

use super::HcclError;
use super::types::{HcclDataType, HcclReduceOp};

/// The `HcclDataType` of one of our data types.
pub fn hccl_data_type(dtype: DataType) -> HcclDataType {
    match dtype {
        DataType::F32 => HcclDataType::Fp32,
        DataType::F64 => HcclDataType::Fp64,
        DataType::F16 => HcclDataType::Fp16,
        DataType::BF16 => HcclDataType::Bfp16,
        DataType::I8 => HcclDataType::Int8,
        DataType::U8 => HcclDataType::Uint8,
        DataType::I32 => HcclDataType::Int32,
        DataType::I64 => HcclDataType::Int64,
    }
}

/// The `HcclReduceOp` of one of our reduce ops.
pub fn hccl_reduce_op(op: ReduceOp) -> HcclReduceOp {
    match op {
        ReduceOp::Sum => HcclReduceOp::Sum,
        ReduceOp::Prod => HcclReduceOp::Prod,
        ReduceOp::Min => HcclReduceOp::Min,
        ReduceOp::Max => HcclReduceOp::Max,
    }
}

/// The `HcclDataType` for a reducing operator (`HcclAllReduce`, `HcclReduceScatter`,
/// `HcclReduce`), refusing the types hccl.h does not list for them.
pub(crate) fn reduction_data_type(dtype: DataType, call: &str) -> Result<HcclDataType, HcclError> {
    match dtype {
        DataType::U8 => Err(HcclError::UnsupportedDataType {
            ours: format!(
                "{dtype} in {call} (hccl.h lists no uint8 for reductions; use i8 or i32)"
            ),
        }),
        other => Ok(hccl_data_type(other)),
    }
}

impl HcclError {
    /// As the backend-neutral error, with `op`, `epoch` and the device as context where the
    /// variant carries one.
    pub fn into_comm_error(self, op: &str, epoch: u64, device: i32) -> CommError {
        let ctx = || {
            Box::new(ErrorContext {
                op: op.to_string(),
                epoch,
                peer_rank: None,
                peer_addr: None,
                local: format!("NPU device {device}"),
            })
        };
        match self {
            HcclError::LibraryNotFound {
                library,
                searched,
                ascend_home,
                last_error,
            } => CommError::LibraryMissing {
                library: library.to_string(),
                search_path: format!("{} (last error: {last_error})", searched.join(", ")),
                ascend_home,
            },
            HcclError::Unavailable { function, .. } => CommError::Unsupported {
                backend: "hccl",
                op: function.into(),
            },
            HcclError::Hccl {
                call,
                code,
                name,
                message,
            } => CommError::Backend {
                backend: "hccl",
                op: call.into(),
                code: code.into(),
                name: format!("{name}: {message}"),
            },
            HcclError::Acl {
                call,
                code,
                message,
            } => CommError::Backend {
                backend: "hccl",
                op: call.into(),
                code: code.into(),
                name: message.unwrap_or_else(|| "aclError".into()),
            },
            HcclError::Timeout { waited, .. } => CommError::Timeout {
                ctx: ctx(),
                after: waited,
            },
            e @ (HcclError::UnsupportedDataType { .. }
            | HcclError::UnsupportedReduceOp { .. }
            | HcclError::BadRootInfo { .. }
            | HcclError::InvalidArgument(_)) => CommError::InvalidArgument {
                op: op.into(),
                reason: e.to_string(),
            },
            e @ (HcclError::MissingSymbols { .. }
            | HcclError::BuilderPanicked { .. }
            | HcclError::OpAborted { .. }
            | HcclError::CommunicatorAborted
            | HcclError::AsyncError { .. }
            | HcclError::MemoryBudgetExceeded { .. }) => CommError::Aborted {
                ctx: ctx(),
                reason: e.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (ours, the value of the HCCL enum constant in hccl_types.h, its name there).
    const DATA_TYPES: [(DataType, u32, &str); 8] = [
        (DataType::I8, 0, "HCCL_DATA_TYPE_INT8"),
        (DataType::I32, 2, "HCCL_DATA_TYPE_INT32"),
        (DataType::F16, 3, "HCCL_DATA_TYPE_FP16"),
        (DataType::F32, 4, "HCCL_DATA_TYPE_FP32"),
        (DataType::I64, 5, "HCCL_DATA_TYPE_INT64"),
        (DataType::U8, 7, "HCCL_DATA_TYPE_UINT8"),
        (DataType::F64, 10, "HCCL_DATA_TYPE_FP64"),
        (DataType::BF16, 11, "HCCL_DATA_TYPE_BFP16"),
    ];

    #[test]
    fn every_data_type_maps_to_the_hccl_header_value() {
        for (ours, value, name) in DATA_TYPES {
            let h = hccl_data_type(ours);
            assert_eq!(h.raw(), value, "{ours} should be {name}");
            assert_eq!(h.size(), ours.size(), "{ours} element size");
        }
        // The table covers all of ours.
        assert!(
            DataType::ALL
                .iter()
                .all(|d| DATA_TYPES.iter().any(|(o, _, _)| o == d))
        );
    }

    #[test]
    fn every_reduce_op_maps_to_the_hccl_header_value() {
        // HCCL_REDUCE_SUM = 0, HCCL_REDUCE_PROD = 1, HCCL_REDUCE_MAX = 2, HCCL_REDUCE_MIN = 3.
        let table = [
            (ReduceOp::Sum, 0),
            (ReduceOp::Prod, 1),
            (ReduceOp::Max, 2),
            (ReduceOp::Min, 3),
        ];
        for (ours, value) in table {
            assert_eq!(hccl_reduce_op(ours).raw(), value, "{ours}");
        }
    }

    #[test]
    fn reductions_over_u8_are_refused_with_a_clear_error_but_other_types_pass() {
        let err = reduction_data_type(DataType::U8, "HcclAllReduce").unwrap_err();
        assert!(err.to_string().contains("uint8"), "{err}");
        let comm = err.into_comm_error("all_reduce", 3, 0);
        assert_eq!(comm.category(), "invalid_argument");
        for d in DataType::ALL.into_iter().filter(|d| *d != DataType::U8) {
            assert_eq!(
                reduction_data_type(d, "HcclAllReduce").unwrap(),
                hccl_data_type(d)
            );
        }
    }

    #[test]
    fn a_missing_library_becomes_library_missing_with_paths_and_ascend_home() {
        let e = HcclError::LibraryNotFound {
            library: "libhccl.so",
            searched: vec!["/a/libhccl.so".into(), "libhccl.so".into()],
            ascend_home: Some("/a".into()),
            last_error: "cannot open".into(),
        };
        let c = e.into_comm_error("create", 0, 0);
        let s = c.to_string();
        assert_eq!(c.category(), "library_missing");
        assert!(
            s.contains("libhccl.so") && s.contains("/a/libhccl.so") && s.contains("\"/a\""),
            "{s}"
        );
    }
}
