//! The NPU network of simulated hosts: each NPU's own RoCE port stands in as a real
//! interface `npu<N>` inside its host's namespace, a veth into one "NPU fabric" bridge
//! (`<prefix>bn`) that is neither the data nor the management network, carrying the
//! device IP `192.168.<host>.<10+N>/16`. So an NPU-to-NPU ping is a real packet over
//! that NPU's own port, and cutting the port (the bridge-side veth goes down; the host
//! sees NO-CARRIER, as when a cable is pulled) really breaks it.
//!
//! A real NPU has its own network stack; here the eight ports share their host's. Two
//! settings keep them apart as on the device: ARP is answered only on the port that owns
//! the address (`arp_ignore=1`, `arp_announce=2`), and traffic from a port's address
//! leaves by that port (one routing table per port, selected by source address, ending
//! in `unreachable` so it never falls back to a sibling port). The fabric lives only in
//! the namespaces (the bridge has no address), so its subnet cannot collide with the
//! machine's networks or another instance's.

use std::net::Ipv4Addr;

use super::SimHosts;
use super::error::{Error, Result};
use super::hccn_conf::{HccnConf, HccnEntry, netmask};
use super::links::LinkState;
#[cfg(test)]
use super::naming::MAX_NPUS;
use super::naming::Names;
use super::netns::{ip, ip_in, run};

/// Prefix length of the NPU fabric.
pub const NPU_PREFIX_LEN: u8 = 16;
/// First routing table of the per-port tables (`TABLE_BASE + N`).
const TABLE_BASE: u32 = 1000;

/// One NPU of a simulated host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpuDevice {
    /// Physical device id (`N` of `address_N`, `Ascend910-N`).
    pub id: u32,
    /// Its port inside the host (`npu<N>`).
    pub interface: String,
    /// Its device IP.
    pub ip: Ipv4Addr,
}

/// The interface name of NPU `id` inside a host.
pub fn npu_interface(id: u32) -> String {
    format!("npu{id}")
}

/// Device IP of NPU `id` of host `host`.
pub fn npu_ip(host: usize, id: u32) -> Ipv4Addr {
    Ipv4Addr::new(192, 168, host as u8, 10 + id as u8)
}

/// The `/etc/hccn.conf` of host `host` in a set of `hosts` hosts with `npus` NPUs each:
/// every device's address and netmask, and as its detect address the same device of the
/// next host (the fabric has no router to detect).
pub fn hccn_conf_for(host: usize, hosts: usize, npus: u32) -> HccnConf {
    let next = (host + 1) % hosts.max(1);
    HccnConf {
        devices: (0..npus)
            .map(|id| {
                (
                    id,
                    HccnEntry {
                        address: Some(npu_ip(host, id)),
                        netmask: Some(netmask(NPU_PREFIX_LEN)),
                        netdetect: Some(npu_ip(next, id)),
                    },
                )
            })
            .collect(),
    }
}

impl SimHosts {
    /// Builds the NPU fabric bridge. Called once, before the hosts' ports.
    pub(crate) fn build_npu_bridge(&self) -> Result<()> {
        let bridge = Names(&self.prefix).npu_bridge();
        ip(&[&["link", "add", &bridge][..], super::BRIDGE_OPTIONS].concat())?;
        ip(&["link", "set", &bridge, "up"]).map(drop)
    }

    /// Gives host `i` (namespace `ns`) `npus` NPU ports on the fabric.
    pub(crate) fn build_npus(&self, i: usize, ns: &str, npus: u32) -> Result<Vec<NpuDevice>> {
        let names = Names(&self.prefix);
        let bridge = names.npu_bridge();
        for (key, value) in [
            ("net.ipv4.conf.all.arp_ignore", "1"),
            ("net.ipv4.conf.all.arp_announce", "2"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
        ] {
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    &format!("{key}={value}"),
                ],
            )?;
        }
        let mut devices = Vec::with_capacity(npus as usize);
        for id in 0..npus {
            let veth = names.npu_veth(i, id);
            let port = npu_interface(id);
            let addr = npu_ip(i, id);
            let table = (TABLE_BASE + id).to_string();
            let net = format!("192.168.0.0/{NPU_PREFIX_LEN}");
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", &port, "netns", ns,
            ])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            ip_in(
                ns,
                &[
                    "addr",
                    "add",
                    &format!("{addr}/{NPU_PREFIX_LEN}"),
                    "dev",
                    &port,
                ],
            )?;
            ip_in(ns, &["link", "set", &port, "up"])?;
            ip_in(
                ns,
                &[
                    "route",
                    "add",
                    &net,
                    "dev",
                    &port,
                    "src",
                    &addr.to_string(),
                    "table",
                    &table,
                ],
            )?;
            ip_in(
                ns,
                &[
                    "route",
                    "add",
                    "unreachable",
                    "default",
                    "metric",
                    "4096",
                    "table",
                    &table,
                ],
            )?;
            ip_in(
                ns,
                &[
                    "rule",
                    "add",
                    "from",
                    &addr.to_string(),
                    "table",
                    &table,
                    "pref",
                    &table,
                ],
            )?;
            devices.push(NpuDevice {
                id,
                interface: port,
                ip: addr,
            });
        }
        Ok(devices)
    }

    /// NPUs per host (0 when the hosts were built without an NPU fabric).
    pub fn npus_per_host(&self) -> u32 {
        self.hosts.first().map_or(0, |h| h.npus.len() as u32)
    }

    /// Host `host`'s `/etc/hccn.conf` as the fabric was built (empty without NPUs).
    pub fn hccn_conf(&self, host: usize) -> Result<HccnConf> {
        self.host(host)?;
        Ok(hccn_conf_for(host, self.len(), self.npus_per_host()))
    }

    /// Puts NPU `id`'s port of host `host` into `state`, as [`SimHosts::set_link`] does
    /// for the data and management links: `Down` = no carrier, `Blackholed` = carrier
    /// but off the fabric, `Up` = back (waits for carrier, forgets failed neighbours).
    pub fn set_npu_link(&self, host: usize, id: u32, state: LinkState) -> Result<()> {
        let h = self.host(host)?;
        let Some(ns) = h.netns.clone() else {
            return Err(Error::Unsupported {
                what: "NPU links",
                why: "loopback hosts have no NPU ports".into(),
            });
        };
        if id >= h.npus.len() as u32 {
            return Err(Error::InvalidOptions(format!(
                "host {host} has {} NPUs, no NPU {id}",
                h.npus.len()
            )));
        }
        let names = Names(&self.prefix);
        let veth = names.npu_veth(host, id);
        let bridge = names.npu_bridge();
        match state {
            LinkState::Down => ip(&["link", "set", &veth, "down"]).map(drop),
            LinkState::Blackholed => {
                ip(&["link", "set", &veth, "nomaster"])?;
                ip(&["link", "set", &veth, "up"]).map(drop)
            }
            LinkState::Up => {
                ip(&["link", "set", &veth, "master", &bridge, "up"])?;
                let port = npu_interface(id);
                super::links::wait_carrier(&ns, &port)?;
                ip(&["neigh", "flush", "dev", &bridge])?;
                for other in &self.hosts {
                    if let Some(ns) = other.netns.as_deref() {
                        for d in &other.npus {
                            ip_in(ns, &["neigh", "flush", "dev", &d.interface])?;
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ips_are_unique_per_host_and_device_and_hccn_conf_lists_them() {
        let mut seen = std::collections::BTreeSet::new();
        for h in 0..super::super::MAX_HOSTS {
            for n in 0..MAX_NPUS {
                assert!(seen.insert(npu_ip(h, n)));
            }
        }
        let conf = hccn_conf_for(1, 2, 8);
        assert_eq!(conf.devices.len(), 8);
        assert_eq!(conf.address(3), Some(Ipv4Addr::new(192, 168, 1, 13)));
        assert_eq!(
            conf.devices[&3].netdetect,
            Some(npu_ip(0, 3)),
            "the next host's device"
        );
        assert_eq!(npu_interface(7), "npu7");
    }
}
