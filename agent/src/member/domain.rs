//! A member's place in its group's control domain on the TCP engine: one endpoint for the
//! member's life (its links are pooled and reused by every epoch), and one communicator per
//! epoch, built make-before-break — the next epoch's communicator is initialised beside the
//! serving one and replaces it only once it is up. Counters track created/destroyed/open.
//!
//! The rendezvous needs no out-of-band exchange: the root is the endpoint of rank 0 (from
//! the rank table, see [`super::ranktable`]) and the session id is derived from the group
//! secret, the group and the epoch ([`root_id`]).
//!
//! The group's `spec.comm` reaches the engine through [`DomainConfig::from_comm`]: the
//! connect and op timeouts, and the algorithm mapped by [`engine_algorithm`].

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hcomm_comm::CommError;
use hcomm_comm::tcp::{BindSpec, CommConfig, Endpoint, EndpointConfig, RootInfo, TcpComm};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::ranktable::ControlPlan;
use crate::metrics::Metrics;

/// The rendezvous session id of (group, epoch).
pub fn root_id(secret: &[u8], namespace: &str, group: &str, epoch: u64) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"hcomm-root");
    h.update(secret);
    h.update(namespace.as_bytes());
    h.update([0]);
    h.update(group.as_bytes());
    h.update(epoch.to_le_bytes());
    let d = h.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    id
}

/// Timeouts of the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainTimeouts {
    pub connect: Duration,
    pub init: Duration,
    pub op: Duration,
}

/// The CRD's `spec.comm.algorithm` as the engine's algorithm (pure). One arm per CRD
/// variant: a variant added to the CRD must be mapped here before the agent builds.
pub fn engine_algorithm(a: hcomm_crds::Algorithm) -> hcomm_comm::Algorithm {
    match a {
        hcomm_crds::Algorithm::Auto => hcomm_comm::Algorithm::Auto,
        hcomm_crds::Algorithm::Ring => hcomm_comm::Algorithm::Ring,
        hcomm_crds::Algorithm::Tree => hcomm_comm::Algorithm::Tree,
        hcomm_crds::Algorithm::HalvingDoubling => hcomm_comm::Algorithm::HalvingDoubling,
    }
}

/// How the member's domain is built, from the group's `spec.comm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainConfig {
    pub timeouts: DomainTimeouts,
    /// Every communicator of the domain runs its collectives with this algorithm; all
    /// members read it from the same spec, so their operation tags agree.
    pub algorithm: hcomm_comm::Algorithm,
}

impl DomainConfig {
    /// `connectTimeoutSeconds` bounds each connection and (twice over) the rendezvous,
    /// `opTimeoutSeconds` each collective; a value that is not positive falls back to 30 s
    /// (the CRD's schema already refuses those).
    pub fn from_comm(comm: &hcomm_crds::CommSpec) -> DomainConfig {
        let secs = |s: i32| Duration::from_secs(u64::try_from(s).unwrap_or(30));
        DomainConfig {
            timeouts: DomainTimeouts {
                connect: secs(comm.connect_timeout_seconds),
                init: secs(comm.connect_timeout_seconds) * 2,
                op: secs(comm.op_timeout_seconds),
            },
            algorithm: engine_algorithm(comm.algorithm),
        }
    }
}

/// One member's endpoint and current communicator.
pub struct Domain {
    namespace: String,
    group: String,
    secret: Vec<u8>,
    bind_ip: IpAddr,
    config: DomainConfig,
    metrics: Metrics,
    ep: Option<Arc<Endpoint>>,
    current: watch::Sender<Option<Arc<TcpComm>>>,
}

impl Domain {
    pub fn new(
        namespace: &str,
        group: &str,
        secret: Vec<u8>,
        bind_ip: IpAddr,
        config: DomainConfig,
        metrics: Metrics,
    ) -> Domain {
        Domain {
            namespace: namespace.into(),
            group: group.into(),
            secret,
            bind_ip,
            config,
            metrics,
            ep: None,
            current: watch::channel(None).0,
        }
    }

    /// The serving communicator, as a watch (the health loop follows it).
    pub fn watch(&self) -> watch::Receiver<Option<Arc<TcpComm>>> {
        self.current.subscribe()
    }

    /// The serving communicator's epoch.
    pub fn epoch(&self) -> Option<u64> {
        self.current
            .borrow()
            .as_ref()
            .map(|c| hcomm_comm::Communicator::epoch(c.as_ref()))
    }

    async fn endpoint(&mut self, port: u16) -> Result<Arc<Endpoint>, CommError> {
        if let Some(ep) = &self.ep {
            return Ok(ep.clone());
        }
        let mut cfg = EndpointConfig::new(BindSpec::Addr(self.bind_ip), self.secret.clone());
        cfg.port = port;
        cfg.connect_timeout = self.config.timeouts.connect;
        cfg.socket_buffer = None;
        cfg.admission = Some(self.metrics.listeners.comm.clone());
        let ep = Endpoint::bind(cfg).await?;
        self.ep = Some(ep.clone());
        Ok(ep)
    }

    /// Builds the communicator of `epoch` beside the serving one, then switches to it and
    /// destroys the old one.
    pub async fn join(&mut self, plan: &ControlPlan, epoch: u64) -> Result<(), CommError> {
        let ep = self.endpoint(plan.own_port).await?;
        let root = RootInfo {
            addr: plan.root,
            id: root_id(&self.secret, &self.namespace, &self.group, epoch),
        };
        let mut cfg = CommConfig::new(plan.world, plan.rank, root, epoch);
        cfg.group = format!("{}/{}", self.namespace, self.group);
        cfg.init_timeout = self.config.timeouts.init;
        cfg.op_timeout = self.config.timeouts.op;
        cfg.algorithm = Some(self.config.algorithm);
        let next = TcpComm::init_on(ep, cfg).await?;
        self.metrics.comm_created.inc();
        self.metrics.comm_open.inc();
        let old = self.current.send_replace(Some(Arc::new(next)));
        if old.is_some() {
            self.destroyed();
        }
        Ok(())
    }

    fn destroyed(&self) {
        self.metrics.comm_destroyed.inc();
        self.metrics.comm_open.dec();
    }

    /// The group's secret (the worker placement derives its own key from it).
    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// Leaves: destroys the communicator and closes the endpoint's links.
    pub fn leave(&mut self) {
        if self.current.send_replace(None).is_some() {
            self.destroyed();
        }
        self.ep = None;
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_comm::{Communicator, DataType, ReduceOp};

    #[test]
    fn session_ids_differ_by_epoch_group_and_secret() {
        let a = root_id(b"s", "ns", "g", 1);
        assert_ne!(a, root_id(b"s", "ns", "g", 2));
        assert_ne!(a, root_id(b"s", "ns", "h", 1));
        assert_ne!(a, root_id(b"t", "ns", "g", 1));
        assert_eq!(a, root_id(b"s", "ns", "g", 1));
    }

    fn plan(rank: usize, world: usize, base: u16) -> ControlPlan {
        ControlPlan {
            rank,
            world,
            root: format!("127.0.0.1:{base}").parse().unwrap(),
            own_port: base + rank as u16,
            devices_in_rank_order: vec![rank as i32],
            peers: vec![],
        }
    }

    fn timeouts() -> DomainTimeouts {
        DomainTimeouts {
            connect: Duration::from_secs(5),
            init: Duration::from_secs(10),
            op: Duration::from_secs(5),
        }
    }

    fn config(algorithm: hcomm_comm::Algorithm) -> DomainConfig {
        DomainConfig {
            timeouts: timeouts(),
            algorithm,
        }
    }

    fn free_base() -> u16 {
        // Two consecutive free ports, found by binding.
        loop {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let p = l.local_addr().unwrap().port();
            if p < 65000 && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
                return p;
            }
        }
    }

    #[tokio::test]
    async fn members_rendezvous_without_exchanging_root_info_grow_in_place_and_count_communicators()
    {
        let m = Metrics::new();
        let base = free_base();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let auto = config(hcomm_comm::Algorithm::Auto);
        let mut a = Domain::new("ns", "g", b"k".to_vec(), lo, auto, m.clone());
        let mut b = Domain::new("ns", "g", b"k".to_vec(), lo, auto, m.clone());
        let (p0, p1) = (plan(0, 2, base), plan(1, 2, base));
        let (ra, rb) = tokio::join!(a.join(&p0, 1), b.join(&p1, 1));
        ra.unwrap();
        rb.unwrap();
        let comm = a.watch().borrow().clone().unwrap();
        let peer = b.watch().borrow().clone().unwrap();
        let mut x = 1f32.to_ne_bytes();
        let mut y = 2f32.to_ne_bytes();
        let (r1, r2) = tokio::join!(
            comm.all_reduce(&mut x, DataType::F32, ReduceOp::Sum),
            peer.all_reduce(&mut y, DataType::F32, ReduceOp::Sum)
        );
        r1.unwrap();
        r2.unwrap();
        assert_eq!(f32::from_ne_bytes(x), 3.0);

        // Epoch 2: same two members, new communicators beside the old ones; links reused.
        let links_before = comm.links();
        let (ra, rb) = tokio::join!(a.join(&p0, 2), b.join(&p1, 2));
        ra.unwrap();
        rb.unwrap();
        assert_eq!(a.epoch(), Some(2));
        let after = a.watch().borrow().clone().unwrap().links();
        assert_eq!(
            links_before[0].conn_id, after[0].conn_id,
            "the link was reused"
        );
        assert_eq!(m.comm_created.get(), 4);
        assert_eq!(m.comm_destroyed.get(), 2);
        assert_eq!(m.comm_open.get(), 2);
        a.leave();
        b.leave();
        assert_eq!(m.comm_open.get(), 0);
        assert_eq!(m.comm_destroyed.get(), 4);
    }

    #[tokio::test]
    async fn a_missing_peer_fails_the_join_within_the_init_timeout() {
        let m = Metrics::new();
        let base = free_base();
        let mut c = config(hcomm_comm::Algorithm::Auto);
        c.timeouts.init = Duration::from_millis(500);
        let mut a = Domain::new(
            "ns",
            "g",
            b"k".to_vec(),
            "127.0.0.1".parse().unwrap(),
            c,
            m.clone(),
        );
        let start = std::time::Instant::now();
        let err = a.join(&plan(0, 2, base), 1).await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5), "{err}");
        assert_eq!(m.comm_created.get(), 0);
    }

    #[test]
    fn the_comm_spec_timeouts_and_algorithm_reach_the_domain_config() {
        let comm = hcomm_crds::CommSpec {
            connect_timeout_seconds: 7,
            op_timeout_seconds: 45,
            algorithm: hcomm_crds::Algorithm::Ring,
            ..Default::default()
        };
        let c = DomainConfig::from_comm(&comm);
        assert_eq!(
            c.timeouts,
            DomainTimeouts {
                connect: Duration::from_secs(7),
                init: Duration::from_secs(14),
                op: Duration::from_secs(45),
            }
        );
        assert_eq!(c.algorithm, hcomm_comm::Algorithm::Ring);
        for (crd, engine) in [
            (hcomm_crds::Algorithm::Auto, hcomm_comm::Algorithm::Auto),
            (hcomm_crds::Algorithm::Ring, hcomm_comm::Algorithm::Ring),
            (hcomm_crds::Algorithm::Tree, hcomm_comm::Algorithm::Tree),
        ] {
            assert_eq!(engine_algorithm(crd), engine);
        }
    }

    /// Two members whose specs say `ring` and `tree`: each communicator runs the algorithm
    /// of its spec, and since the engine signs every collective's tag with the algorithm,
    /// their all-reduce cannot pair up and times out instead of mixing two schedules.
    #[tokio::test]
    async fn the_spec_algorithm_runs_the_domains_collectives() {
        let m = Metrics::new();
        let base = free_base();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let spec = |algorithm| {
            let comm = hcomm_crds::CommSpec {
                connect_timeout_seconds: 5,
                op_timeout_seconds: 1,
                algorithm,
                ..Default::default()
            };
            DomainConfig::from_comm(&comm)
        };
        let ring = spec(hcomm_crds::Algorithm::Ring);
        let tree = spec(hcomm_crds::Algorithm::Tree);
        let mut a = Domain::new("ns", "g", b"k".to_vec(), lo, ring, m.clone());
        let mut b = Domain::new("ns", "g", b"k".to_vec(), lo, tree, m.clone());
        let (p0, p1) = (plan(0, 2, base), plan(1, 2, base));
        let (ra, rb) = tokio::join!(a.join(&p0, 1), b.join(&p1, 1));
        ra.unwrap();
        rb.unwrap();
        let ca = a.watch().borrow().clone().unwrap();
        let cb = b.watch().borrow().clone().unwrap();
        assert_eq!(ca.algorithm(), hcomm_comm::Algorithm::Ring);
        assert_eq!(cb.algorithm(), hcomm_comm::Algorithm::Tree);
        let mut x = 1f32.to_ne_bytes();
        let mut y = 2f32.to_ne_bytes();
        let (r1, r2) = tokio::join!(
            ca.all_reduce(&mut x, DataType::F32, ReduceOp::Sum),
            cb.all_reduce(&mut y, DataType::F32, ReduceOp::Sum)
        );
        assert!(
            r1.is_err() && r2.is_err(),
            "ranks with different algorithms must not complete one all-reduce"
        );
    }
}
