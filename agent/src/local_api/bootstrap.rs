//! What a worker needs to build its own communicator of an epoch ([`WorkerComm`]), derived
//! by the agent from what it already has for its control domain: the rank table's plan
//! (rank, world, rank 0's address), the group's secret and `spec.comm`.
//!
//! Why derived and not exchanged: HCCL's model is that the root rank makes the root info
//! and the caller hands it to every rank out of band. The agents' control domain already
//! meets without an exchange (rank 0's endpoint at a port known from the rank table, a
//! session id derived from the secret and the epoch, see `member::domain`), so the
//! workers' TCP communicator is placed the same way, [`WORKER_PORT_OFFSET`] ports above
//! the member's control port, and is the out-of-band channel: for `backend: hccl` rank 0's
//! worker calls `HcclGetRootInfo` and broadcasts the blob over it. No agent-to-agent
//! traffic is added, and no agent ever holds an HCCL root info it would have to keep in
//! step with a worker's process.
//!
//! The workers authenticate with a key derived from the group's secret, so a worker
//! never holds the key of the agents' domain. Pure functions; the member task calls
//! [`worker_comm`] when it publishes the assignment.

use std::net::SocketAddr;
use std::time::Duration;

use hcomm_comm::tcp::RootInfo;
use hcomm_crds::local_api::{WorkerBackend, WorkerComm};
use sha2::{Digest, Sha256};

/// A worker's endpoint listens this many ports above its member's control endpoint
/// (`comm_port_base + first device id`, at most 63 above the base), so the workers' ports
/// are `comm_port_base + 64 ..= comm_port_base + 127`.
pub const WORKER_PORT_OFFSET: u16 = 64;

/// The epoch's plan as the agent has it, for one member.
#[derive(Debug, Clone)]
pub struct WorkerPlan<'a> {
    pub namespace: &'a str,
    pub group: &'a str,
    pub epoch: u64,
    /// The member's control rank and the member count.
    pub rank: u32,
    pub world: u32,
    /// Rank 0's control endpoint (from the rank table).
    pub control_root: SocketAddr,
    /// This member's control endpoint (its data address and control port).
    pub control_own: SocketAddr,
}

/// Why no worker communicator can be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    #[error("worker port of control port {0} leaves the port range")]
    PortRange(u16),
}

fn shifted(a: SocketAddr) -> Result<SocketAddr, BootstrapError> {
    let port = a
        .port()
        .checked_add(WORKER_PORT_OFFSET)
        .ok_or(BootstrapError::PortRange(a.port()))?;
    Ok(SocketAddr::new(a.ip(), port))
}

fn derive(label: &[u8], secret: &[u8], namespace: &str, group: &str) -> Sha256 {
    let mut h = Sha256::new();
    h.update(label);
    h.update(secret);
    h.update(namespace.as_bytes());
    h.update([0]);
    h.update(group.as_bytes());
    h
}

/// The workers' key of a group (32 bytes, hex): what their endpoints authenticate with.
pub fn worker_key(secret: &[u8], namespace: &str, group: &str) -> String {
    hex::encode(derive(b"hcomm-worker-key-v1", secret, namespace, group).finalize())
}

/// The session id of the workers' rendezvous at `epoch`: differs from the agents' one.
pub fn worker_root_id(secret: &[u8], namespace: &str, group: &str, epoch: u64) -> [u8; 16] {
    let mut h = derive(b"hcomm-worker-root-v1", secret, namespace, group);
    h.update(epoch.to_le_bytes());
    let d = h.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    id
}

/// The worker's name for `spec.comm.backend`.
pub fn worker_backend(backend: hcomm_crds::Backend) -> WorkerBackend {
    match backend {
        hcomm_crds::Backend::Hccl => WorkerBackend::Hccl,
        hcomm_crds::Backend::Tcp => WorkerBackend::Tcp,
    }
}

/// The [`WorkerComm`] of one member at one epoch.
pub fn worker_comm(
    plan: &WorkerPlan<'_>,
    secret: &[u8],
    comm: &hcomm_crds::CommSpec,
) -> Result<WorkerComm, BootstrapError> {
    let root = RootInfo {
        addr: shifted(plan.control_root)?,
        id: worker_root_id(secret, plan.namespace, plan.group, plan.epoch),
    };
    let ms = |s: i32| {
        let d = Duration::from_secs(u64::try_from(s).unwrap_or(30));
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    };
    Ok(WorkerComm {
        epoch: plan.epoch,
        rank: plan.rank,
        world: plan.world,
        root_info: root.to_string(),
        bind: shifted(plan.control_own)?.to_string(),
        key_hex: worker_key(secret, plan.namespace, plan.group),
        backend: worker_backend(comm.backend),
        connect_timeout_ms: ms(comm.connect_timeout_seconds),
        op_timeout_ms: ms(comm.op_timeout_seconds),
        exec_timeout_ms: ms(comm.exec_timeout_seconds),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(rank: u32, own: &str, epoch: u64) -> WorkerPlan<'static> {
        WorkerPlan {
            namespace: "ns",
            group: "g",
            epoch,
            rank,
            world: 2,
            control_root: "10.0.0.1:29600".parse().unwrap(),
            control_own: own.parse().unwrap(),
        }
    }

    #[test]
    fn every_member_of_an_epoch_gets_the_same_root_at_rank_zeros_worker_port() {
        let spec = hcomm_crds::CommSpec::default();
        let a = worker_comm(&plan(0, "10.0.0.1:29600", 4), b"s", &spec).unwrap();
        let b = worker_comm(&plan(1, "10.0.0.2:29603", 4), b"s", &spec).unwrap();
        assert_eq!(a.root_info, b.root_info);
        let root: RootInfo = a.root_info.parse().unwrap();
        assert_eq!(root.addr.to_string(), "10.0.0.1:29664");
        assert_eq!(a.bind, "10.0.0.1:29664", "rank 0 serves the rendezvous");
        assert_eq!(b.bind, "10.0.0.2:29667");
        assert_eq!(a.key_hex, b.key_hex);
        assert_eq!(a.key_hex.len(), 64);
        assert_eq!((b.rank, b.world, b.epoch), (1, 2, 4));
    }

    #[test]
    fn epochs_groups_and_secrets_get_their_own_sessions_and_keys() {
        let spec = hcomm_crds::CommSpec::default();
        let e4 = worker_comm(&plan(0, "10.0.0.1:29600", 4), b"s", &spec).unwrap();
        let e5 = worker_comm(&plan(0, "10.0.0.1:29600", 5), b"s", &spec).unwrap();
        assert_ne!(e4.root_info, e5.root_info);
        assert_eq!(
            e4.key_hex, e5.key_hex,
            "the key is the group's, not the epoch's"
        );
        assert_ne!(worker_key(b"s", "ns", "g"), worker_key(b"t", "ns", "g"));
        assert_ne!(worker_key(b"s", "ns", "g"), worker_key(b"s", "ns", "h"));
        assert_ne!(
            worker_root_id(b"s", "ns", "g", 1),
            crate::member::domain::root_id(b"s", "ns", "g", 1),
            "the workers never meet in the agents' session"
        );
    }

    #[test]
    fn the_specs_timeouts_and_backend_reach_the_worker() {
        let spec = hcomm_crds::CommSpec {
            backend: hcomm_crds::Backend::Hccl,
            connect_timeout_seconds: 200,
            op_timeout_seconds: 40,
            exec_timeout_seconds: 900,
            ..Default::default()
        };
        let c = worker_comm(&plan(0, "10.0.0.1:29600", 1), b"s", &spec).unwrap();
        assert_eq!(c.backend, WorkerBackend::Hccl);
        assert_eq!(
            (c.connect_timeout_ms, c.op_timeout_ms, c.exec_timeout_ms),
            (200_000, 40_000, 900_000)
        );
        let far = plan(0, "10.0.0.1:65500", 1);
        assert_eq!(
            worker_comm(&far, b"s", &spec).unwrap_err(),
            BootstrapError::PortRange(65500)
        );
    }
}
