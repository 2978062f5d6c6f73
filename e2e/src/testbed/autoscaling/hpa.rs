//! What a test or the demo waits for in an HPA's status.

use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Api;

use crate::testbed::Testbed;
use crate::testbed::error::{Error, Result};

/// Waits until the HPA `name` in `namespace` holds a current value of each of its
/// `external_metrics` External metrics and says `ScalingActive=True`: it read them through
/// `external.metrics.k8s.io`, which only KEDA's metrics server answers here. Returns that
/// condition's reason and message.
pub async fn wait_hpa_reads(
    bed: &Testbed,
    namespace: &str,
    name: &str,
    external_metrics: usize,
    within: Duration,
) -> Result<String> {
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(bed.client().await?, namespace);
    let deadline = Instant::now() + within;
    let mut last = None;
    loop {
        if let Ok(Some(hpa)) = hpas.get_opt(name).await {
            let status = hpa.status.unwrap_or_default();
            let read = status
                .current_metrics
                .iter()
                .flatten()
                .filter(|m| m.type_ == "External" && m.external.is_some())
                .count();
            let active = status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "ScalingActive" && c.status == "True");
            if let (true, Some(c)) = (read >= external_metrics, active) {
                return Ok(format!(
                    "{}: {}",
                    c.reason.as_deref().unwrap_or_default(),
                    c.message.as_deref().unwrap_or_default()
                ));
            }
            last = status.conditions;
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!(
                    "the HPA {namespace}/{name} to read {external_metrics} external metric(s) \
                     through KEDA (last conditions: {last:?}; logs: {}: keda-operator, \
                     keda-adapter, prometheus)",
                    bed.dir().join("logs").display()
                ),
                after: within,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
