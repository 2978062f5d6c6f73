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

pub use hcomm_crds::rank_table::{
    KEY_EPOCH, KEY_RANK_TABLE, RankTable, ServerView, ValidateOptions,
};

/// Parses a published table and checks it against the TCP rule set plus dense ranks
/// `0..n-1`, which the agent has always required (HCCL itself applies its full set when it
/// loads the file). An
/// empty table is what the operator publishes for a group without members (scaled to zero
/// or being deleted); it parses, and no member finds itself in it.
pub fn parse(json: &str) -> Result<RankTable, String> {
    let table = RankTable::parse(json).map_err(|e| e.to_string())?;
    if table.world() > 0 {
        let options = ValidateOptions {
            dense_ranks: true,
            ..ValidateOptions::TCP
        };
        hcomm_crds::rank_table::validate(&table, options)
            .map_err(|e| format!("invalid rank table: {e}"))?;
    }
    Ok(table)
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
    /// The rendezvous root: rank 0's endpoint.
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
    let (root_server, root_dev) = table.rank(0).ok_or("the rank table has no rank 0")?;
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
    let mut peers: Vec<(String, String)> = table
        .servers()
        .iter()
        .filter(|s| s.server_id != server.server_id)
        .map(|s| (s.server_id.to_owned(), s.host_address().to_owned()))
        .collect();
    peers.dedup();
    Ok(ControlPlan {
        rank: first.0 as usize / dpm,
        world: table.world() / dpm,
        root: SocketAddr::new(root_ip, port(i64::from(root_dev.device_id))?),
        own_port: port(i64::from(min_dev))?,
        devices_in_rank_order: mine.iter().map(|(_, d)| *d).collect(),
        peers,
    })
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
    fn string_and_number_fields_both_parse() {
        let t = parse(TABLE).unwrap();
        assert_eq!(t.world(), 6);
        assert_eq!(t.servers()[1].devices[0].device_id, 5);
        assert_eq!(t.servers()[0].host_address(), "198.18.0.10");
    }

    #[test]
    fn gaps_or_repeated_ranks_are_refused() {
        let bad = r#"{"version":"1.0","server_count":"1","status":"completed","server_list":[
            {"server_id":"a","host_ip":"1.1.1.1","device":[
            {"device_id":"0","rank_id":"0"},{"device_id":"1","rank_id":"2"}]}]}"#;
        assert!(parse(bad).unwrap_err().contains("out of range"));
        assert!(parse("{").is_err());
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
}
