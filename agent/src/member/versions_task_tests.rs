//! The member task with the version agreement of an `hccl` group (issue 15 point 6): the
//! group's nodes' `HcommNode` versions come from the fake API server, the real check and
//! the real state machine in between. Each test fails if the check is skipped or its
//! rules are loosened.

use std::time::Duration;

use hcomm_crds::contract::{POD_VERIFIED, PodReason};
use hcomm_crds::{Backend, SoftwareVersions};

use super::task_kit::{Kit, NODE};
use super::versions_check::{NODE_WAIT, NodeVersions};

fn published(node: &str, driver: &str, firmware: &str, cann: &str) -> NodeVersions {
    NodeVersions {
        node: node.into(),
        versions: Some(SoftwareVersions {
            driver: driver.into(),
            firmware: firmware.into(),
            cann: cann.into(),
            agent: "0.1.0".into(),
        }),
    }
}

/// A kit whose group (hccl, the API default) runs on node-a and node-b with `nodes`.
fn kit_with(nodes: Vec<NodeVersions>) -> Kit {
    let kit = Kit::new();
    kit.cluster.with(|s| {
        assert_eq!(
            s.group.comm.backend,
            Backend::Hccl,
            "the kit's group is hccl"
        );
        s.node_versions = nodes;
    });
    kit
}

/// Waits for `verified=False`, checks its reason, the Warning Event and that no weights
/// moved; returns the Event's message.
async fn refused(kit: &Kit, reason: PodReason) -> String {
    kit.until("verified=False", |k| {
        k.cluster.condition(POD_VERIFIED).is_some()
    })
    .await;
    assert_eq!(
        kit.cluster.condition(POD_VERIFIED),
        Some((false, reason)),
        "conditions: {:?}",
        kit.cluster.writes()
    );
    assert_eq!(*kit.weights.finished.lock().unwrap(), 0, "never syncs");
    let events = kit.cluster.with(|s| s.events.clone());
    events
        .iter()
        .find(|(warning, r, m)| {
            *warning && *r == PodReason::VerificationFailed && m.starts_with(reason.as_str())
        })
        .unwrap_or_else(|| panic!("no VerificationFailed Event for {reason} in {events:?}"))
        .2
        .clone()
}

#[tokio::test(start_paused = true)]
async fn an_hccl_member_whose_peer_node_runs_another_cann_is_not_verified() {
    let kit = kit_with(vec![
        published(NODE, "24.1.rc1", "7.1.0.11.220", "8.0.RC3"),
        published("node-b", "24.1.rc1", "7.1.0.11.220", "8.0.RC2"),
    ]);
    let _task = kit.start();
    let message = refused(&kit, PodReason::NpuVersionMismatch).await;
    assert!(
        message.contains("8.0.RC2 on node-b") && message.contains("8.0.RC3 on node-a"),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_hccl_member_whose_peer_node_runs_another_driver_is_not_verified() {
    let kit = kit_with(vec![
        published(NODE, "24.1.rc1", "7.1.0.11.220", "8.0.RC3"),
        published("node-b", "23.0.3", "7.1.0.11.220", "8.0.RC3"),
    ]);
    let _task = kit.start();
    let message = refused(&kit, PodReason::NpuVersionMismatch).await;
    assert!(message.contains("driver differs"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn a_peer_node_that_never_publishes_counts_as_unknown_after_a_bounded_wait() {
    let kit = kit_with(vec![
        published(NODE, "24.1.rc1", "unknown", "unknown"),
        NodeVersions {
            node: "node-b".into(),
            versions: None,
        },
    ]);
    let started = tokio::time::Instant::now();
    let _task = kit.start();
    let message = refused(&kit, PodReason::NpuVersionUnknown).await;
    assert!(message.contains("unknown on node-b"), "{message}");
    let took = started.elapsed();
    assert!(
        took >= NODE_WAIT && took <= NODE_WAIT + Duration::from_secs(2),
        "took {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn differing_firmware_is_a_warning_event_and_the_member_still_joins() {
    let kit = kit_with(vec![
        published(NODE, "24.1.rc1", "7.1.0.11.220", "8.0.RC3"),
        published("node-b", "24.1.rc1", "7.1.0.9.220", "8.0.RC3"),
    ]);
    let _task = kit.start();
    kit.until_ready().await;
    let events = kit.cluster.with(|s| s.events.clone());
    assert!(
        events.iter().any(|(warning, r, m)| *warning
            && *r == PodReason::NpuVersionWarning
            && m.contains("7.1.0.9.220 on node-b")),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tcp_group_is_not_version_checked() {
    let kit = kit_with(vec![
        published(NODE, "24.1.rc1", "7.1", "8.0.RC3"),
        published("node-b", "23.0.3", "7.1", "8.0.RC2"),
    ]);
    kit.cluster.with(|s| s.group.comm.backend = Backend::Tcp);
    let _task = kit.start();
    kit.until_ready().await;
}
