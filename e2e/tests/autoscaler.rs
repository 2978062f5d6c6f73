//! The HorizontalPodAutoscaler controller of a real kube-controller-manager reaches an
//! `HcommGroup` through its scale subresource, with the example HPA manifest.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions};
use serde_json::Value;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");

fn kubectl_json(cp: &ControlPlane, args: &[&str]) -> Result<Value> {
    let out = cp.kubectl().args(args).args(["-o", "json"]).output()?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hpa_controller_can_scale_an_hcomm_group() -> Result<()> {
    let options = ControlPlaneOptions {
        kwok: Some(false),
        ..Default::default()
    };
    let cp = tokio::time::timeout(Duration::from_secs(240), ControlPlane::start(options))
        .await
        .context("control plane did not start within 240 s")??;
    cp.install_crds(&hcomm_crds::all_crds()).await?;
    for file in ["decode-pool.yaml", "autoscaling/hpa-decode.yaml"] {
        let out = cp
            .kubectl()
            .args(["apply", "-f", &format!("{EXAMPLES}/{file}")])
            .output()?;
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The HPA controller GETs /scale of the target; AbleToScale=True with
    // SucceededGetScale says it found and read the HcommGroup's scale subresource. Until
    // its discovery cache learns the new CRD (it refreshes every 30 s) it reports
    // FailedGetScale "no matches for kind", which is why this waits rather than asserts.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let hpa = kubectl_json(&cp, &["get", "hpa", "decode"])?;
        let conditions = hpa["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let able = conditions.iter().find(|c| c["type"] == "AbleToScale");
        if let Some(able) = able.filter(|c| c["status"] == "True") {
            assert_eq!(able["reason"], "SucceededGetScale", "{able}");
            assert_eq!(hpa["status"]["currentReplicas"], 2, "{hpa}");
            break;
        }
        if Instant::now() > deadline {
            bail!("the HPA controller could not read the group's scale within 120 s: {hpa}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cp.stop()?;
    Ok(())
}
