//! Link control of simulated hosts: shaping, cutting, blackholing and restoring one
//! host's data or management link. Every operation acts on the bridge-side veth (and,
//! for shaping, on both ends), so nothing inside the host changes but what a broken
//! cable or switch port would change.

use std::thread;
use std::time::{Duration, Instant};

use super::SimHosts;
use super::error::{Error, Result};
use super::naming::Names;
use super::netns::{ip, ip_in};
use super::shaping::{self, Shaping};

/// How long a restored link may take to show carrier again.
const SETTLE_DEADLINE: Duration = Duration::from_secs(5);

/// One of a host's two links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// The data NIC (`data0`): collectives and weight transfers.
    Data,
    /// The management NIC (`mgmt0`): API server, agent control traffic.
    Mgmt,
}

/// The state a link can be put into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Attached to its bridge and up.
    Up,
    /// Bridge-side veth down: the host sees NO-CARRIER on its NIC, nothing passes.
    Down,
    /// Bridge-side veth detached from the bridge but up: the host's NIC looks healthy
    /// (carrier, address, route) yet reaches nobody — the "wrong NIC" failure.
    Blackholed,
}

impl SimHosts {
    /// Replaces the shaping of a host's data link (both directions).
    pub fn shape(&self, host: usize, shaping: Shaping) -> Result<()> {
        self.shape_link(host, Link::Data, shaping)
    }

    /// Replaces the shaping of one of a host's links (both directions; see
    /// [`Shaping`] for what exactly is shaped).
    pub fn shape_link(&self, host: usize, link: Link, shaping: Shaping) -> Result<()> {
        let (ns, nic, veth) = self.link_parts(host, link, "shaping")?;
        if shaping.is_unshaped() {
            shaping::clear(Some(&ns), &nic)?;
            return shaping::clear(None, &veth);
        }
        shaping::apply(Some(&ns), &nic, &shaping)?;
        shaping::apply(None, &veth, &shaping)
    }

    /// Puts one of a host's links into `state` (see [`LinkState`]).
    pub fn set_link(&self, host: usize, link: Link, state: LinkState) -> Result<()> {
        let (_, _, veth) = self.link_parts(host, link, "cutting links")?;
        let names = Names(&self.prefix);
        let bridge = match link {
            Link::Data => names.data_bridge(),
            Link::Mgmt => names.mgmt_bridge(),
        };
        match state {
            LinkState::Up => {
                ip(&["link", "set", &veth, "master", &bridge, "up"])?;
                self.settle(host, link, &bridge)
            }
            LinkState::Down => ip(&["link", "set", &veth, "down"]).map(drop),
            LinkState::Blackholed => {
                ip(&["link", "set", &veth, "nomaster"])?;
                ip(&["link", "set", &veth, "up"]).map(drop)
            }
        }
    }

    /// After a link comes back: waits until the host's NIC has carrier again (the kernel
    /// reports it asynchronously) and forgets neighbour entries that failed while the link
    /// was broken — otherwise the first connection after a restore may still get
    /// "No route to host".
    fn settle(&self, host: usize, link: Link, bridge: &str) -> Result<()> {
        let (ns, nic, _) = self.link_parts(host, link, "cutting links")?;
        wait_carrier(&ns, &nic)?;
        ip(&["neigh", "flush", "dev", bridge])?;
        for h in &self.hosts {
            let (ns, nic, _) = self.link_parts(h.index, link, "cutting links")?;
            ip_in(&ns, &["neigh", "flush", "dev", &nic])?;
        }
        Ok(())
    }

    /// Takes the host's data link down; management keeps working.
    pub fn cut_data(&self, host: usize) -> Result<()> {
        self.set_link(host, Link::Data, LinkState::Down)
    }
    /// Brings the host's data link back.
    pub fn restore_data(&self, host: usize) -> Result<()> {
        self.set_link(host, Link::Data, LinkState::Up)
    }
    /// Leaves the data NIC up (carrier, address, route) but reaching nobody, while
    /// management works: the "agent picked a data NIC that cannot reach its peers" case.
    /// Undo with [`SimHosts::restore_data`].
    pub fn blackhole_data(&self, host: usize) -> Result<()> {
        self.set_link(host, Link::Data, LinkState::Blackholed)
    }
    /// Cuts the host off completely (both links down).
    pub fn cut_all(&self, host: usize) -> Result<()> {
        self.set_link(host, Link::Data, LinkState::Down)?;
        self.set_link(host, Link::Mgmt, LinkState::Down)
    }
    /// Brings both links back.
    pub fn restore_all(&self, host: usize) -> Result<()> {
        self.set_link(host, Link::Data, LinkState::Up)?;
        self.set_link(host, Link::Mgmt, LinkState::Up)
    }

    /// (namespace, host-side NIC, bridge-side veth) of a link; refuses loopback hosts.
    fn link_parts(
        &self,
        host: usize,
        link: Link,
        what: &'static str,
    ) -> Result<(String, String, String)> {
        let h = self.host(host)?;
        let Some(ns) = h.netns.clone() else {
            return Err(Error::Unsupported {
                what,
                why: "loopback hosts have no links of their own".into(),
            });
        };
        let names = Names(&self.prefix);
        Ok(match link {
            Link::Data => (ns, h.data_if.clone(), names.data_veth(host)),
            Link::Mgmt => (ns, h.mgmt_if.clone(), names.mgmt_veth(host)),
        })
    }
}

/// Waits (bounded) until `nic` inside `ns` has carrier again; the kernel reports a
/// restored peer asynchronously.
pub(super) fn wait_carrier(ns: &str, nic: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let state = ip_in(ns, &["-o", "link", "show", "dev", nic])?;
        if state.contains("LOWER_UP") && !state.contains("NO-CARRIER") {
            return Ok(());
        }
        if start.elapsed() > SETTLE_DEADLINE {
            return Err(Error::Command {
                command: format!("ip -n {ns} link show dev {nic}"),
                status: format!("no carrier {SETTLE_DEADLINE:?} after restoring the link"),
                stderr: state.trim().to_owned(),
            });
        }
        thread::sleep(Duration::from_millis(10));
    }
}
