//! The version agreement of an `hccl` group, part of a member's verification: the NPU
//! driver, firmware and CANN versions of every node the group's members run on, as each
//! node's agent published them in its `HcommNode`, compared before the member is Verified.
//!
//! The rules ([`compare`], pure) and why:
//! - CANN must be equal: HCCL is part of CANN, and ranks of different HCCL releases do not
//!   promise to agree on the rank table's fields, the algorithm chosen for an operation or
//!   the wire protocol between them — a mismatch is a hang or a wrong result, not an error.
//! - The driver must be equal: HCCL's RoCE transport (HCCP, the device's network stack) is
//!   in the driver, and Huawei ships driver, firmware and CANN as one matched set per
//!   release; mixed drivers across the ranks of one communicator are not a supported set.
//! - Firmware: a Warning only. It pairs with the driver on its own node (the driver's
//!   `version.info` lists `compatible_version_fw`), the driver checks that pairing when it
//!   loads, and nothing of it crosses the network between ranks.
//! - Unknown (the agent could not read the version file) never counts as agreeing. A
//!   driver known on one node and unknown on another refuses the member
//!   ([`PodReason::NpuVersionUnknown`]): every NPU node has a driver, so unknown means the
//!   agent cannot see it (a missing chart mount), and the check cannot be made. An unknown
//!   CANN beside a known one is a Warning: CANN usually ships in the worker images, a host
//!   toolkit is optional, and refusing would block nodes that only differ in having one.
//!   Unknown everywhere (CPU nodes, the testbed) leaves nothing to compare.
//!
//! Only `hccl` groups are checked: the TCP engine loads neither CANN nor the driver. The
//! I/O ([`super::versions_stage`]) reads the nodes through the
//! [`Cluster`](super::ports::Cluster) port and waits a little for a node whose agent has not
//! published yet.

use std::collections::BTreeMap;
use std::time::Duration;

use hcomm_crds::contract::{ANNOTATION_DRAIN_REQUESTED, PodReason};
use hcomm_crds::node::UNKNOWN_VERSION;
use hcomm_crds::{Backend, SoftwareVersions};
use k8s_openapi::api::core::v1::Pod;

use crate::error::Result;

/// One node of the group, as its `HcommNode` says; None: no `HcommNode` (or no status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVersions {
    pub node: String,
    pub versions: Option<SoftwareVersions>,
}

/// The outcome: a refusal (reason and message) or none, and warnings for an Event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionCheck {
    pub refusal: Option<(PodReason, String)>,
    pub warnings: Vec<String>,
}

/// How one component is judged.
#[derive(Clone, Copy)]
enum Rule {
    /// Must be equal; an unknown beside a known one refuses (true) or warns (false).
    MustAgree { unknown_refuses: bool },
    /// Differences are warnings.
    WarnOnly,
}

type Field = fn(&SoftwareVersions) -> &str;

const COMPONENTS: [(&str, Field, Rule); 3] = [
    (
        "driver",
        |v| &v.driver,
        Rule::MustAgree {
            unknown_refuses: true,
        },
    ),
    (
        "CANN",
        |v| &v.cann,
        Rule::MustAgree {
            unknown_refuses: false,
        },
    ),
    ("firmware", |v| &v.firmware, Rule::WarnOnly),
];

/// Whether a group with this backend has its versions compared.
pub fn applies(backend: Backend) -> bool {
    backend == Backend::Hccl
}

/// `8.0.RC3 on node-a, node-c; 8.0.RC2 on node-b`.
fn describe(by_value: &BTreeMap<&str, Vec<&str>>) -> String {
    by_value
        .iter()
        .map(|(v, nodes)| format!("{v} on {}", nodes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Compares the group's nodes (pure); see the module's rules.
pub fn compare(nodes: &[NodeVersions]) -> VersionCheck {
    let mut mismatches = Vec::new();
    let mut unknowns = Vec::new();
    let mut warnings = Vec::new();
    for (what, field, rule) in COMPONENTS {
        let mut known: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut unknown: Vec<&str> = Vec::new();
        for n in nodes {
            match n.versions.as_ref().map(field) {
                Some(v) if v != UNKNOWN_VERSION && !v.is_empty() => {
                    known.entry(v).or_default().push(&n.node)
                }
                _ => unknown.push(&n.node),
            }
        }
        if known.len() > 1 {
            let message = format!(
                "{what} differs across the group's nodes: {}",
                describe(&known)
            );
            match rule {
                Rule::MustAgree { .. } => mismatches.push(message),
                Rule::WarnOnly => warnings.push(message),
            }
        } else if !known.is_empty() && !unknown.is_empty() {
            let message = format!(
                "{what} {} but unknown on {}",
                describe(&known),
                unknown.join(", ")
            );
            match rule {
                Rule::MustAgree {
                    unknown_refuses: true,
                } => unknowns.push(format!(
                    "{message} (its agent cannot read the version file: see the chart's agent.ascend paths)"
                )),
                _ => warnings.push(format!("{message}: not compared")),
            }
        }
    }
    let refusal = match (mismatches.is_empty(), unknowns.is_empty()) {
        (true, true) => None,
        (false, _) => Some((PodReason::NpuVersionMismatch, mismatches)),
        (true, false) => Some((PodReason::NpuVersionUnknown, Vec::new())),
    }
    .map(|(reason, mut parts)| {
        parts.extend(unknowns);
        (reason, parts.join("; "))
    });
    VersionCheck { refusal, warnings }
}

/// The nodes of the group's member Pods that are not leaving (deleted, or asked to
/// drain), with `me` (this node) among them, sorted and without repeats (pure).
pub fn member_nodes(pods: &[Pod], me: &str) -> Vec<String> {
    let mut nodes: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !p
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(ANNOTATION_DRAIN_REQUESTED))
        })
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .chain(std::iter::once(me.to_owned()))
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// Each node's `HcommNode` versions (None: not published, or no status yet).
pub async fn node_versions(client: &kube::Client, nodes: Vec<String>) -> Result<Vec<NodeVersions>> {
    let found =
        super::group::fetch_hcomm_nodes(client, nodes, super::group::ReadAt::Latest).await?;
    Ok(found
        .into_iter()
        .map(|(node, n)| NodeVersions {
            versions: n.and_then(|n| n.status).map(|s| s.software),
            node,
        })
        .collect())
}

/// How long a node without a published `HcommNode` is waited for (its agent starting)
/// before it counts as unknown.
pub const NODE_WAIT: Duration = Duration::from_secs(10);

/// How often the nodes are read again meanwhile.
pub const READ_AGAIN: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, driver: &str, firmware: &str, cann: &str) -> NodeVersions {
        NodeVersions {
            node: name.into(),
            versions: Some(SoftwareVersions {
                driver: driver.into(),
                firmware: firmware.into(),
                cann: cann.into(),
                agent: "0.1.0".into(),
            }),
        }
    }

    const U: &str = UNKNOWN_VERSION;

    #[test]
    fn equal_versions_agree_without_warnings() {
        let c = compare(&[
            node("a", "24.1.rc1", "7.1.0.11.220", "8.0.RC3"),
            node("b", "24.1.rc1", "7.1.0.11.220", "8.0.RC3"),
        ]);
        assert_eq!(c, VersionCheck::default());
    }

    #[test]
    fn differing_cann_refuses_naming_both_versions_and_nodes() {
        let c = compare(&[
            node("a", "24.1.rc1", "7.1", "8.0.RC3"),
            node("b", "24.1.rc1", "7.1", "8.0.RC2"),
            node("c", "24.1.rc1", "7.1", "8.0.RC3"),
        ]);
        let (reason, message) = c.refusal.unwrap();
        assert_eq!(reason, PodReason::NpuVersionMismatch);
        assert_eq!(
            message,
            "CANN differs across the group's nodes: 8.0.RC2 on b; 8.0.RC3 on a, c"
        );
    }

    #[test]
    fn differing_drivers_refuse_and_every_mismatch_is_named() {
        let c = compare(&[
            node("a", "24.1.rc1", "7.1", "8.0.RC3"),
            node("b", "23.0.3", "7.1", "8.0.RC2"),
        ]);
        let (reason, message) = c.refusal.unwrap();
        assert_eq!(reason, PodReason::NpuVersionMismatch);
        assert!(message.contains("driver differs"), "{message}");
        assert!(message.contains("23.0.3 on b; 24.1.rc1 on a"), "{message}");
        assert!(message.contains("CANN differs"), "{message}");
    }

    #[test]
    fn differing_firmware_is_a_warning_not_a_refusal() {
        let c = compare(&[
            node("a", "24.1.rc1", "7.1.0.11.220", "8.0.RC3"),
            node("b", "24.1.rc1", "7.1.0.9.220", "8.0.RC3"),
        ]);
        assert_eq!(c.refusal, None);
        assert_eq!(
            c.warnings,
            ["firmware differs across the group's nodes: 7.1.0.11.220 on a; 7.1.0.9.220 on b"]
        );
    }

    #[test]
    fn a_driver_unknown_beside_a_known_one_is_refused_not_taken_as_agreeing() {
        let c = compare(&[node("a", "24.1.rc1", U, U), node("b", U, U, U)]);
        let (reason, message) = c.refusal.unwrap();
        assert_eq!(reason, PodReason::NpuVersionUnknown);
        assert!(
            message.starts_with("driver 24.1.rc1 on a but unknown on b"),
            "{message}"
        );
        // A node without any HcommNode is unknown as well.
        let c = compare(&[
            node("a", "24.1.rc1", U, U),
            NodeVersions {
                node: "b".into(),
                versions: None,
            },
        ]);
        assert_eq!(c.refusal.unwrap().0, PodReason::NpuVersionUnknown);
    }

    #[test]
    fn a_cann_unknown_beside_a_known_one_is_a_warning() {
        let c = compare(&[
            node("a", "24.1.rc1", U, "8.0.RC3"),
            node("b", "24.1.rc1", U, U),
        ]);
        assert_eq!(c.refusal, None);
        assert_eq!(
            c.warnings,
            ["CANN 8.0.RC3 on a but unknown on b: not compared"]
        );
    }

    #[test]
    fn a_mismatch_outranks_an_unknown_and_both_are_in_the_message() {
        let c = compare(&[
            node("a", "24.1.rc1", U, "8.0.RC3"),
            node("b", U, U, "8.0.RC2"),
        ]);
        let (reason, message) = c.refusal.unwrap();
        assert_eq!(reason, PodReason::NpuVersionMismatch);
        assert!(message.contains("CANN differs"), "{message}");
        assert!(
            message.contains("driver 24.1.rc1 on a but unknown on b"),
            "{message}"
        );
    }

    #[test]
    fn unknown_everywhere_leaves_nothing_to_compare() {
        let c = compare(&[node("a", U, U, U), node("b", U, U, U)]);
        assert_eq!(c, VersionCheck::default());
        assert_eq!(compare(&[]), VersionCheck::default());
    }

    #[test]
    fn only_hccl_groups_are_checked() {
        assert!(applies(Backend::Hccl));
        assert!(!applies(Backend::Tcp));
    }
}
