//! Unit tests of the node-change filter.

use super::*;
use hcomm_crds::DeviceHealth;

fn node(status: serde_json::Value) -> HcommNode {
    serde_json::from_value(serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommNode",
        "metadata": {"name": "n1"}, "spec": {"nodeName": "n1"}, "status": status
    }))
    .unwrap()
}

fn status(updated: &str, healthy: bool, latency: i64, reachable: bool) -> serde_json::Value {
    serde_json::json!({
        "devices": [{"id": 0, "model": "910B3", "health": if healthy { DeviceHealth::Healthy } else { DeviceHealth::Unhealthy }}],
        "dataAddress": "10.0.0.1",
        "lastUpdated": updated,
        "linkTests": [{"peer": "n2", "peerAddress": "10.0.0.2", "interface": "data0",
                       "reachable": reachable, "latencyMicros": latency, "time": updated}]
    })
}

#[test]
fn a_republish_with_only_fresh_times_and_latencies_wakes_no_group() {
    let mut changes = NodeChanges::new(LinkPolicy::default());
    assert!(
        changes.changed(&node(status("2026-12-02T03:00:00Z", true, 300, true))),
        "first sight"
    );
    assert!(!changes.changed(&node(status("2026-12-02T03:00:10Z", true, 420, true))));
}

#[test]
fn device_health_reachability_and_slowness_changes_wake_the_groups() {
    let slow = LinkPolicy::default().slow_after.as_micros() as i64 + 1;
    let mut changes = NodeChanges::new(LinkPolicy::default());
    let t = "2026-12-02T03:00:00Z";
    assert!(changes.changed(&node(status(t, true, 300, true))));
    assert!(
        changes.changed(&node(status(t, false, 300, true))),
        "a device turned unhealthy"
    );
    assert!(
        changes.changed(&node(status(t, false, 300, false))),
        "a link went down"
    );
    assert!(
        changes.changed(&node(status(t, false, slow, true))),
        "up again, but slow"
    );
    assert!(
        !changes.changed(&node(status(t, false, slow + 5, true))),
        "still slow"
    );
}
