//! The TCP backend: [`TcpComm`] on an [`Endpoint`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), hcomm_comm::CommError> {
//! use hcomm_comm::tcp::{BindSpec, CommConfig, Endpoint, EndpointConfig, TcpComm};
//! use hcomm_comm::{Communicator, DataType, ReduceOp};
//! let ep = Endpoint::bind(EndpointConfig::new(BindSpec::parse("eth0"), b"secret".to_vec())).await?;
//! let root = ep.create_root_info(); // rank 0 only; pass root.to_string() to the others
//! let comm = TcpComm::init_on(ep, CommConfig::new(2, 0, root, 1)).await?;
//! let mut buf = vec![0u8; 1024];
//! comm.all_reduce(&mut buf, DataType::F32, ReduceOp::Sum).await?;
//! # Ok(()) }
//! ```

mod collectives;
mod comm;
mod config;
mod elastic;
mod op;
mod ops;

pub use crate::bootstrap::RootInfo;
pub use crate::transport::{
    BindSpec, COMM_LIMITS, Endpoint, EndpointConfig, EndpointStats, Rejection,
};
pub use comm::{LinkInfo, TcpComm};
pub use config::CommConfig;
