//! Network interfaces: parsed from `ip -j addr` (addresses, flags) and `/sys/class/net`
//! (speed, NUMA node, kind). The parsers are pure; [`collect`] does the I/O and never
//! fails — a missing tool or file leaves a field unknown.

use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

/// What kind of interface this is, for the data-NIC rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicKind {
    /// `lo`.
    Loopback,
    /// A Linux bridge (`/sys/class/net/<n>/bridge` exists).
    Bridge,
    /// A container or overlay interface by name (docker, cni, flannel, cali, veth, ...).
    Virtual,
    /// Anything else: physical NICs, and the veth pairs/macvlans that stand in for them.
    Ordinary,
}

/// Whether `a` and `b` share their first `prefix` bits (pure; false across families).
fn same_prefix(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// One address of an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub ip: IpAddr,
    pub prefix: u8,
}

/// One interface, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub name: String,
    pub addrs: Vec<IfAddr>,
    pub up: bool,
    pub kind: NicKind,
    pub speed_mbps: Option<i64>,
    pub numa_node: Option<i32>,
}

impl Nic {
    /// The first IPv4 address, else the first address.
    pub fn primary_ip(&self) -> Option<IpAddr> {
        self.addrs
            .iter()
            .find(|a| a.ip.is_ipv4())
            .or_else(|| self.addrs.first())
            .map(|a| a.ip)
    }

    /// Whether the interface holds `ip`. On the loopback interface that is every address
    /// of its loopback prefixes: Linux answers all of `127.0.0.1/8` locally and lets a
    /// process bind any of them without configuring it — which is how hosts simulated on
    /// loopback addresses (`127.18.0.10`, ...) get distinct data addresses without root.
    pub fn holds(&self, ip: IpAddr) -> bool {
        self.addrs.iter().any(|a| {
            a.ip == ip
                || (self.kind == NicKind::Loopback
                    && a.ip.is_loopback()
                    && ip.is_loopback()
                    && same_prefix(a.ip, ip, a.prefix))
        })
    }

    /// A test fixture: an up, ordinary interface with one IPv4 /24 address.
    pub fn fixture(name: &str, ip: &str) -> Nic {
        Nic {
            name: name.into(),
            addrs: vec![IfAddr {
                ip: ip.parse().expect("fixture ip"),
                prefix: 24,
            }],
            up: true,
            kind: kind_by_name(name, false),
            speed_mbps: None,
            numa_node: None,
        }
    }
}

/// Name prefixes of container and overlay interfaces, never chosen by the default rule.
pub const VIRTUAL_PREFIXES: &[&str] = &[
    "docker",
    "veth",
    "cni",
    "flannel",
    "cali",
    "virbr",
    "vxlan",
    "tun",
    "tap",
    "kube-",
    "cilium",
    "weave",
    "lxc",
    "br-",
    "genev",
    "nodelocal",
];

/// Classifies by name (and whether sysfs says it is a bridge).
pub fn kind_by_name(name: &str, is_bridge: bool) -> NicKind {
    if name == "lo" {
        NicKind::Loopback
    } else if is_bridge {
        NicKind::Bridge
    } else if VIRTUAL_PREFIXES.iter().any(|p| name.starts_with(p)) {
        NicKind::Virtual
    } else {
        NicKind::Ordinary
    }
}

#[derive(Deserialize)]
struct IpLink {
    ifname: String,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    operstate: Option<String>,
    #[serde(default)]
    link_type: Option<String>,
    #[serde(default)]
    addr_info: Vec<IpAddrInfo>,
}

#[derive(Deserialize)]
struct IpAddrInfo {
    #[serde(default)]
    local: Option<String>,
    #[serde(default)]
    prefixlen: Option<u8>,
}

/// Parses `ip -j addr` output. Unparseable input yields no interfaces.
pub fn parse_ip_json(json: &str) -> Vec<Nic> {
    let links: Vec<IpLink> = serde_json::from_str(json).unwrap_or_default();
    links
        .into_iter()
        .map(|l| {
            let up = l.operstate.as_deref() == Some("UP")
                || (l.flags.iter().any(|f| f == "UP") && l.flags.iter().any(|f| f == "LOWER_UP"));
            let loopback = l.link_type.as_deref() == Some("loopback");
            Nic {
                kind: if loopback {
                    NicKind::Loopback
                } else {
                    kind_by_name(&l.ifname, false)
                },
                addrs: l
                    .addr_info
                    .iter()
                    .filter_map(|a| {
                        Some(IfAddr {
                            ip: a.local.as_deref()?.parse().ok()?,
                            prefix: a.prefixlen.unwrap_or(32),
                        })
                    })
                    .collect(),
                name: l.ifname,
                up,
                speed_mbps: None,
                numa_node: None,
            }
        })
        .collect()
}

/// Parses a sysfs integer where negative means unknown (`speed`, `numa_node`).
pub fn parse_sysfs_int(text: &str) -> Option<i64> {
    text.trim().parse::<i64>().ok().filter(|v| *v >= 0)
}

/// Observes this host's interfaces: `ip -j addr` plus sysfs. Never fails.
pub async fn collect(sysfs_net: &Path) -> Vec<Nic> {
    let out = tokio::process::Command::new("ip")
        .args(["-j", "addr"])
        .output()
        .await;
    let mut nics = match out {
        Ok(o) if o.status.success() => parse_ip_json(&String::from_utf8_lossy(&o.stdout)),
        _ => Vec::new(),
    };
    for nic in &mut nics {
        let dir = sysfs_net.join(&nic.name);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        nic.speed_mbps = read("speed").as_deref().and_then(parse_sysfs_int);
        nic.numa_node = read("device/numa_node")
            .as_deref()
            .and_then(parse_sysfs_int)
            .map(|v| v as i32);
        if nic.kind != NicKind::Loopback && dir.join("bridge").exists() {
            nic.kind = NicKind::Bridge;
        }
    }
    nics
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP_JSON: &str = r#"[
      {"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"operstate":"UNKNOWN",
       "link_type":"loopback","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
      {"ifindex":2,"ifname":"data0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],
       "operstate":"UP","link_type":"ether","addr_info":[
         {"family":"inet","local":"198.18.0.10","prefixlen":24},
         {"family":"inet6","local":"fe80::1","prefixlen":64}]},
      {"ifindex":3,"ifname":"mgmt0","flags":["NO-CARRIER","BROADCAST","UP"],
       "operstate":"DOWN","link_type":"ether","addr_info":[
         {"family":"inet","local":"198.19.0.10","prefixlen":24}]},
      {"ifindex":4,"ifname":"docker0","flags":["UP","LOWER_UP"],"operstate":"UP",
       "link_type":"ether","addr_info":[]}
    ]"#;

    #[test]
    fn ip_json_yields_names_addresses_state_and_kind() {
        let nics = parse_ip_json(IP_JSON);
        assert_eq!(nics.len(), 4);
        assert_eq!(nics[0].kind, NicKind::Loopback);
        assert!(nics[0].up, "lo is UNKNOWN but UP+LOWER_UP");
        assert_eq!(nics[1].name, "data0");
        assert_eq!(nics[1].primary_ip(), Some("198.18.0.10".parse().unwrap()));
        assert_eq!(nics[1].addrs.len(), 2);
        assert!(!nics[2].up, "no carrier is down");
        assert_eq!(nics[3].kind, NicKind::Virtual);
    }

    #[test]
    fn the_loopback_interface_holds_its_whole_loopback_prefix_and_others_only_their_addresses() {
        let nics = parse_ip_json(IP_JSON);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(nics[0].holds(ip("127.0.0.1")));
        assert!(
            nics[0].holds(ip("127.18.0.10")),
            "all of 127/8 is local on lo"
        );
        assert!(!nics[0].holds(ip("198.18.0.10")));
        assert!(nics[1].holds(ip("198.18.0.10")));
        assert!(
            !nics[1].holds(ip("198.18.0.11")),
            "a peer in the subnet is not ours"
        );
        assert!(!nics[1].holds(ip("127.18.0.10")));
    }

    #[test]
    fn garbage_ip_output_is_no_interfaces_not_a_crash() {
        assert!(parse_ip_json("not json").is_empty());
        assert!(parse_ip_json("").is_empty());
    }

    #[test]
    fn negative_or_invalid_sysfs_values_are_unknown() {
        assert_eq!(parse_sysfs_int("25000\n"), Some(25000));
        assert_eq!(parse_sysfs_int("-1"), None);
        assert_eq!(parse_sysfs_int(""), None);
    }
}
