//! The rank table's servers cross-checked against the group's members: every server's
//! address must be the data address (or a NIC address) that the `HcommNode` of a node
//! running one of the group's member Pods publishes. The table lives in the tenant's
//! namespace, so the tenant can write any routable host into it; `HcommNode`s are
//! cluster-scoped and written only by the agents, so they are what an address is checked
//! against. The check runs before anything is dialled, at verification and again at every
//! epoch's join ([`super::stages`]), beside [`super::ranktable::check_servers`].
//!
//! Pure ([`check_members`]) apart from [`fetch`], which reads the Pods and `HcommNode`s.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hcomm_crds::HcommNode;
use k8s_openapi::api::core::v1::Pod;

use super::group::ReadAt;
use super::ranktable::{PeerRefusal, RankTable};
use crate::error::Result;

/// The addresses of the nodes running the group's member Pods, by node name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberAddresses {
    pub by_node: BTreeMap<String, BTreeSet<IpAddr>>,
}

impl MemberAddresses {
    /// The node whose published addresses include `ip`, if any.
    pub fn node_of(&self, ip: IpAddr) -> Option<&str> {
        self.by_node
            .iter()
            .find(|(_, ips)| ips.contains(&ip))
            .map(|(n, _)| n.as_str())
    }

    /// Adds what a node's `HcommNode` publishes: its data address and its NICs'
    /// addresses (CIDR notation; the prefix length is dropped). Unparsable entries are
    /// skipped: they can match no table address either.
    pub fn add_node(&mut self, node: &HcommNode) {
        let name = node.spec.node_name.clone();
        let entry = self.by_node.entry(name).or_default();
        let Some(status) = &node.status else { return };
        let nic_addresses = status
            .nics
            .iter()
            .flat_map(|n| n.addresses.iter())
            .map(|a| a.split('/').next().unwrap_or_default());
        for a in status
            .data_address
            .as_deref()
            .into_iter()
            .chain(nic_addresses)
        {
            if let Ok(ip) = a.parse::<IpAddr>() {
                entry.insert(ip);
            }
        }
    }
}

/// Every server of `table` has the address of a node running one of the group's members
/// (pure). Runs after [`super::ranktable::check_servers`], which already refused anything
/// that is not an IP address.
pub fn check_members(table: &RankTable, members: &MemberAddresses) -> Result<(), PeerRefusal> {
    for s in table.servers() {
        let addr = s.host_address();
        let Ok(ip) = addr.parse::<IpAddr>() else {
            return Err(PeerRefusal::NotAnAddress {
                server: s.server_id.to_owned(),
                addr: addr.to_owned(),
            });
        };
        if members.node_of(ip).is_none() {
            return Err(PeerRefusal::NotAMember {
                server: s.server_id.to_owned(),
                addr: ip,
            });
        }
    }
    Ok(())
}

/// Both checks of a table (pure): [`super::ranktable::check_servers`]'s static rules, then
/// [`check_members`]. Verification, every join and an early weight sync's sources
/// ([`super::early_sync`]) run this before dialling anything the table names.
pub fn check_table(
    table: &RankTable,
    members: &MemberAddresses,
    rules: &PeerRules,
) -> Result<(), PeerRefusal> {
    super::ranktable::check_servers(
        table,
        rules.comm_port_base,
        &rules.service_ports,
        rules.allow_loopback,
    )?;
    check_members(table, members)
}

/// The agent's configuration the static checks need.
#[derive(Debug, Clone)]
pub struct PeerRules {
    pub comm_port_base: u16,
    /// The node's own service ports.
    pub service_ports: Vec<u16>,
    /// `--allow-loopback-peers`.
    pub allow_loopback: bool,
}

impl PeerRules {
    pub fn from_config(cfg: &crate::config::AgentConfig) -> PeerRules {
        PeerRules {
            comm_port_base: cfg.comm_port_base,
            service_ports: cfg.service_ports(),
            allow_loopback: cfg.allow_loopback_peers,
        }
    }
}

/// The nodes of the group's member Pods (every Pod labelled with the group, leaving or
/// not: a table may still name a member on its way out) and the addresses their
/// `HcommNode`s publish. A node without an `HcommNode` contributes no address.
///
/// With the table's own `resourceVersion` (`table_revision`), the Pods are read no older
/// than the table, so every member the operator created before writing it is there, and
/// the `HcommNode`s from the API server's cache: an agent publishes its node long before
/// a member is placed there (the operator places members from its own cached copy of
/// them, fed by the same cache), and republishes it only when the node's facts change.
/// A read at the table's version of the rarely written `HcommNode`s would wait for the
/// cache to learn of a newer revision (40 ms on the testbed). Without a revision, both
/// are read at the latest.
pub async fn fetch(
    client: &kube::Client,
    namespace: &str,
    group: &str,
    table_revision: Option<&str>,
) -> Result<MemberAddresses> {
    let (pods_at, nodes_at) = match table_revision {
        Some(rv) => (ReadAt::NotOlderThan(rv.to_owned()), ReadAt::Cache),
        None => (ReadAt::Latest, ReadAt::Latest),
    };
    let begun = std::time::Instant::now();
    let pods: Vec<Pod> =
        super::group::fetch_member_pods_at(client, namespace, group, &pods_at).await?;
    tracing::debug!(took = ?begun.elapsed(), pods = pods.len(), "the group's member Pods listed");
    let nodes: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let mut out = MemberAddresses::default();
    let begun = std::time::Instant::now();
    let read =
        super::group::fetch_hcomm_nodes(client, nodes.into_iter().collect(), nodes_at).await?;
    tracing::debug!(took = ?begun.elapsed(), nodes = read.len(), "their nodes' HcommNodes read");
    for (node, found) in read {
        match found {
            Some(n) => out.add_node(&n),
            None => {
                out.by_node.entry(node).or_default();
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::node::{HcommNodeSpec, HcommNodeStatus, NicInventory, NicRole};

    const TABLE: &str = r#"{"version":"1.0","server_count":"2","status":"completed","server_list":[
      {"server_id":"host-0","host_ip":"198.18.0.10","device":[{"device_id":"0","rank_id":"0"}]},
      {"server_id":"host-1","host_ip":"198.18.0.11","device":[{"device_id":"0","rank_id":"1"}]}]}"#;

    fn node(name: &str, data: Option<&str>, nics: &[&str]) -> HcommNode {
        let mut n = HcommNode::new(
            name,
            HcommNodeSpec {
                node_name: name.into(),
            },
        );
        n.status = Some(HcommNodeStatus {
            data_address: data.map(str::to_owned),
            nics: vec![NicInventory {
                name: "eth0".into(),
                addresses: nics.iter().map(|s| (*s).to_owned()).collect(),
                speed_mbps: None,
                numa_node: None,
                up: true,
                role: NicRole::Data,
            }],
            ..Default::default()
        });
        n
    }

    fn members(nodes: &[HcommNode]) -> MemberAddresses {
        let mut m = MemberAddresses::default();
        for n in nodes {
            m.add_node(n);
        }
        m
    }

    #[test]
    fn a_table_of_member_nodes_data_or_nic_addresses_passes() {
        let t = super::super::ranktable::parse(TABLE).unwrap();
        let m = members(&[
            node("host-0", Some("198.18.0.10"), &[]),
            node("host-1", None, &["198.18.0.11/24", "fe80::1/64"]),
        ]);
        assert_eq!(check_members(&t, &m), Ok(()));
        assert_eq!(m.node_of("198.18.0.11".parse().unwrap()), Some("host-1"));
    }

    #[test]
    fn a_routable_host_that_runs_no_member_is_refused_naming_its_server() {
        let t = super::super::ranktable::parse(TABLE).unwrap();
        // host-1's Pod is there but its node publishes another address; a node without
        // an HcommNode publishes none.
        let m = members(&[
            node("host-0", Some("198.18.0.10"), &[]),
            node("host-1", Some("198.18.0.99"), &[]),
        ]);
        let e = check_members(&t, &m).unwrap_err();
        assert_eq!(
            e,
            PeerRefusal::NotAMember {
                server: "host-1".into(),
                addr: "198.18.0.11".parse().unwrap()
            }
        );
        assert!(e.to_string().contains("host-1"), "{e}");
        let mut only_me = members(&[node("host-0", Some("198.18.0.10"), &[])]);
        only_me.by_node.entry("host-1".into()).or_default();
        assert!(matches!(
            check_members(&t, &only_me),
            Err(PeerRefusal::NotAMember { .. })
        ));
    }

    #[test]
    fn an_early_syncs_sources_pass_the_same_rules_as_any_table_dialled_from() {
        let rules = PeerRules {
            comm_port_base: 10000,
            service_ports: vec![9400],
            allow_loopback: false,
        };
        let m = members(&[
            node("host-0", Some("198.18.0.10"), &[]),
            node("host-1", Some("198.18.0.11"), &[]),
        ]);
        let t = super::super::ranktable::parse(TABLE).unwrap();
        assert_eq!(check_table(&t, &m, &rules), Ok(()));
        let stranger = TABLE.replace("198.18.0.11", "198.18.0.99");
        let t = super::super::ranktable::parse(&stranger).unwrap();
        assert!(matches!(
            check_table(&t, &m, &rules),
            Err(PeerRefusal::NotAMember { .. })
        ));
        let metadata = TABLE.replace("198.18.0.11", "169.254.169.254");
        let t = super::super::ranktable::parse(&metadata).unwrap();
        assert!(check_table(&t, &m, &rules).is_err());
        // Device 250: past any node's 64 devices (on port base 10000, the kubelet's port).
        let kubelet = TABLE.replace(
            r#""device_id":"0","rank_id":"1""#,
            r#""device_id":"250","rank_id":"1""#,
        );
        let t = super::super::ranktable::parse(&kubelet).unwrap();
        assert!(check_table(&t, &m, &rules).is_err());
    }

    #[test]
    fn a_node_without_status_or_with_garbage_addresses_adds_nothing() {
        let mut bare = node("host-0", None, &[]);
        bare.status = None;
        let garbage = node("host-1", Some("not-an-ip"), &["also/garbage"]);
        let m = members(&[bare, garbage]);
        assert!(m.by_node.values().all(BTreeSet::is_empty), "{m:?}");
    }
}
