//! The chart's PodMonitor, rendered with the real `helm`: off by default, and when on it
//! scrapes `/metrics` on the member Pods' named worker port, selected by the operator's
//! group label (the load signals the autoscaling examples query).

use anyhow::Result;
use serde_yaml::Value;

/// `helm template` with `extra`, one YAML value per rendered document.
fn render(extra: &[&str]) -> Result<Vec<Value>> {
    Ok(hcomm_e2e::chart::render(extra)?)
}

fn pod_monitors(docs: &[Value]) -> Vec<&Value> {
    docs.iter().filter(|d| d["kind"] == "PodMonitor").collect()
}

#[test]
fn the_worker_pod_monitor_is_off_by_default() -> Result<()> {
    assert!(pod_monitors(&render(&[])?).is_empty());
    Ok(())
}

#[test]
fn the_worker_pod_monitor_scrapes_member_pods_on_the_named_port() -> Result<()> {
    let docs = render(&[
        "--set",
        "metrics.podMonitor.enabled=true",
        "--set",
        "metrics.podMonitor.port=serving",
        "--set",
        "metrics.podMonitor.namespaces={inference}",
    ])?;
    let monitors = pod_monitors(&docs);
    assert_eq!(monitors.len(), 1, "{monitors:?}");
    let spec = &monitors[0]["spec"];
    let expression = &spec["selector"]["matchExpressions"][0];
    assert_eq!(
        expression["key"].as_str(),
        Some(hcomm_crds::contract::LABEL_GROUP)
    );
    assert_eq!(expression["operator"], "Exists");
    assert_eq!(spec["namespaceSelector"]["matchNames"][0], "inference");
    let endpoint = &spec["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "serving");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "15s");
    Ok(())
}

#[test]
fn a_bad_pod_monitor_port_fails_at_install_time() -> Result<()> {
    let refused = render(&[
        "--set",
        "metrics.podMonitor.enabled=true",
        "--set",
        "metrics.podMonitor.port=Not_A_Port_Name",
    ]);
    assert!(refused.is_err(), "{refused:?}");
    Ok(())
}
