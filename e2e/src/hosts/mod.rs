//! Simulated hosts for end-to-end tests: N Linux network namespaces standing in for the
//! nodes of an NPU cluster, each with a data NIC and a management NIC on two different
//! subnets, so the agent's NIC resolution, link checks and weight transfers run over real
//! (and, where asked, shaped or broken) links.
//!
//! Topology of one instance (`k` = its subnet index, host `i`):
//!
//! ```text
//!  root namespace                          namespace <prefix>-h<i>
//!  bridge <prefix>bd  198.18.k.1/24  ── veth <prefix>d<i> ══ data0  198.18.k.(10+i)/24
//!  bridge <prefix>bm  198.19.k.1/24  ── veth <prefix>m<i> ══ mgmt0  198.19.k.(10+i)/24
//!                                                             lo     127.0.0.1 (up)
//!  bridge <prefix>bn  (no address)  ── veth <prefix>n<16i+N> ═ npu<N> 192.168.i.(10+N)/16
//! ```
//!
//! The last line only with [`SimHostsOptions::npus`]: each NPU's own RoCE port on an NPU
//! fabric of its own (see [`npu`]), described by the host's `/etc/hccn.conf`
//! ([`hccn_conf`]) and answered for by the `hccn_tool` simulator ([`hccn_sim`]).
//!
//! Hosts have only their two connected routes — no default route, so nothing leaves the
//! sandbox. Processes in the root namespace (API server, operator, tests) reach hosts on
//! both subnets through the bridges, and hosts reach services bound on the gateway IPs.
//! 198.18.0.0/15 is the RFC 2544 benchmarking range; [`SubnetIndex`] picks the third octet
//! so two instances never share a subnet (`Auto` chooses a free one under a lock).
//!
//! Every resource name starts with a per-run prefix (`hcs` + owner pid + sequence), so
//! parallel tests never clash; `Drop` removes it all even when a test panics, and
//! [`cleanup_orphans`] removes what killed runs left behind.
//!
//! Creating namespaces needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN); without it
//! [`SimHosts::create`] returns [`Error::NotPermitted`], and callers may fall back to
//! [`SimHosts::loopback`]: distinct 127.x addresses in the root namespace, with no
//! isolation, no separate interfaces (everything is `lo`), no cuts and no shaping.

mod cleanup;
mod error;
pub mod hccn_conf;
pub mod hccn_sim;
mod host;
mod links;
mod naming;
mod netns;
pub mod npu;
mod podnet;
mod process;
mod shaping;

use std::net::Ipv4Addr;

pub use cleanup::{cleanup_orphans, cleanup_stale};
pub use error::{Error, Result};
pub use host::SimHost;
pub use links::{Link, LinkState};
pub use naming::{MAX_HOSTS, MAX_NPUS, ROOT_PREFIX, SubnetIndex, Subnets};
pub use npu::NpuDevice;
pub use process::HostProcess;
pub(crate) use process::stop_child;
pub use shaping::Shaping;

use naming::{AllocLock, FIRST_HOST, Names, in_subnet};
use netns::{ip, ip_in};

/// Name of the data NIC inside every host.
pub const DATA_IF: &str = "data0";
/// Name of the management NIC inside every host.
pub const MGMT_IF: &str = "mgmt0";

/// Bridge settings: bridged frames skip iptables (a host firewall such as Docker's
/// FORWARD DROP policy would otherwise break host-to-host traffic), and no STP delay
/// before a (re)attached port forwards.
const BRIDGE_OPTIONS: &[&str] = &[
    "type",
    "bridge",
    "stp_state",
    "0",
    "forward_delay",
    "0",
    "nf_call_iptables",
    "0",
    "nf_call_ip6tables",
    "0",
    "nf_call_arptables",
    "0",
];

/// What to build.
#[derive(Debug, Clone, PartialEq)]
pub struct SimHostsOptions {
    /// Number of hosts, 1..=[`MAX_HOSTS`].
    pub hosts: usize,
    /// Third octet of the data (198.18.k.0/24) and management (198.19.k.0/24) subnets.
    pub subnet: SubnetIndex,
    /// Shaping applied to every host's data link at creation.
    pub data_shaping: Shaping,
    /// Shaping applied to every host's management link at creation.
    pub mgmt_shaping: Shaping,
    /// NPU ports per host on an NPU fabric (0..=[`MAX_NPUS`]; 0 = no fabric).
    pub npus: u32,
}

impl SimHostsOptions {
    /// `hosts` unshaped hosts on an automatically chosen subnet pair.
    pub fn new(hosts: usize) -> Self {
        SimHostsOptions {
            hosts,
            subnet: SubnetIndex::Auto,
            data_shaping: Shaping::default(),
            mgmt_shaping: Shaping::default(),
            npus: 0,
        }
    }

    /// Gives every host `npus` NPU ports on an NPU fabric.
    pub fn npus(mut self, npus: u32) -> Self {
        self.npus = npus;
        self
    }

    /// Uses exactly this subnet index.
    pub fn subnet(mut self, subnet: SubnetIndex) -> Self {
        self.subnet = subnet;
        self
    }

    /// Shapes every data link from the start.
    pub fn data_shaping(mut self, shaping: Shaping) -> Self {
        self.data_shaping = shaping;
        self
    }

    /// Shapes every management link from the start.
    pub fn mgmt_shaping(mut self, shaping: Shaping) -> Self {
        self.mgmt_shaping = shaping;
        self
    }
}

/// A set of simulated hosts; dropping it removes everything it created.
#[derive(Debug)]
pub struct SimHosts {
    prefix: String,
    subnets: Subnets,
    hosts: Vec<SimHost>,
    isolated: bool,
    /// The Pod range claimed in the root namespace ([`SimHosts::claim_pod_range`]).
    pod_range: Option<String>,
    torn_down: bool,
}

impl SimHosts {
    /// Builds the hosts as network namespaces. Fails with [`Error::NotPermitted`] without
    /// root, [`Error::SubnetInUse`] when a fixed subnet index is taken.
    pub fn create(options: SimHostsOptions) -> Result<Self> {
        if options.hosts == 0 || options.hosts > MAX_HOSTS {
            return Err(Error::InvalidOptions(format!(
                "hosts must be 1..={MAX_HOSTS}, got {}",
                options.hosts
            )));
        }
        options.data_shaping.validate()?;
        options.mgmt_shaping.validate()?;
        if options.npus > MAX_NPUS {
            return Err(Error::InvalidOptions(format!(
                "npus must be 0..={MAX_NPUS}, got {}",
                options.npus
            )));
        }
        netns::check_permitted()?;
        let prefix = naming::new_prefix();
        // Anything under our prefix belongs to a dead process that had our pid.
        cleanup_stale(&prefix)?;
        // From here on, Drop cleans up whatever was built if a step fails.
        let mut this = SimHosts {
            prefix,
            subnets: Subnets::benchmarking(0),
            hosts: Vec::with_capacity(options.hosts),
            isolated: true,
            pod_range: None,
            torn_down: false,
        };
        let names = Names(&this.prefix);
        {
            let _lock = AllocLock::take()?;
            this.subnets = naming::choose_subnets(options.subnet)?;
            for (bridge, net) in [
                (names.data_bridge(), this.subnets.data),
                (names.mgmt_bridge(), this.subnets.mgmt),
            ] {
                ip(&[&["link", "add", &bridge][..], BRIDGE_OPTIONS].concat())?;
                ip(&[
                    "addr",
                    "add",
                    &format!("{}/24", in_subnet(net, 1)),
                    "dev",
                    &bridge,
                ])?;
                ip(&["link", "set", &bridge, "up"])?;
            }
        }
        if options.npus > 0 {
            this.build_npu_bridge()?;
        }
        for i in 0..options.hosts {
            let mut host = this.build_host(i)?;
            if options.npus > 0 {
                let ns = host.netns.clone().unwrap_or_default();
                host.npus = this.build_npus(i, &ns, options.npus)?;
            }
            this.hosts.push(host);
            this.shape_link(i, Link::Data, options.data_shaping)?;
            this.shape_link(i, Link::Mgmt, options.mgmt_shaping)?;
        }
        tracing::debug!(prefix = %this.prefix, hosts = options.hosts, data = %this.subnets.data, "simulated hosts up");
        Ok(this)
    }

    fn build_host(&self, i: usize) -> Result<SimHost> {
        let names = Names(&self.prefix);
        let ns = names.netns(i);
        let last = FIRST_HOST + i as u8;
        ip(&["netns", "add", &ns])?;
        ip_in(&ns, &["link", "set", "lo", "up"])?;
        for (veth, nic, bridge, net) in [
            (
                names.data_veth(i),
                DATA_IF,
                names.data_bridge(),
                self.subnets.data,
            ),
            (
                names.mgmt_veth(i),
                MGMT_IF,
                names.mgmt_bridge(),
                self.subnets.mgmt,
            ),
        ] {
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", nic, "netns", &ns,
            ])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            ip_in(
                &ns,
                &[
                    "addr",
                    "add",
                    &format!("{}/24", in_subnet(net, last)),
                    "dev",
                    nic,
                ],
            )?;
            ip_in(&ns, &["link", "set", nic, "up"])?;
        }
        Ok(SimHost {
            index: i,
            name: format!("host-{i}"),
            netns: Some(ns),
            data_ip: in_subnet(self.subnets.data, last),
            mgmt_ip: in_subnet(self.subnets.mgmt, last),
            data_if: DATA_IF.into(),
            mgmt_if: MGMT_IF.into(),
            npus: Vec::new(),
        })
    }

    /// The fallback without root: `n` hosts that are just distinct addresses on `lo` in
    /// the root namespace — data `127.18.0.(10+i)`, management `127.19.0.(10+i)`.
    /// Processes bound to those addresses are told apart, but there is no isolation, both
    /// "NICs" are `lo`, and cuts and shaping return [`Error::Unsupported`].
    pub fn loopback(n: usize) -> Result<Self> {
        if n == 0 || n > MAX_HOSTS {
            return Err(Error::InvalidOptions(format!(
                "hosts must be 1..={MAX_HOSTS}, got {n}"
            )));
        }
        let subnets = Subnets {
            data: Ipv4Addr::new(127, 18, 0, 0),
            mgmt: Ipv4Addr::new(127, 19, 0, 0),
        };
        let hosts = (0..n)
            .map(|i| {
                let last = FIRST_HOST + i as u8;
                SimHost {
                    index: i,
                    name: format!("host-{i}"),
                    netns: None,
                    data_ip: in_subnet(subnets.data, last),
                    mgmt_ip: in_subnet(subnets.mgmt, last),
                    data_if: "lo".into(),
                    mgmt_if: "lo".into(),
                    npus: Vec::new(),
                }
            })
            .collect();
        Ok(SimHosts {
            prefix: String::new(),
            subnets,
            hosts,
            isolated: false,
            pod_range: None,
            torn_down: false,
        })
    }

    /// Real namespaces (`true`) or the loopback fallback (`false`).
    pub fn is_isolated(&self) -> bool {
        self.isolated
    }
    /// The run prefix every resource name starts with (empty for loopback hosts).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// The data and management subnets (/24 each).
    pub fn subnets(&self) -> Subnets {
        self.subnets
    }
    /// Root-namespace address on the data bridge (`.1`); loopback: 127.0.0.1.
    pub fn data_gateway(&self) -> Ipv4Addr {
        self.gateway(self.subnets.data)
    }
    /// Root-namespace address on the management bridge (`.1`): bind services for the
    /// hosts here. Loopback: 127.0.0.1.
    pub fn mgmt_gateway(&self) -> Ipv4Addr {
        self.gateway(self.subnets.mgmt)
    }
    fn gateway(&self, net: Ipv4Addr) -> Ipv4Addr {
        if self.isolated {
            in_subnet(net, 1)
        } else {
            Ipv4Addr::LOCALHOST
        }
    }
    /// Names of the data and management bridges in the root namespace.
    pub fn bridges(&self) -> Option<(String, String)> {
        let n = Names(&self.prefix);
        self.isolated.then(|| (n.data_bridge(), n.mgmt_bridge()))
    }
    /// All hosts, by index.
    pub fn hosts(&self) -> &[SimHost] {
        &self.hosts
    }
    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }
    /// Never true for a built instance; here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
    /// Host `index`.
    pub fn host(&self, index: usize) -> Result<&SimHost> {
        self.hosts.get(index).ok_or(Error::NoSuchHost {
            index,
            len: self.hosts.len(),
        })
    }

    /// Removes everything now and reports errors (Drop does the same, logging them).
    pub fn teardown(mut self) -> Result<()> {
        self.teardown_inner()
    }

    fn teardown_inner(&mut self) -> Result<()> {
        if self.torn_down || !self.isolated {
            return Ok(());
        }
        self.torn_down = true;
        let released = self.release_pod_range();
        cleanup_stale(&self.prefix).map(drop)?;
        released
    }
}

impl Drop for SimHosts {
    fn drop(&mut self) {
        if let Err(e) = self.teardown_inner() {
            tracing::warn!(prefix = %self.prefix, error = %e, "simulated hosts teardown failed");
            eprintln!("simulated hosts {}: teardown failed: {e}", self.prefix);
        }
    }
}
