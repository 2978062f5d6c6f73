//! What a rank needs to initialise a TCP communicator, besides its endpoint.

use std::time::Duration;

use crate::api::{Algorithm, CommError};
use crate::bootstrap::RootInfo;

/// Initialisation parameters of one rank (the endpoint — interface, secret, connect timeout
/// — is configured separately in [`crate::tcp::EndpointConfig`], because it outlives epochs).
#[derive(Debug, Clone)]
pub struct CommConfig {
    pub world_size: usize,
    pub rank: usize,
    /// Bootstrap handle from the root's [`crate::tcp::Endpoint::create_root_info`].
    pub root: RootInfo,
    pub epoch: u64,
    /// Group name for logs and spans.
    pub group: String,
    /// Explicit algorithm; None reads `HCOMM_ALGO` (default auto).
    pub algorithm: Option<Algorithm>,
    /// Deadline for the rendezvous and the full mesh (all ranks must show up in time).
    pub init_timeout: Duration,
    /// Deadline of each operation.
    pub op_timeout: Duration,
    /// Pipeline segment size of ring/chain schedules.
    pub segment_bytes: usize,
}

impl CommConfig {
    pub fn new(world_size: usize, rank: usize, root: RootInfo, epoch: u64) -> CommConfig {
        CommConfig {
            world_size,
            rank,
            root,
            epoch,
            group: "hcomm".into(),
            algorithm: None,
            init_timeout: Duration::from_secs(60),
            op_timeout: Duration::from_secs(60),
            segment_bytes: 512 << 10,
        }
    }

    pub fn validate(&self) -> Result<(), CommError> {
        if self.world_size == 0 || self.world_size > crate::bootstrap::MAX_WORLD {
            return Err(CommError::invalid(
                "init",
                format!("world size {} out of range", self.world_size),
            ));
        }
        if self.rank >= self.world_size {
            return Err(CommError::invalid(
                "init",
                format!(
                    "rank {} not below world size {}",
                    self.rank, self.world_size
                ),
            ));
        }
        if self.segment_bytes < 8 || self.segment_bytes > crate::frame::DEFAULT_MAX_FRAME {
            return Err(CommError::invalid(
                "init",
                format!("segment size {} out of range", self.segment_bytes),
            ));
        }
        Ok(())
    }
}
