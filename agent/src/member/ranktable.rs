//! What a member derives from its group's rank table (pure): its ranks and devices, its
//! peers' data addresses, and the agent-side control domain (one rank per member) it
//! joins. The table itself — format, parsing, HCCL's load rules — is
//! `hcomm_crds::rank_table`.
//!
//! Control domain: members hold `devicesPerMember` consecutive ranks, so member control
//! rank = first rank / devicesPerMember and world = ranks / devicesPerMember. Each member's
//! endpoint listens on `comm_port_base + <its first device id>` on its node's data address
//! (device ids are unique per node, so members on one node never collide), which makes the
//! rendezvous root computable by everyone from the table alone: the holder of rank 0. The
//! node's address is the table's `host_ip` (else `server_id`), never `device_ip`: the
//! control domain runs over the host network, and tables may omit device addresses.

use std::net::{IpAddr, SocketAddr};

use hcomm_crds::contract::PodReason;

pub use hcomm_crds::rank_table::{
    KEY_EPOCH, KEY_RANK_TABLE, RankTable, ServerView, ValidateOptions,
};

/// Parses a published table and checks it against the TCP rule set (HCCL applies its
/// full set, dense ranks included, when it loads the file; the operator checks an hccl
/// group's table against it before publishing). Rank ids may have holes: a member that
/// joined beside the one it replaces (a rolling update, a node drain) keeps its ranks
/// after the old one leaves; the control domain numbers the ranks densely ([`plan`]). An
/// empty table is what the operator publishes for a group without members (scaled to zero
/// or being deleted); it parses, and no member finds itself in it.
pub fn parse(json: &str) -> Result<RankTable, String> {
    let table = RankTable::parse(json).map_err(|e| e.to_string())?;
    if table.world() > 0 {
        hcomm_crds::rank_table::validate(&table, ValidateOptions::TCP)
            .map_err(|e| format!("invalid rank table: {e}"))?;
    }
    Ok(table)
}

/// The table's rank ids in order: a rank's position here is its rank in the control
/// domain (`0..world`), whatever holes the ids have.
fn rank_ids(table: &RankTable) -> Vec<u32> {
    let mut ids: Vec<u32> = table
        .servers()
        .iter()
        .flat_map(|s| s.devices.iter().map(|d| d.rank_id))
        .collect();
    ids.sort_unstable();
    ids
}

/// The server of this node: by name, else by data address.
pub fn server_of<'t>(
    table: &'t RankTable,
    node: &str,
    data_ip: Option<&str>,
) -> Option<ServerView<'t>> {
    let servers = table.servers();
    let by_name = servers.iter().position(|s| s.server_id == node);
    let index = by_name.or_else(|| {
        servers
            .iter()
            .position(|s| Some(s.host_address()) == data_ip)
    })?;
    servers.into_iter().nth(index)
}

/// The (rank, device) pairs of a member: the entries of its server whose device is one of
/// `devices`, in rank order.
pub fn member_ranks(server: &ServerView<'_>, devices: &[i32]) -> Vec<(u32, i32)> {
    let mut v: Vec<(u32, i32)> = server
        .devices
        .iter()
        .filter_map(|d| Some((d.rank_id, i32::try_from(d.device_id).ok()?)))
        .filter(|(_, device)| devices.contains(device))
        .collect();
    v.sort_unstable();
    v
}

/// A member's place in the agent's control domain at one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlan {
    pub rank: usize,
    pub world: usize,
    /// The rendezvous root: the endpoint of the table's lowest rank (rank 0 of the domain).
    pub root: SocketAddr,
    /// The port this member's endpoint listens on.
    pub own_port: u16,
    /// The devices of this member's ranks, in rank order (for the mapping check).
    pub devices_in_rank_order: Vec<i32>,
    /// Peer nodes (server id, host ip), without this member's own node.
    pub peers: Vec<(String, String)>,
}

/// Derives the control plan of the member holding `devices` on `node`.
pub fn plan(
    table: &RankTable,
    node: &str,
    data_ip: Option<&str>,
    devices: &[i32],
    comm_port_base: u16,
) -> Result<ControlPlan, String> {
    let dpm = devices.len().max(1);
    let server = server_of(table, node, data_ip)
        .ok_or_else(|| format!("node {node} is not in the rank table"))?;
    let mine = member_ranks(&server, devices);
    let first = mine
        .first()
        .ok_or_else(|| format!("no rank of node {node} uses devices {devices:?}"))?;
    let ids = rank_ids(table);
    let lowest = *ids.first().ok_or("the rank table has no ranks")?;
    let position = ids
        .binary_search(&first.0)
        .map_err(|_| format!("rank {} is not in the table", first.0))?;
    let (root_server, root_dev) = table
        .rank(lowest)
        .ok_or_else(|| format!("the rank table has no rank {lowest}"))?;
    let root_ip: IpAddr = root_server.host_address().parse().map_err(|_| {
        format!(
            "rank 0's host_ip {:?} is not an IP address",
            root_server.host_address()
        )
    })?;
    let port = |dev: i64| -> Result<u16, String> {
        u16::try_from(i64::from(comm_port_base) + dev).map_err(|_| "port out of range".to_owned())
    };
    let min_dev = *devices.iter().min().unwrap_or(&0);
    // `server` is what `sources` finds as this node's own: the peers are the rest.
    let peers = sources(table, node, data_ip);
    Ok(ControlPlan {
        rank: position / dpm,
        world: ids.len() / dpm,
        root: SocketAddr::new(root_ip, port(i64::from(root_dev.device_id))?),
        own_port: port(i64::from(min_dev))?,
        devices_in_rank_order: mine.iter().map(|(_, d)| *d).collect(),
        peers,
    })
}

/// The servers of `table` other than this node's own (by name, else by data address), as
/// (server id, host address): who may hold the weights for a member that is not in the
/// table yet (see `super::early_sync`).
pub fn sources(table: &RankTable, node: &str, data_ip: Option<&str>) -> Vec<(String, String)> {
    let own = server_of(table, node, data_ip).map(|s| s.server_id.to_owned());
    let mut v: Vec<(String, String)> = table
        .servers()
        .iter()
        .filter(|s| Some(s.server_id) != own.as_deref())
        .map(|s| (s.server_id.to_owned(), s.host_address().to_owned()))
        .collect();
    v.dedup();
    v
}

/// Highest device id a table may give: a node holds at most 64 NPUs, so a member's
/// endpoint port stays within `comm_port_base ..= comm_port_base + 63`.
pub const MAX_DEVICE_ID: i64 = 63;

/// Ports of the node's own services that no table-derived endpoint may be: the kubelet
/// (10250, read-only 10255) and kube-proxy (10249, 10256). The agent's own ports are
/// added from its configuration ([`crate::config::AgentConfig::service_ports`]).
pub const KUBE_NODE_PORTS: [u16; 4] = [10249, 10250, 10255, 10256];

/// Why the agent will not connect where a rank table points: the table steers which
/// addresses and ports the agent dials, so it must never point at the node itself, at
/// link-local services (cloud metadata at 169.254.169.254) or at a node service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerRefusal {
    #[error("server {server}: {addr:?} is not an IP address")]
    NotAnAddress { server: String, addr: String },
    #[error("server {server}: {addr} is a {kind} address, never a peer")]
    NotAPeerAddress {
        server: String,
        addr: IpAddr,
        kind: &'static str,
    },
    #[error(
        "server {server}: device id {device} is outside 0..={MAX_DEVICE_ID}, so its port would leave the comm port range"
    )]
    DeviceOutOfRange { server: String, device: i64 },
    #[error("server {server}: port {port} is one of the node's service ports")]
    ServicePort { server: String, port: u16 },
    /// The address is a routable host, but no node running a member of the group
    /// publishes it (see [`super::ranktable_members`]).
    #[error("server {server}: {addr} is not the address of a node running a member of the group")]
    NotAMember { server: String, addr: IpAddr },
    /// The group's members could not be read, so the table's servers cannot be checked.
    #[error("the group's members could not be read to check the rank table's servers: {0}")]
    MembersUnknown(String),
}

impl PeerRefusal {
    /// The condition reason and Event reason of every refusal.
    pub const REASON: PodReason = PodReason::PeerRefused;
}

/// The kind of address that is never a peer, if `ip` is one.
fn not_a_peer(ip: IpAddr, allow_loopback: bool) -> Option<&'static str> {
    match ip {
        _ if ip.is_loopback() && !allow_loopback => Some("loopback"),
        _ if ip.is_unspecified() => Some("unspecified"),
        _ if ip.is_multicast() => Some("multicast"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("broadcast"),
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("link-local"),
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .and_then(|v4| not_a_peer(IpAddr::V4(v4), allow_loopback)),
        IpAddr::V4(_) => None,
    }
}

/// `addr` of `server` as a peer address, or why it cannot be one. `allow_loopback`: the
/// agent's `--allow-loopback-peers` (a testbed whose hosts are loopback addresses).
pub fn peer_address(server: &str, addr: &str, allow_loopback: bool) -> Result<IpAddr, PeerRefusal> {
    let ip: IpAddr = addr.parse().map_err(|_| PeerRefusal::NotAnAddress {
        server: server.to_owned(),
        addr: addr.to_owned(),
    })?;
    match not_a_peer(ip, allow_loopback) {
        Some(kind) => Err(PeerRefusal::NotAPeerAddress {
            server: server.to_owned(),
            addr: ip,
            kind,
        }),
        None => Ok(ip),
    }
}

/// Checks every address and port a use of `table` could dial or listen on — a member's
/// control plan (its root and peers are the table's servers) or the sources of an early
/// weight sync ([`sources`]): every server's address, and the endpoint port of every
/// device (so a forged device id cannot turn into the kubelet's port). `service_ports` are
/// the node's own; `allow_loopback` as in [`peer_address`].
pub fn check_servers(
    table: &RankTable,
    comm_port_base: u16,
    service_ports: &[u16],
    allow_loopback: bool,
) -> Result<(), PeerRefusal> {
    for s in table.servers() {
        peer_address(s.server_id, s.host_address(), allow_loopback)?;
        for d in &s.devices {
            let device = i64::from(d.device_id);
            if !(0..=MAX_DEVICE_ID).contains(&device) {
                return Err(PeerRefusal::DeviceOutOfRange {
                    server: s.server_id.to_owned(),
                    device,
                });
            }
            let port = i64::from(comm_port_base) + device;
            let port = u16::try_from(port).map_err(|_| PeerRefusal::DeviceOutOfRange {
                server: s.server_id.to_owned(),
                device,
            })?;
            if service_ports.contains(&port) || KUBE_NODE_PORTS.contains(&port) {
                return Err(PeerRefusal::ServicePort {
                    server: s.server_id.to_owned(),
                    port,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // No device_ip anywhere (all-or-none), as the operator publishes for the tcp backend.
    const TABLE: &str = r#"{"version":"1.0","server_count":"2","status":"completed","server_list":[
      {"server_id":"host-0","host_ip":"198.18.0.10","device":[
        {"device_id":"0","rank_id":"0"},
        {"device_id":"1","rank_id":"1"},
        {"device_id":"2","rank_id":"2"},{"device_id":"3","rank_id":"3"}]},
      {"server_id":"host-1","host_ip":"198.18.0.11","device":[
        {"device_id":5,"rank_id":5},{"device_id":4,"rank_id":4}]}]}"#;

    #[test]
    fn a_nodes_sources_are_the_other_servers_found_by_name_or_address() {
        let t = parse(TABLE).unwrap();
        let other = |id: &str, ip: &str| (id.to_owned(), ip.to_owned());
        assert_eq!(
            sources(&t, "host-1", None),
            vec![other("host-0", "198.18.0.10")]
        );
        assert_eq!(
            sources(&t, "renamed", Some("198.18.0.10")),
            vec![other("host-1", "198.18.0.11")]
        );
        // A node the table does not hold (a joiner before its epoch's table): every server.
        assert_eq!(sources(&t, "host-9", Some("198.18.0.99")).len(), 2);
    }

    #[test]
    fn string_and_number_fields_both_parse() {
        let t = parse(TABLE).unwrap();
        assert_eq!(t.world(), 6);
        assert_eq!(t.servers()[1].devices[0].device_id, 5);
        assert_eq!(t.servers()[0].host_address(), "198.18.0.10");
    }

    #[test]
    fn repeated_ranks_are_refused() {
        let bad = r#"{"version":"1.0","server_count":"1","status":"completed","server_list":[
            {"server_id":"a","host_ip":"1.1.1.1","device":[
            {"device_id":"0","rank_id":"1"},{"device_id":"1","rank_id":"1"}]}]}"#;
        assert!(
            parse(bad).unwrap_err().contains("rank 1"),
            "{:?}",
            parse(bad)
        );
        assert!(parse("{").is_err());
    }

    /// Members 0 and 1 replaced beside members 2 and 3 (a node drain, a rolling update)
    /// and gone: the table's ids are 4..8, the domain's ranks 0..2, rooted at the lowest.
    #[test]
    fn rank_ids_with_holes_are_numbered_densely_in_the_control_domain() {
        let t = parse(
            r#"{"version":"1.0","server_count":"2","status":"completed","server_list":[
            {"server_id":"host-2","host_ip":"198.18.0.12","device":[
              {"device_id":"0","rank_id":"4"},{"device_id":"1","rank_id":"5"}]},
            {"server_id":"host-3","host_ip":"198.18.0.13","device":[
              {"device_id":"0","rank_id":"6"},{"device_id":"1","rank_id":"7"}]}]}"#,
        )
        .unwrap();
        let first = plan(&t, "host-2", None, &[0, 1], 29600).unwrap();
        let second = plan(&t, "host-3", None, &[0, 1], 29600).unwrap();
        assert_eq!((first.rank, first.world), (0, 2));
        assert_eq!((second.rank, second.world), (1, 2));
        assert_eq!(second.root, "198.18.0.12:29600".parse().unwrap());
    }

    #[test]
    fn the_empty_table_of_a_group_without_members_parses() {
        let t =
            parse(r#"{"version":"1.0","server_count":"0","status":"completed","server_list":[]}"#)
                .unwrap();
        assert_eq!(t.world(), 0);
        assert!(plan(&t, "host-0", None, &[0], 29600).is_err());
    }

    #[test]
    fn the_control_domain_uses_server_id_when_host_ip_is_absent() {
        let t = parse(
            r#"{"version":"1.0","server_count":"1","status":"completed","server_list":[
            {"server_id":"198.18.0.7","device":[{"device_id":"1","rank_id":"0"}]}]}"#,
        )
        .unwrap();
        let p = plan(&t, "198.18.0.7", None, &[1], 29600).unwrap();
        assert_eq!(p.root, "198.18.0.7:29601".parse().unwrap());
    }

    #[test]
    fn a_second_member_on_a_node_gets_its_own_control_rank_and_port() {
        let t = parse(TABLE).unwrap();
        let p = plan(&t, "host-0", None, &[2, 3], 29600).unwrap();
        assert_eq!((p.rank, p.world), (1, 3));
        assert_eq!(p.own_port, 29602);
        assert_eq!(p.root, "198.18.0.10:29600".parse().unwrap());
        assert_eq!(p.devices_in_rank_order, [2, 3]);
        assert_eq!(p.peers, [("host-1".to_owned(), "198.18.0.11".to_owned())]);
    }

    #[test]
    fn the_server_is_found_by_data_address_when_names_differ() {
        let t = parse(TABLE).unwrap();
        let p = plan(&t, "other-name", Some("198.18.0.11"), &[4, 5], 29600).unwrap();
        assert_eq!(p.rank, 2);
        assert_eq!(p.devices_in_rank_order, [4, 5]);
    }

    #[test]
    fn a_member_missing_from_the_table_is_an_error_naming_it() {
        let t = parse(TABLE).unwrap();
        assert!(
            plan(&t, "host-9", None, &[0], 1)
                .unwrap_err()
                .contains("host-9")
        );
        assert!(
            plan(&t, "host-1", None, &[7], 1)
                .unwrap_err()
                .contains("[7]")
        );
    }

    fn table_with(host: &str, device: &str) -> RankTable {
        parse(&format!(
            r#"{{"version":"1.0","server_count":"2","status":"completed","server_list":[
            {{"server_id":"host-0","host_ip":"198.18.0.10","device":[{{"device_id":"0","rank_id":"0"}}]}},
            {{"server_id":"evil","host_ip":"{host}","device":[{{"device_id":"{device}","rank_id":"1"}}]}}]}}"#
        ))
        .unwrap()
    }

    fn check(host: &str, device: &str, base: u16) -> Result<(), PeerRefusal> {
        let t = table_with(host, device);
        check_servers(&t, base, &[7510, 7512], false)
    }

    #[test]
    fn loopback_peers_pass_only_when_allowed_and_nothing_else_does() {
        let t = table_with("127.18.0.11", "3");
        assert!(matches!(
            check_servers(&t, 29600, &[7510], false),
            Err(PeerRefusal::NotAPeerAddress {
                kind: "loopback",
                ..
            })
        ));
        assert_eq!(check_servers(&t, 29600, &[7510], true), Ok(()));
        let t = table_with("169.254.169.254", "3");
        assert!(matches!(
            check_servers(&t, 29600, &[7510], true),
            Err(PeerRefusal::NotAPeerAddress {
                kind: "link-local",
                ..
            })
        ));
    }

    #[test]
    fn a_table_of_member_addresses_and_comm_ports_passes() {
        assert_eq!(check("198.18.0.11", "3", 29600), Ok(()));
        assert_eq!(check("2001:db8::7", "3", 29600), Ok(()));
    }

    #[test]
    fn loopback_link_local_unspecified_and_multicast_peers_are_refused() {
        for (addr, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.9.9.9", "loopback"),
            ("::1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::ffff:127.0.0.1", "loopback"),
        ] {
            let e = check(addr, "1", 29600).unwrap_err();
            assert!(
                matches!(&e, PeerRefusal::NotAPeerAddress { kind: k, .. } if *k == kind),
                "{addr}: {e}"
            );
            assert!(e.to_string().contains("evil"), "names the server: {e}");
        }
        assert!(matches!(
            check("kubelet.local", "1", 29600),
            Err(PeerRefusal::NotAnAddress { .. })
        ));
    }

    #[test]
    fn a_device_id_cannot_turn_into_a_node_service_port() {
        // comm_port_base 10000 + device 250 = the kubelet's 10250.
        assert!(matches!(
            check("198.18.0.11", "250", 10000),
            Err(PeerRefusal::DeviceOutOfRange { device: 250, .. })
        ));
        // Inside the device range but on the kubelet's port, or the agent's own.
        assert!(matches!(
            check("198.18.0.11", "50", 10200),
            Err(PeerRefusal::ServicePort { port: 10250, .. })
        ));
        assert!(matches!(
            check("198.18.0.11", "4", 7508),
            Err(PeerRefusal::ServicePort { port: 7512, .. })
        ));
        assert_eq!(PeerRefusal::REASON, PodReason::PeerRefused);
    }
}
