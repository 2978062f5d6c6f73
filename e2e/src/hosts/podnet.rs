//! Pod addresses on simulated hosts, as a CNI plugin would give them: the Pod's IP (the
//! one kwok wrote into `status.podIP`) is added to the host's management NIC, and the
//! root namespace — where routers, load generators and the control plane run — gets a
//! host route to it through that host. Endpoints in EndpointSlices are then real,
//! reachable addresses, and a host that is cut off takes its Pods' addresses with it.
//!
//! The whole Pod range is claimed in the root namespace as unreachable: an address of a
//! Pod that is gone answers "No route to host" at once, as a cluster network does, and
//! never follows the machine's default route out of the sandbox. (It did, before the
//! claim: an egress proxy out there answered a departed Pod's address with HTTP 404,
//! which a load generator rightly counted as a failed request.)

use std::net::Ipv4Addr;

use super::SimHosts;
use super::error::{Error, Result};
use super::netns::{ip, ip_in};

impl SimHosts {
    /// Claims this instance's Pod range and returns it, for the cluster's IPAM (kwok's
    /// `--cidr`): `10.(100 + k % 150).0.0/16` from the subnet index `k`, so instances on the
    /// machine do not share one; loopback hosts get `127.100.0.0/16` (bindable without
    /// setup, and never routed anywhere). The host routes [`SimHosts::add_pod_address`]
    /// adds are more specific than the claim; teardown releases it.
    pub fn claim_pod_range(&mut self) -> Result<String> {
        if !self.is_isolated() {
            return Ok("127.100.0.0/16".to_owned());
        }
        let range = format!("10.{}.0.0/16", 100 + self.subnets().data.octets()[2] % 150);
        // `replace`: a killed run with the same subnet index left its claim behind.
        ip(&["route", "replace", "unreachable", &range])?;
        self.pod_range = Some(range.clone());
        Ok(range)
    }

    /// Undoes [`SimHosts::claim_pod_range`] (teardown); an unclaimed range is fine.
    pub(super) fn release_pod_range(&mut self) -> Result<()> {
        let Some(range) = self.pod_range.take() else {
            return Ok(());
        };
        match ip(&["route", "del", "unreachable", &range]) {
            Err(Error::Command { stderr, .. }) if stderr.contains("No such process") => Ok(()),
            other => other.map(drop),
        }
    }

    /// Makes `pod_ip` an address of host `host` reachable from the root namespace.
    /// Idempotent. Loopback hosts accept only 127/8 addresses (bindable without setup).
    pub fn add_pod_address(&self, host: usize, pod_ip: Ipv4Addr) -> Result<()> {
        let h = self.host(host)?;
        let Some(ns) = h.netns() else {
            return loopback_only(pod_ip);
        };
        let cidr = format!("{pod_ip}/32");
        // `replace` keeps a second call (a restarted kubelet) from failing.
        ip_in(ns, &["addr", "replace", &cidr, "dev", h.mgmt_interface()])?;
        ip(&["route", "replace", &cidr, "via", &h.mgmt_ip().to_string()])?;
        Ok(())
    }

    /// Undoes [`SimHosts::add_pod_address`]; an address or route already gone is fine.
    pub fn remove_pod_address(&self, host: usize, pod_ip: Ipv4Addr) -> Result<()> {
        let h = self.host(host)?;
        let Some(ns) = h.netns() else {
            return Ok(());
        };
        let cidr = format!("{pod_ip}/32");
        for result in [
            ip(&["route", "del", &cidr, "via", &h.mgmt_ip().to_string()]),
            ip_in(ns, &["addr", "del", &cidr, "dev", h.mgmt_interface()]),
        ] {
            match result {
                Ok(_) => {}
                Err(Error::Command { stderr, .. })
                    if stderr.contains("No such process")
                        || stderr.contains("Cannot assign")
                        || stderr.contains("not found")
                        || stderr.contains("Cannot find") => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn loopback_only(pod_ip: Ipv4Addr) -> Result<()> {
    if pod_ip.is_loopback() {
        Ok(())
    } else {
        Err(Error::Unsupported {
            what: "a non-loopback Pod address on a loopback host",
            why: format!(
                "{pod_ip} is not in 127/8, and without namespaces only 127/8 addresses bind without setup"
            ),
        })
    }
}
