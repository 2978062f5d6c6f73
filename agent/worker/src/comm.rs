//! Building one epoch's communicator from the agent's placement ([`WorkerComm`]): the TCP
//! engine's communicator on the worker's endpoint (one endpoint for the worker's life, so
//! the links to peers that stay are reused), and for `backend: hccl` the HCCL
//! communicator beside it.
//!
//! HCCL's model (`HcclGetRootInfo` on the root rank, the blob handed to every rank out of
//! band, then `HcclCommInitRootInfoConfig` on all) is followed literally: the epoch's TCP
//! communicator is the out-of-band channel, rank 0 makes the root info through the comm
//! crate's HCCL backend and broadcasts it, and every rank starts the HCCL build in the
//! background (`EpochManager::prepare`). The switch to it is the engine's call.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hcomm_comm::Communicator;
use hcomm_comm::hccl::{EpochSource, types::HcclRootInfo};
use hcomm_comm::hccl::{HcclBackend, HcclBackendConfig, PendingEpoch};
use hcomm_comm::tcp::{BindSpec, CommConfig, Endpoint, EndpointConfig, RootInfo, TcpComm};
use hcomm_crds::local_api::{WorkerBackend, WorkerComm};

use crate::error::{Error, Result};

/// One epoch's communicator as the worker holds it.
#[derive(Debug)]
pub enum EpochComm {
    /// The TCP engine serves the collectives.
    Tcp(Arc<TcpComm>),
    /// HCCL serves them; the TCP communicator of the same epoch carried the root info
    /// (and stays for the worker's own small control exchanges). `pending` is the HCCL
    /// build until the switch installs it in the backend.
    Hccl {
        bootstrap: Arc<TcpComm>,
        pending: Option<PendingEpoch>,
    },
}

impl EpochComm {
    /// The epoch's TCP communicator (the data path on `tcp`, the bootstrap on `hccl`).
    pub fn tcp(&self) -> &Arc<TcpComm> {
        match self {
            EpochComm::Tcp(c) | EpochComm::Hccl { bootstrap: c, .. } => c,
        }
    }

    /// The backend serving the collectives.
    pub fn backend(&self) -> WorkerBackend {
        match self {
            EpochComm::Tcp(_) => WorkerBackend::Tcp,
            EpochComm::Hccl { .. } => WorkerBackend::Hccl,
        }
    }
}

/// What a placement says, checked: addresses parsed, key decoded, bounds non-zero.
#[derive(Debug, Clone)]
pub struct Placement {
    pub epoch: u64,
    pub rank: usize,
    pub world: usize,
    pub root: RootInfo,
    pub bind: SocketAddr,
    pub key: Vec<u8>,
    pub backend: WorkerBackend,
    pub connect_timeout: Duration,
    pub op_timeout: Duration,
}

impl Placement {
    /// Checks the agent's placement (pure).
    pub fn parse(c: &WorkerComm) -> Result<Placement> {
        let bad = |what: String| Error::BadPlacement(format!("epoch {}: {what}", c.epoch));
        let root: RootInfo = c
            .root_info
            .parse()
            .map_err(|e| bad(format!("root info: {e}")))?;
        let bind: SocketAddr = c
            .bind
            .parse()
            .map_err(|e| bad(format!("bind address {:?}: {e}", c.bind)))?;
        let key = hex::decode(&c.key_hex).map_err(|e| bad(format!("key: {e}")))?;
        if key.is_empty() {
            return Err(bad("no key".into()));
        }
        if c.world == 0 || c.rank >= c.world {
            return Err(bad(format!("rank {} of world {}", c.rank, c.world)));
        }
        let ms = |v: u64, default: u64| Duration::from_millis(if v == 0 { default } else { v });
        Ok(Placement {
            epoch: c.epoch,
            rank: c.rank as usize,
            world: c.world as usize,
            root,
            bind,
            key,
            backend: c.backend,
            connect_timeout: ms(c.connect_timeout_ms, 30_000),
            op_timeout: ms(c.op_timeout_ms, 30_000),
        })
    }
}

/// The worker's endpoint, bound once at the placement's address.
pub async fn endpoint(p: &Placement) -> Result<Arc<Endpoint>> {
    let mut cfg = EndpointConfig::new(BindSpec::Addr(p.bind.ip()), p.key.clone());
    cfg.port = p.bind.port();
    cfg.connect_timeout = p.connect_timeout;
    Ok(Endpoint::bind(cfg).await?)
}

/// The TCP communicator of the placement's epoch on `ep` (every rank of the epoch calls
/// this; bounded by twice the connect timeout, as the agents' own domain is).
pub async fn tcp(ep: Arc<Endpoint>, p: &Placement, group: &str) -> Result<Arc<TcpComm>> {
    let mut cfg = CommConfig::new(p.world, p.rank, p.root, p.epoch);
    cfg.group = format!("{group}/workers");
    cfg.init_timeout = p.connect_timeout * 2;
    cfg.op_timeout = p.op_timeout;
    Ok(Arc::new(TcpComm::init_on(ep, cfg).await?))
}

/// The HCCL backend of this process (one per process and device), created at the first
/// `hccl` epoch. Fails at once, with the backend's named error, where no Ascend runtime
/// can be loaded.
pub fn hccl_backend(group: &str, device: i32, p: &Placement) -> Result<HcclBackend> {
    let mut cfg = HcclBackendConfig::new(group, device);
    cfg.op_timeout = p.op_timeout;
    cfg.init_timeout = p.connect_timeout * 2;
    Ok(HcclBackend::create(cfg)?)
}

/// Rank 0 makes the HCCL root info and broadcasts it over the epoch's TCP communicator;
/// every rank then starts building the HCCL communicator in the background.
pub async fn hccl_prepare(
    backend: &HcclBackend,
    bootstrap: &TcpComm,
    p: &Placement,
) -> Result<PendingEpoch> {
    let mut blob = vec![0u8; hcomm_comm::hccl::types::HCCL_ROOT_INFO_BYTES];
    if p.rank == 0 {
        let root = backend.new_root_info()?;
        blob.copy_from_slice(root.as_bytes());
    }
    bootstrap.broadcast(&mut blob, 0).await?;
    let root = HcclRootInfo::from_bytes(&blob)?;
    let source = EpochSource::RootInfo {
        root,
        world: p.world as u32,
        rank: p.rank as u32,
    };
    Ok(backend.epochs().prepare(p.epoch, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement() -> WorkerComm {
        WorkerComm {
            epoch: 2,
            rank: 1,
            world: 2,
            root_info: RootInfo {
                addr: "127.0.0.1:29664".parse().unwrap(),
                id: [7; 16],
            }
            .to_string(),
            bind: "127.0.0.1:29665".into(),
            key_hex: "ab".repeat(32),
            backend: WorkerBackend::Tcp,
            connect_timeout_ms: 5_000,
            op_timeout_ms: 0,
            exec_timeout_ms: 0,
        }
    }

    #[test]
    fn a_placement_is_checked_before_anything_is_built() {
        let p = Placement::parse(&placement()).unwrap();
        assert_eq!((p.rank, p.world, p.epoch), (1, 2, 2));
        assert_eq!(p.connect_timeout, Duration::from_secs(5));
        assert_eq!(
            p.op_timeout,
            Duration::from_secs(30),
            "zero means the default"
        );
        for (field, broken) in [
            (
                "root info",
                WorkerComm {
                    root_info: "x".into(),
                    ..placement()
                },
            ),
            (
                "bind address",
                WorkerComm {
                    bind: "nowhere".into(),
                    ..placement()
                },
            ),
            (
                "key",
                WorkerComm {
                    key_hex: "zz".into(),
                    ..placement()
                },
            ),
            (
                "rank 2 of world 2",
                WorkerComm {
                    rank: 2,
                    ..placement()
                },
            ),
        ] {
            let e = Placement::parse(&broken).unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
