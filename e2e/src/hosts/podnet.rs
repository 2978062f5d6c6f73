//! Pod addresses on simulated hosts, as a CNI plugin would give them: the Pod's IP (the
//! one kwok wrote into `status.podIP`) is added to the host's management NIC, and the
//! root namespace — where routers, load generators and the control plane run — gets a
//! host route to it through that host. Endpoints in EndpointSlices are then real,
//! reachable addresses, and a host that is cut off takes its Pods' addresses with it.

use std::net::Ipv4Addr;

use super::SimHosts;
use super::error::{Error, Result};
use super::netns::{ip, ip_in};

impl SimHosts {
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
