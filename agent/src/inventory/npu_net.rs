//! The NPUs' own network in the node's inventory: each device's address, link, health and
//! TLS switch from `hccn.conf` and `hccn_tool` ([`crate::ascend::hccn`]), refreshed with
//! the inventory and published in `HcommNode` (peers compare TLS switches from there).
//! A node without the tool (CPU nodes) is left as it is.

use std::path::Path;
use std::time::Duration;

use hcomm_crds::DeviceInventory;
use tokio::time::Instant;

use crate::ascend::hccn::conf::{self, HccnConf};
use crate::ascend::hccn::observe::{DeviceObservation, observe, to_network};
use crate::ascend::hccn::runner::HccnTool;

/// The most one refresh spends on the tool (the calls are serialised node-wide).
pub const REFRESH_BUDGET: Duration = Duration::from_secs(60);

/// Observes every device through the tool, when it is installed.
pub async fn fill(devices: &mut [DeviceInventory], tool: &HccnTool, conf_path: &Path) {
    if !tool.exists() {
        return;
    }
    let conf = conf::read(conf_path).map_err(|e| e.to_string());
    let deadline = Instant::now() + REFRESH_BUDGET;
    let mut seen = Vec::new();
    for d in devices.iter() {
        let Ok(id) = u32::try_from(d.id) else {
            continue;
        };
        seen.push(observe(tool, id, deadline).await);
    }
    apply(devices, conf.as_ref().map_err(String::as_str), &seen);
}

/// Writes the observations into the devices (pure): the address the tool reports, else
/// the configured one; the network state; a conf that could not be read is named.
pub fn apply(
    devices: &mut [DeviceInventory],
    conf: Result<&HccnConf, &str>,
    seen: &[DeviceObservation],
) {
    for d in devices.iter_mut() {
        let Some(o) = seen.iter().find(|o| i64::from(o.id) == i64::from(d.id)) else {
            continue;
        };
        let mut net = to_network(conf.ok(), o);
        if let Err(e) = conf {
            net.error = Some(match net.error {
                Some(other) => format!("{e}; {other}"),
                None => e.to_owned(),
            });
        }
        d.ip = o
            .tool_ip()
            .map(|ip| ip.to_string())
            .or_else(|| net.configured_ip.clone());
        d.network = Some(net);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::DeviceHealth;
    use hcomm_crds::node::NpuLink;

    fn dev(id: i32) -> DeviceInventory {
        DeviceInventory {
            id,
            model: "Ascend910B3".into(),
            numa_node: None,
            ip: None,
            health: DeviceHealth::Healthy,
            network: None,
        }
    }

    #[test]
    fn observed_devices_get_their_address_and_network_state() {
        let conf = conf::parse("address_0=10.0.0.1\naddress_1=10.0.0.2\n").unwrap();
        let mut devs = vec![dev(0), dev(1), dev(2)];
        let mut one = DeviceObservation::healthy(1, "10.0.0.2".parse().unwrap(), true);
        one.ip = Err("hccn_tool -ip -g: no ipaddr line".into());
        one.link = Ok(NpuLink::Down);
        let seen = [
            DeviceObservation::healthy(0, "10.0.0.1".parse().unwrap(), false),
            one,
        ];
        apply(&mut devs, Ok(&conf), &seen);
        assert_eq!(devs[0].ip.as_deref(), Some("10.0.0.1"));
        let n0 = devs[0].network.as_ref().unwrap();
        assert_eq!(
            (n0.link, n0.tls_enabled, n0.net_health.as_deref()),
            (Some(NpuLink::Up), Some(false), Some("Success"))
        );
        // The tool failed on the address: the configured one is published, and the error.
        assert_eq!(devs[1].ip.as_deref(), Some("10.0.0.2"));
        let n1 = devs[1].network.as_ref().unwrap();
        assert_eq!(n1.link, Some(NpuLink::Down));
        assert!(n1.error.as_deref().unwrap().contains("no ipaddr line"));
        assert_eq!(devs[2].network, None, "not observed, not invented");
    }

    #[test]
    fn an_unreadable_conf_is_named_on_every_observed_device() {
        let mut devs = vec![dev(0)];
        let seen = [DeviceObservation::healthy(
            0,
            "10.0.0.1".parse().unwrap(),
            false,
        )];
        apply(&mut devs, Err("cannot read /etc/hccn.conf"), &seen);
        let n = devs[0].network.as_ref().unwrap();
        assert_eq!(n.configured_ip, None);
        assert_eq!(n.error.as_deref(), Some("cannot read /etc/hccn.conf"));
        assert_eq!(devs[0].ip.as_deref(), Some("10.0.0.1"));
    }

    #[tokio::test]
    async fn a_node_without_the_tool_is_left_alone() {
        let mut devs = vec![dev(0)];
        let tool = HccnTool::new("/nonexistent/hccn_tool", Duration::from_secs(1));
        fill(&mut devs, &tool, Path::new("/nonexistent/hccn.conf")).await;
        assert_eq!(devs[0], dev(0));
    }
}
