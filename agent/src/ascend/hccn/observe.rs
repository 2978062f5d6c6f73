//! One NPU's network as `hccn_tool` reports it (address, link, health, TLS: four calls,
//! serialised by the runner), and its `HcommNode` form. Used by the pre-join check and by
//! the periodic inventory refresh.

use std::net::IpAddr;

use hcomm_crds::node::{DeviceNetwork, NpuLink};
use tokio::time::Instant;

use super::conf::HccnConf;
use super::output::{IpInfo, NetHealth, TlsState};
use super::runner::HccnTool;

/// What the tool said about one device; an `Err` carries the tool's named error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceObservation {
    pub id: u32,
    pub ip: Result<IpInfo, String>,
    pub link: Result<NpuLink, String>,
    pub health: Result<NetHealth, String>,
    pub tls: Result<TlsState, String>,
}

impl DeviceObservation {
    /// A device whose every answer is the documented good one (for tests and fakes).
    pub fn healthy(id: u32, ip: std::net::Ipv4Addr, tls: bool) -> DeviceObservation {
        DeviceObservation {
            id,
            ip: Ok(IpInfo {
                address: ip,
                netmask: None,
            }),
            link: Ok(NpuLink::Up),
            health: Ok(NetHealth("Success".into())),
            tls: Ok(TlsState {
                dev_id: Some(id),
                enabled: tls,
            }),
        }
    }

    pub fn tool_ip(&self) -> Option<IpAddr> {
        self.ip.as_ref().ok().map(|i| IpAddr::V4(i.address))
    }
}

/// Asks the tool about device `id`, every call bounded by `deadline`.
pub async fn observe(tool: &HccnTool, id: u32, deadline: Instant) -> DeviceObservation {
    let e = |e: super::runner::ToolError| e.to_string();
    DeviceObservation {
        id,
        ip: tool.ip(id, deadline).await.map_err(e),
        link: tool.link(id, deadline).await.map_err(e),
        health: tool.net_health(id, deadline).await.map_err(e),
        tls: tool.tls(id, deadline).await.map_err(e),
    }
}

/// The `HcommNode` form: what was read, and the errors of what was not.
pub fn to_network(conf: Option<&HccnConf>, o: &DeviceObservation) -> DeviceNetwork {
    let errors: Vec<&str> = [
        o.ip.as_ref().err(),
        o.link.as_ref().err(),
        o.health.as_ref().err(),
        o.tls.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    .map(String::as_str)
    .collect();
    DeviceNetwork {
        configured_ip: conf.and_then(|c| c.address(o.id)).map(|a| a.to_string()),
        link: o.link.as_ref().ok().copied(),
        net_health: o.health.as_ref().ok().map(|h| h.0.clone()),
        tls_enabled: o.tls.as_ref().ok().map(|t| t.enabled),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_form_keeps_what_was_read_and_names_what_was_not() {
        let conf = super::super::conf::parse("address_1=10.0.0.1\n").unwrap();
        let mut o = DeviceObservation::healthy(1, "10.0.0.1".parse().unwrap(), true);
        o.health = Err("hccn_tool -net_health -g: timed out".into());
        let n = to_network(Some(&conf), &o);
        assert_eq!(n.configured_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(n.link, Some(NpuLink::Up));
        assert_eq!(n.tls_enabled, Some(true));
        assert_eq!(n.net_health, None);
        assert_eq!(
            n.error.as_deref(),
            Some("hccn_tool -net_health -g: timed out")
        );
    }
}
