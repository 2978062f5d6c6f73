//! The text the autoscaling chain applies or is configured with: Prometheus' scrape
//! configuration, the aggregation layer's objects for KEDA's metrics server, and the
//! autoscaling examples as the testbed applies them.

use std::net::IpAddr;
use std::path::Path;

use serde_yaml::Value;

use super::{EXTERNAL_METRICS_API, KEDA_NAMESPACE, METRICS_SERVICE, SCRAPE_INTERVAL};
use crate::testbed::error::{Error, Result};
use crate::testbed::pools::workspace_root;

/// The scrape configuration: what the chart's PodMonitor selects (Pods with the
/// `hcomm.io/group` label, their port named `http`, path `/metrics`), found through the
/// apiserver as Prometheus' Kubernetes service discovery finds them on a cluster.
pub(super) fn prometheus_config(kubeconfig: &Path) -> String {
    format!(
        r#"global:
  scrape_interval: {SCRAPE_INTERVAL}
  evaluation_interval: {SCRAPE_INTERVAL}
scrape_configs:
  - job_name: hcomm-workers
    metrics_path: /metrics
    kubernetes_sd_configs:
      - role: pod
        kubeconfig_file: {kubeconfig}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_label_hcomm_io_group]
        regex: .+
        action: keep
      - source_labels: [__meta_kubernetes_pod_container_port_name]
        regex: http
        action: keep
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
"#,
        kubeconfig = kubeconfig.display()
    )
}

/// The APIService, and the selector-less Service with the one EndpointSlice that
/// stands for KEDA's metrics server Pod.
pub(super) fn aggregation_manifests(reach: IpAddr, port: u16, ca_pem: &[u8]) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: {METRICS_SERVICE}, namespace: {KEDA_NAMESPACE}}}
spec:
  ports: [{{name: https, port: 443, targetPort: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {METRICS_SERVICE}-process
  namespace: {KEDA_NAMESPACE}
  labels: {{kubernetes.io/service-name: {METRICS_SERVICE}}}
addressType: IPv4
ports: [{{name: https, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: ["{reach}"], conditions: {{ready: true}}}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: {EXTERNAL_METRICS_API}}}
spec:
  service: {{name: {METRICS_SERVICE}, namespace: {KEDA_NAMESPACE}, port: 443}}
  group: external.metrics.k8s.io
  version: v1beta1
  caBundle: {ca}
  groupPriorityMinimum: 100
  versionPriority: 100
"#
    )
}

/// `examples/autoscaling/<file>` (a `ScaledObject`) as applied on the testbed: Prometheus
/// at `prometheus` instead of a Service's DNS name in every trigger; bounds `min`–`max`;
/// KEDA polling every second; a 10 s scale-down stabilisation, so a run waits seconds
/// instead of the example's minutes. Everything else is the example's.
pub fn example_scaled_object(file: &str, prometheus: &str, min: u64, max: u64) -> Result<String> {
    let path = workspace_root().join("examples/autoscaling").join(file);
    let text =
        std::fs::read_to_string(&path).map_err(Error::io(format!("read {}", path.display())))?;
    let bad = |what: &str| Error::Unsupported(format!("{}: {what}", path.display()));
    let mut object: Value =
        serde_yaml::from_str(&text).map_err(|e| bad(&format!("not YAML: {e}")))?;
    let spec = object
        .get_mut("spec")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| bad("no spec"))?;
    spec.insert("minReplicaCount".into(), min.into());
    spec.insert("maxReplicaCount".into(), max.into());
    spec.insert("pollingInterval".into(), 1.into());
    spec.insert("cooldownPeriod".into(), 5.into());
    let behavior: Value = serde_yaml::from_str(
        "horizontalPodAutoscalerConfig:\n  behavior:\n    scaleDown:\n      \
         stabilizationWindowSeconds: 10\n",
    )
    .map_err(|e| bad(&e.to_string()))?;
    spec.insert("advanced".into(), behavior);
    let triggers = spec
        .get_mut("triggers")
        .and_then(Value::as_sequence_mut)
        .ok_or_else(|| bad("no triggers"))?;
    for trigger in triggers {
        let metadata = trigger
            .get_mut("metadata")
            .and_then(Value::as_mapping_mut)
            .ok_or_else(|| bad("a trigger without metadata"))?;
        if metadata.get("serverAddress").is_none() {
            return Err(bad("a trigger names no serverAddress"));
        }
        metadata.insert("serverAddress".into(), prometheus.into());
    }
    serde_yaml::to_string(&object).map_err(|e| bad(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_autoscaling_example_is_pointed_at_the_testbed_prometheus() {
        for file in [
            "keda-decode.yaml",
            "keda-decode-itl.yaml",
            "keda-prefill-ttft.yaml",
        ] {
            let text = example_scaled_object(file, "http://127.0.0.1:9", 2, 4).unwrap();
            let object: Value = serde_yaml::from_str(&text).unwrap();
            assert_eq!(object["kind"], "ScaledObject", "{file}");
            assert_eq!(object["spec"]["maxReplicaCount"], 4, "{file}");
            for trigger in object["spec"]["triggers"].as_sequence().unwrap() {
                assert_eq!(
                    trigger["metadata"]["serverAddress"], "http://127.0.0.1:9",
                    "{file}"
                );
            }
        }
    }
}
