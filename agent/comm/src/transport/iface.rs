//! Resolving the bind interface: an IP address, or an interface name in the NCCL/HCCL
//! `SOCKET_IFNAME` syntax (`eth` prefix match, `=eth0` exact, `^docker,lo` exclusion,
//! comma-separated lists). Picking the wrong NIC is a classic silent failure, so the chosen
//! interface and address are named in every network error.

use std::net::IpAddr;

use crate::api::CommError;

/// Where an endpoint binds (its listener and its outgoing connections).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindSpec {
    Addr(IpAddr),
    /// `SOCKET_IFNAME` syntax.
    Interface(String),
}

impl BindSpec {
    /// An IP literal becomes `Addr`, anything else an interface pattern.
    pub fn parse(s: &str) -> BindSpec {
        match s.trim().parse::<IpAddr>() {
            Ok(ip) => BindSpec::Addr(ip),
            Err(_) => BindSpec::Interface(s.trim().to_string()),
        }
    }

    pub fn loopback() -> BindSpec {
        BindSpec::Addr(IpAddr::from([127, 0, 0, 1]))
    }

    /// The address to bind and a description for errors ("eth1 (10.0.0.2)").
    pub fn resolve(&self) -> Result<(IpAddr, String), CommError> {
        match self {
            BindSpec::Addr(ip) => Ok((*ip, ip.to_string())),
            BindSpec::Interface(pattern) => {
                let ifs = if_addrs::get_if_addrs().map_err(|e| CommError::Interface {
                    spec: pattern.clone(),
                    reason: format!("cannot list interfaces: {e}"),
                })?;
                let mut cands: Vec<(String, IpAddr)> = ifs
                    .into_iter()
                    .filter(|i| matches_ifname(pattern, &i.name))
                    .map(|i| (i.name.clone(), i.ip()))
                    .collect();
                // Deterministic: by name, IPv4 first.
                cands.sort_by_key(|(n, ip)| (n.clone(), ip.is_ipv6()));
                let (name, ip) = cands
                    .into_iter()
                    .next()
                    .ok_or_else(|| CommError::Interface {
                        spec: pattern.clone(),
                        reason: "no interface with an address matches".into(),
                    })?;
                Ok((ip, format!("{name} ({ip})")))
            }
        }
    }
}

/// NCCL's `NCCL_SOCKET_IFNAME` matching: `^` negates the whole list, `=` makes entries exact.
pub fn matches_ifname(pattern: &str, name: &str) -> bool {
    let (negate, rest) = match pattern.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, pattern),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let hit = rest
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if exact {
                name == p
            } else {
                name.starts_with(p)
            }
        });
    hit != negate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_patterns_follow_nccl_syntax() {
        assert!(matches_ifname("eth", "eth0"));
        assert!(!matches_ifname("=eth", "eth0"));
        assert!(matches_ifname("=eth0", "eth0"));
        assert!(matches_ifname("ib,eth", "eth1"));
        assert!(!matches_ifname("^docker,lo", "lo"));
        assert!(matches_ifname("^docker,lo", "eth0"));
    }

    #[test]
    fn loopback_interface_resolves_and_unknown_one_is_named() {
        let (ip, desc) = BindSpec::parse("=lo").resolve().unwrap();
        assert!(ip.is_loopback(), "{desc}");
        let err = BindSpec::parse("nosuchnic9").resolve().unwrap_err();
        assert_eq!(err.category(), "interface");
        assert!(err.to_string().contains("nosuchnic9"));
        assert_eq!(
            BindSpec::parse("10.1.2.3"),
            BindSpec::Addr([10, 1, 2, 3].into())
        );
    }
}
