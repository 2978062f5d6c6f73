//! HCCL's own C types, transcribed from the public CANN headers, with HCCL's own numbering.
//!
//! Sources (CANN open headers): `hicann/hcomm` `include/hccl/hccl_types.h` (`HcclResult`,
//! `HcclReduceOp`, `HcclDataType`, `HcclRootInfo`, `HcclCommConfig`) and `include/hccl/hccl_comm.h`
//! (`HcclCommConfigInit`, `HcclGetCommConfigCapability`); the same files ship in
//! `Ascend/pytorch` `third_party/hccl/inc/hccl/`. HCCL's numbering is *not* NCCL's
//! (`ncclFloat32` is 7, `HCCL_DATA_TYPE_FP32` is 4): never cast one to the other.
//!
//! Nothing here is `unsafe`; the FFI layer (`super::ffi`) passes these values as plain `u32`
//! (C enums) and `#[repr(C)]` structs whose layout is pinned by tests below.

/// `HcclDataType` (hccl_types.h). Values are the header's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HcclDataType {
    Int8 = 0,
    Int16 = 1,
    Int32 = 2,
    Fp16 = 3,
    Fp32 = 4,
    Int64 = 5,
    Uint64 = 6,
    Uint8 = 7,
    Uint16 = 8,
    Uint32 = 9,
    Fp64 = 10,
    Bfp16 = 11,
    Int128 = 12,
    Hif8 = 14,
    Fp8E4M3 = 15,
    Fp8E5M2 = 16,
    Fp8E8M0 = 17,
}

impl HcclDataType {
    /// Bytes per element, as HCCL counts them.
    pub fn size(self) -> usize {
        match self {
            Self::Int8
            | Self::Uint8
            | Self::Hif8
            | Self::Fp8E4M3
            | Self::Fp8E5M2
            | Self::Fp8E8M0 => 1,
            Self::Int16 | Self::Uint16 | Self::Fp16 | Self::Bfp16 => 2,
            Self::Int32 | Self::Uint32 | Self::Fp32 => 4,
            Self::Int64 | Self::Uint64 | Self::Fp64 => 8,
            Self::Int128 => 16,
        }
    }

    /// The raw C value passed across the FFI boundary.
    pub fn raw(self) -> u32 {
        self as u32
    }
}

/// `HcclReduceOp` (hccl_types.h). Values are the header's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HcclReduceOp {
    Sum = 0,
    Prod = 1,
    Max = 2,
    Min = 3,
}

impl HcclReduceOp {
    /// The raw C value passed across the FFI boundary.
    pub fn raw(self) -> u32 {
        self as u32
    }
}

/// `HCCL_SUCCESS` (hccl_types.h).
pub const HCCL_SUCCESS: i32 = 0;
/// `HCCL_E_AGAIN` (hccl_types.h): "try again", returned e.g. by `HcclCommDestroy` while the
/// communicator still has work in flight.
pub const HCCL_E_AGAIN: i32 = 20;

/// The header's name for an `HcclResult` value (used in errors when `HcclGetErrorString` is
/// absent from the loaded CANN release).
pub fn hccl_result_name(code: i32) -> &'static str {
    match code {
        0 => "HCCL_SUCCESS",
        1 => "HCCL_E_PARA",
        2 => "HCCL_E_PTR",
        3 => "HCCL_E_MEMORY",
        4 => "HCCL_E_INTERNAL",
        5 => "HCCL_E_NOT_SUPPORT",
        6 => "HCCL_E_NOT_FOUND",
        7 => "HCCL_E_UNAVAIL",
        8 => "HCCL_E_SYSCALL",
        9 => "HCCL_E_TIMEOUT",
        10 => "HCCL_E_OPEN_FILE_FAILURE",
        11 => "HCCL_E_TCP_CONNECT",
        12 => "HCCL_E_ROCE_CONNECT",
        13 => "HCCL_E_TCP_TRANSFER",
        14 => "HCCL_E_ROCE_TRANSFER",
        15 => "HCCL_E_RUNTIME",
        16 => "HCCL_E_DRV",
        17 => "HCCL_E_PROFILING",
        18 => "HCCL_E_CCE",
        19 => "HCCL_E_NETWORK",
        20 => "HCCL_E_AGAIN",
        21 => "HCCL_E_REMOTE",
        22 => "HCCL_E_SUSPENDING",
        23 => "HCCL_E_OPRETRY_FAIL",
        24 => "HCCL_E_OOM",
        1041 => "HCCL_E_IN_STATUS",
        _ => "HCCL_E_UNKNOWN",
    }
}

/// `ACL_SUCCESS` (acl_base.h).
pub const ACL_SUCCESS: i32 = 0;
/// `ACL_ERROR_REPEAT_INITIALIZE` (acl_base.h): `aclInit` was already called in this process
/// (e.g. by the inference engine); not an error for us.
pub const ACL_ERROR_REPEAT_INITIALIZE: i32 = 100_002;
/// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` (rt_error_codes.h): `aclrtSynchronizeStreamWithTimeout`
/// ran out of time while the stream's work was still running.
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: i32 = 507_046;
/// `aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST` (acl_rt.h).
pub const ACL_MEM_MALLOC_HUGE_FIRST: u32 = 0;
/// `aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE` (acl_rt.h).
pub const ACL_MEMCPY_HOST_TO_DEVICE: u32 = 1;
/// `aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST` (acl_rt.h).
pub const ACL_MEMCPY_DEVICE_TO_HOST: u32 = 2;

/// `HCCL_ROOT_INFO_BYTES` (hccl_types.h).
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// `HcclRootInfo`: an opaque 4108-byte blob made by `HcclGetRootInfo` on the root rank and
/// handed to every rank out of band (for hcomm: through the agent, like the TCP backend's root
/// info).
#[derive(Clone, PartialEq, Eq)]
#[repr(C)]
pub struct HcclRootInfo {
    internal: [u8; HCCL_ROOT_INFO_BYTES],
}

impl HcclRootInfo {
    /// All zeroes: the buffer `HcclGetRootInfo` fills.
    pub fn zeroed() -> Box<Self> {
        Box::new(Self {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        })
    }

    /// Rebuild a root info received out of band. The length must be exactly 4108 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Box<Self>, super::HcclError> {
        let internal: [u8; HCCL_ROOT_INFO_BYTES] = bytes
            .try_into()
            .map_err(|_| super::HcclError::BadRootInfo { len: bytes.len() })?;
        Ok(Box::new(Self { internal }))
    }

    /// The bytes to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8] {
        &self.internal
    }
}

impl std::fmt::Debug for HcclRootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HcclRootInfo({} bytes)", self.internal.len())
    }
}

/// `HCCL_COMM_CONFIG_MAGIC_WORD` (hccl_types.h).
pub const HCCL_COMM_CONFIG_MAGIC_WORD: u32 = 0xf0f0_f0f0;
/// `HCCL_COMM_CONFIG_VERSION` (hccl_types.h) of the layout below.
pub const HCCL_COMM_CONFIG_VERSION: u32 = 10;
/// `HcclCommConfigCapability::HCCL_COMM_CONFIG_BUFFER_SIZE` (hccl_types.h).
pub const HCCL_COMM_CONFIG_BUFFER_SIZE: u32 = 0;
/// `HcclCommConfigCapability::HCCL_COMM_CONFIG_COMM_NAME` (hccl_types.h).
pub const HCCL_COMM_CONFIG_COMM_NAME: u32 = 2;
/// `HcclCommConfigCapability::HCCL_COMM_CONFIG_EXEC_TIMEOUT` (hccl_types.h).
pub const HCCL_COMM_CONFIG_EXEC_TIMEOUT: u32 = 8;

const COMM_NAME_MAX_LENGTH: usize = 128;
const NOT_SET: u32 = 0xffff_ffff;

/// `HcclCommConfig` (hccl_types.h, config version 10). Field order and widths follow the
/// header; C alignment rules give a 2240-byte struct (pinned by a test). The first 24
/// `reserved` bytes carry `{ size_t size; uint32_t magic; uint32_t version; uint64_t reserved }`
/// so that older HCCL releases read only the fields of the version they know: fields are
/// only ever appended.
#[repr(C)]
pub struct HcclCommConfig {
    reserved: [u8; 24],
    hccl_buffer_size: u32,
    hccl_deterministic: u32,
    hccl_comm_name: [u8; COMM_NAME_MAX_LENGTH],
    hccl_udi: [u8; 128],
    hccl_op_expansion_mode: u32,
    hccl_rdma_traffic_class: u32,
    hccl_rdma_service_level: u32,
    hccl_world_rank_id: u32,
    hccl_job_id: u64,
    acl_graph_zero_copy_enable: u8,
    hccl_exec_timeout: i32,
    hccl_algo: [u8; 1600],
    hccl_retry_enable: [u8; 50],
    hccl_retry_params: [u8; 128],
    hccl_buffer_name: [u8; 128],
    hccl_qos: u32,
    hccl_sym_win_max_mem_size_per_rank: u64,
}

impl HcclCommConfig {
    /// The defaults `HcclCommConfigInit` (an inline function in hccl_comm.h, so not a symbol
    /// we can load) writes: header word, "not set" for every tunable.
    pub fn new() -> Box<Self> {
        let mut reserved = [0u8; 24];
        reserved[0..8].copy_from_slice(&(std::mem::size_of::<Self>() as u64).to_ne_bytes());
        reserved[8..12].copy_from_slice(&HCCL_COMM_CONFIG_MAGIC_WORD.to_ne_bytes());
        reserved[12..16].copy_from_slice(&HCCL_COMM_CONFIG_VERSION.to_ne_bytes());
        Box::new(Self {
            reserved,
            hccl_buffer_size: NOT_SET,
            hccl_deterministic: NOT_SET,
            hccl_comm_name: [0; COMM_NAME_MAX_LENGTH],
            hccl_udi: [0; 128],
            hccl_op_expansion_mode: 0,
            hccl_rdma_traffic_class: NOT_SET,
            hccl_rdma_service_level: NOT_SET,
            hccl_world_rank_id: 0,
            hccl_job_id: 0,
            acl_graph_zero_copy_enable: 0,
            hccl_exec_timeout: -1, // HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET (0xffffffff as int32)
            hccl_algo: [0; 1600],
            hccl_retry_enable: [0; 50],
            hccl_retry_params: [0; 128],
            hccl_buffer_name: [0; 128],
            hccl_qos: NOT_SET,
            hccl_sym_win_max_mem_size_per_rank: 16, // HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE
        })
    }

    /// Name the communicator (shows up in HCCL's logs and in `HcclGetCommName`); hcomm uses
    /// `<group>-e<epoch>` so that two epochs alive at once never share a name. Truncated to
    /// 127 bytes plus the terminating NUL.
    pub fn with_comm_name(mut self: Box<Self>, name: &str) -> Box<Self> {
        let bytes = name.as_bytes();
        let n = bytes.len().min(COMM_NAME_MAX_LENGTH - 1);
        self.hccl_comm_name = [0; COMM_NAME_MAX_LENGTH];
        self.hccl_comm_name[..n].copy_from_slice(&bytes[..n]);
        self
    }

    /// HCCL buffer size in MB (`hcclBufferSize`; `HCCL_BUFFSIZE` for this communicator).
    pub fn with_buffer_size_mb(mut self: Box<Self>, mb: u32) -> Box<Self> {
        self.hccl_buffer_size = mb;
        self
    }

    /// Execution timeout in seconds (`hcclExecTimeOut`).
    pub fn with_exec_timeout_secs(mut self: Box<Self>, secs: i32) -> Box<Self> {
        self.hccl_exec_timeout = secs;
        self
    }

    /// The communicator name as set, without the NUL padding.
    pub fn comm_name(&self) -> &str {
        let end = self
            .hccl_comm_name
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(COMM_NAME_MAX_LENGTH);
        std::str::from_utf8(&self.hccl_comm_name[..end]).unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn root_info_is_4108_bytes_like_the_header() {
        assert_eq!(size_of::<HcclRootInfo>(), 4108);
        let info = HcclRootInfo::zeroed();
        let back = HcclRootInfo::from_bytes(info.as_bytes()).unwrap();
        assert_eq!(*back, *info);
        assert!(HcclRootInfo::from_bytes(&[0u8; 128]).is_err());
    }

    #[test]
    fn comm_config_layout_matches_c_alignment_of_the_header() {
        // Offsets computed by hand from hccl_types.h with C's natural alignment.
        assert_eq!(offset_of!(HcclCommConfig, hccl_buffer_size), 24);
        assert_eq!(offset_of!(HcclCommConfig, hccl_deterministic), 28);
        assert_eq!(offset_of!(HcclCommConfig, hccl_comm_name), 32);
        assert_eq!(offset_of!(HcclCommConfig, hccl_udi), 160);
        assert_eq!(offset_of!(HcclCommConfig, hccl_op_expansion_mode), 288);
        assert_eq!(offset_of!(HcclCommConfig, hccl_world_rank_id), 300);
        assert_eq!(offset_of!(HcclCommConfig, hccl_job_id), 304);
        assert_eq!(offset_of!(HcclCommConfig, acl_graph_zero_copy_enable), 312);
        assert_eq!(offset_of!(HcclCommConfig, hccl_exec_timeout), 316);
        assert_eq!(offset_of!(HcclCommConfig, hccl_algo), 320);
        assert_eq!(offset_of!(HcclCommConfig, hccl_retry_enable), 1920);
        assert_eq!(offset_of!(HcclCommConfig, hccl_retry_params), 1970);
        assert_eq!(offset_of!(HcclCommConfig, hccl_buffer_name), 2098);
        assert_eq!(offset_of!(HcclCommConfig, hccl_qos), 2228);
        assert_eq!(
            offset_of!(HcclCommConfig, hccl_sym_win_max_mem_size_per_rank),
            2232
        );
        assert_eq!(size_of::<HcclCommConfig>(), 2240);
    }

    #[test]
    fn comm_config_init_writes_size_magic_and_version_like_hccl_comm_config_init() {
        let cfg = HcclCommConfig::new().with_comm_name("pool-a-e7");
        assert_eq!(
            u64::from_ne_bytes(cfg.reserved[0..8].try_into().unwrap()),
            2240
        );
        assert_eq!(
            u32::from_ne_bytes(cfg.reserved[8..12].try_into().unwrap()),
            0xf0f0_f0f0
        );
        assert_eq!(
            u32::from_ne_bytes(cfg.reserved[12..16].try_into().unwrap()),
            10
        );
        assert_eq!(cfg.hccl_buffer_size, 0xffff_ffff);
        assert_eq!(cfg.hccl_exec_timeout, -1);
        assert_eq!(cfg.comm_name(), "pool-a-e7");
        let long = HcclCommConfig::new().with_comm_name(&"x".repeat(300));
        assert_eq!(long.comm_name().len(), 127);
    }

    #[test]
    fn hccl_enums_keep_the_header_numbering_not_nccls() {
        // (ours, value in hccl_types.h, value of the same type in nccl.h for contrast)
        let table = [
            (HcclDataType::Int8, 0, 0),
            (HcclDataType::Int32, 2, 2),
            (HcclDataType::Fp16, 3, 6),
            (HcclDataType::Fp32, 4, 7),
            (HcclDataType::Int64, 5, 4),
            (HcclDataType::Uint8, 7, 1),
            (HcclDataType::Fp64, 10, 8),
            (HcclDataType::Bfp16, 11, 9),
        ];
        for (ty, hccl, _nccl) in table {
            assert_eq!(ty.raw(), hccl, "{ty:?}");
        }
        assert_eq!(HcclReduceOp::Sum.raw(), 0);
        assert_eq!(HcclReduceOp::Prod.raw(), 1);
        assert_eq!(HcclReduceOp::Max.raw(), 2);
        assert_eq!(HcclReduceOp::Min.raw(), 3);
        assert_eq!(hccl_result_name(HCCL_E_AGAIN), "HCCL_E_AGAIN");
        assert_eq!(hccl_result_name(1041), "HCCL_E_IN_STATUS");
    }
}
