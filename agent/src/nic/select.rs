//! Choosing the data NIC (pure).
//!
//! The rule, in order:
//! 1. `socketIfname` set: the up interfaces it matches that have an address, by name; the one
//!    holding the node's `--data-address` wins if it is among them, else the first.
//! 2. Else `--data-address` set: the interface holding it.
//! 3. Else: the first (by name) up interface with an IPv4 address that is not loopback, not a
//!    bridge and not a container/overlay interface (see
//!    [`crate::inventory::nics::VIRTUAL_PREFIXES`]), preferring any other to the
//!    `--management-interface`.
//!
//! A failure names every interface seen, so the fix is obvious from the message.

use std::net::IpAddr;

use super::ifname::IfnameMatcher;
use crate::inventory::nics::{Nic, NicKind};

/// The inputs of the rule.
#[derive(Debug, Clone, Default)]
pub struct NicRule {
    pub socket_ifname: Option<IfnameMatcher>,
    pub data_address: Option<IpAddr>,
    pub management: Option<String>,
}

/// The chosen data interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub name: String,
    pub ip: IpAddr,
    /// Which step of the rule chose it, for logs and `diagnose`.
    pub why: &'static str,
}

/// No interface satisfies the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no data interface: {reason} (interfaces: {seen})")]
pub struct SelectError {
    pub reason: String,
    pub seen: String,
}

fn describe(nics: &[Nic]) -> String {
    if nics.is_empty() {
        return "none".into();
    }
    nics.iter()
        .map(|n| {
            let ip = n
                .primary_ip()
                .map_or_else(|| "no address".to_owned(), |ip| ip.to_string());
            format!("{} {} {}", n.name, ip, if n.up { "up" } else { "down" })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies the rule to the observed interfaces.
pub fn select_data_nic(nics: &[Nic], rule: &NicRule) -> Result<Chosen, SelectError> {
    let fail = |reason: String| SelectError {
        reason,
        seen: describe(nics),
    };
    let mut sorted: Vec<&Nic> = nics.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(m) = &rule.socket_ifname {
        let cands: Vec<&Nic> = sorted
            .iter()
            .copied()
            .filter(|n| n.up && m.matches(&n.name) && n.primary_ip().is_some())
            .collect();
        if let Some(addr) = rule.data_address
            && let Some(n) = cands.iter().find(|n| n.holds(addr))
        {
            return Ok(Chosen {
                name: n.name.clone(),
                ip: addr,
                why: "socketIfname, holding the data address",
            });
        }
        let n = cands.first().ok_or_else(|| {
            fail(format!(
                "socketIfname {m} matches no up interface with an address"
            ))
        })?;
        return Ok(Chosen {
            name: n.name.clone(),
            ip: n.primary_ip().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            why: "socketIfname",
        });
    }
    if let Some(addr) = rule.data_address {
        let n = sorted
            .iter()
            .find(|n| n.holds(addr))
            .ok_or_else(|| fail(format!("no interface holds the data address {addr}")))?;
        if !n.up {
            return Err(fail(format!(
                "{} holds the data address {addr} but is down",
                n.name
            )));
        }
        return Ok(Chosen {
            name: n.name.clone(),
            ip: addr,
            why: "holds the data address",
        });
    }
    let is_mgmt = |n: &Nic| rule.management.as_deref() == Some(n.name.as_str());
    let mut cands: Vec<&Nic> = sorted
        .iter()
        .copied()
        .filter(|n| n.up && n.kind == NicKind::Ordinary && n.addrs.iter().any(|a| a.ip.is_ipv4()))
        .collect();
    cands.sort_by_key(|n| is_mgmt(n));
    let n = cands.first().ok_or_else(|| {
        fail("no up, non-loopback, non-virtual interface with an IPv4 address".into())
    })?;
    Ok(Chosen {
        name: n.name.clone(),
        ip: n.primary_ip().unwrap_or(IpAddr::from([0, 0, 0, 0])),
        why: if is_mgmt(n) {
            "default rule (only the management interface qualifies)"
        } else {
            "default rule"
        },
    })
}

/// Other local interfaces worth probing when the chosen one does not reach its peers: up,
/// not loopback, with an IPv4 address, not the chosen one; at most `limit`.
pub fn alternatives<'a>(nics: &'a [Nic], chosen: &str, limit: usize) -> Vec<&'a Nic> {
    let mut out: Vec<&Nic> = nics
        .iter()
        .filter(|n| {
            n.name != chosen
                && n.up
                && n.kind != NicKind::Loopback
                && n.addrs.iter().any(|a| a.ip.is_ipv4())
        })
        .collect();
    out.sort_by_key(|n| (n.kind != NicKind::Ordinary, n.name.clone()));
    out.truncate(limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Vec<Nic> {
        let mut lo = Nic::fixture("lo", "127.0.0.1");
        lo.kind = NicKind::Loopback;
        let mut br = Nic::fixture("cni0", "10.244.0.1");
        br.kind = NicKind::Bridge;
        vec![
            lo,
            br,
            Nic::fixture("mgmt0", "198.19.0.10"),
            Nic::fixture("data0", "198.18.0.10"),
            Nic::fixture("docker0", "172.17.0.1"),
        ]
    }

    fn rule(ifname: Option<&str>, addr: Option<&str>, mgmt: Option<&str>) -> NicRule {
        NicRule {
            socket_ifname: ifname.map(|s| IfnameMatcher::parse(s).unwrap()),
            data_address: addr.map(|a| a.parse().unwrap()),
            management: mgmt.map(str::to_owned),
        }
    }

    #[test]
    fn socket_ifname_picks_the_first_matching_interface() {
        let c = select_data_nic(&host(), &rule(Some("data"), None, None)).unwrap();
        assert_eq!(c.name, "data0");
        assert_eq!(c.ip.to_string(), "198.18.0.10");
        let c = select_data_nic(&host(), &rule(Some("^lo,cni,docker,data"), None, None)).unwrap();
        assert_eq!(c.name, "mgmt0", "exclusion leaves only mgmt0");
    }

    #[test]
    fn socket_ifname_matching_nothing_names_every_interface() {
        let e = select_data_nic(&host(), &rule(Some("=eth0"), None, None)).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("=eth0"), "{s}");
        assert!(s.contains("data0 198.18.0.10 up"), "{s}");
    }

    #[test]
    fn down_interfaces_are_never_chosen() {
        let mut nics = host();
        nics.iter_mut().find(|n| n.name == "data0").unwrap().up = false;
        let c = select_data_nic(&nics, &rule(Some("data,mgmt"), None, None)).unwrap();
        assert_eq!(c.name, "mgmt0");
        let e = select_data_nic(&nics, &rule(None, Some("198.18.0.10"), None)).unwrap_err();
        assert!(e.reason.contains("down"), "{e}");
    }

    #[test]
    fn the_data_address_decides_without_socket_ifname() {
        let c = select_data_nic(&host(), &rule(None, Some("198.19.0.10"), None)).unwrap();
        assert_eq!(c.name, "mgmt0");
        let e = select_data_nic(&host(), &rule(None, Some("10.9.9.9"), None)).unwrap_err();
        assert!(e.reason.contains("10.9.9.9"));
    }

    #[test]
    fn the_data_address_breaks_ties_among_socket_ifname_matches() {
        let c =
            select_data_nic(&host(), &rule(Some("data,mgmt"), Some("198.19.0.10"), None)).unwrap();
        assert_eq!(c.name, "mgmt0");
    }

    #[test]
    fn the_default_rule_skips_loopback_bridges_containers_and_prefers_non_management() {
        let c = select_data_nic(&host(), &rule(None, None, Some("data0"))).unwrap();
        assert_eq!(c.name, "mgmt0");
        let c = select_data_nic(&host(), &rule(None, None, Some("mgmt0"))).unwrap();
        assert_eq!(c.name, "data0");
        assert_eq!(c.why, "default rule");
        let only_virtual: Vec<Nic> = host()
            .into_iter()
            .filter(|n| !n.name.ends_with('0') || n.name == "docker0")
            .collect();
        assert!(select_data_nic(&only_virtual, &NicRule::default()).is_err());
    }

    #[test]
    fn alternatives_exclude_the_chosen_and_loopback_and_put_ordinary_first() {
        let nics = host();
        let alts: Vec<&str> = alternatives(&nics, "mgmt0", 8)
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(alts, ["data0", "cni0", "docker0"]);
        assert_eq!(alternatives(&nics, "mgmt0", 1).len(), 1);
    }
}
