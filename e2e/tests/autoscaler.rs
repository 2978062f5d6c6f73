//! The HorizontalPodAutoscaler controller of a real kube-controller-manager reaches an
//! `HcommGroup` through its scale subresource, with each plain-HPA example manifest
//! (requests in flight, and the SLO ones: prefill on time to first token, decode on
//! inter-token latency).

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

fn kubectl_ok(cp: &ControlPlane, args: &[&str]) {
    let out = cp.kubectl().args(args).output().expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until the HPA `name` found and read its target's scale subresource.
async fn wait_able_to_scale(cp: &ControlPlane, name: &str) -> Result<Value> {
    // The HPA controller GETs /scale of the target; AbleToScale=True with
    // SucceededGetScale says it found and read the HcommGroup's scale subresource. Until
    // its discovery cache learns the new CRD (it refreshes every 30 s) it reports
    // FailedGetScale "no matches for kind", which is why this waits rather than asserts.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let hpa = kubectl_json(cp, &["get", "hpa", name])?;
        let conditions = hpa["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let able = conditions.iter().find(|c| c["type"] == "AbleToScale");
        if let Some(able) = able.filter(|c| c["status"] == "True") {
            assert_eq!(able["reason"], "SucceededGetScale", "{able}");
            return Ok(hpa);
        }
        if Instant::now() > deadline {
            bail!("HPA {name} could not read the group's scale within 120 s: {hpa}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
    for file in [
        "decode-pool.yaml",
        "prefill-pool.yaml",
        "autoscaling/hpa-decode.yaml",
        "autoscaling/hpa-prefill-ttft.yaml",
    ] {
        kubectl_ok(&cp, &["apply", "-f", &format!("{EXAMPLES}/{file}")]);
    }
    let hpa = wait_able_to_scale(&cp, "decode").await?;
    assert_eq!(hpa["status"]["currentReplicas"], 2, "{hpa}");
    let hpa = wait_able_to_scale(&cp, "prefill-ttft").await?;
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "prefill", "{hpa}");
    assert_eq!(hpa["status"]["currentReplicas"], 2, "{hpa}");
    // One autoscaler per group: the latency HPA replaces the in-flight one on decode.
    kubectl_ok(&cp, &["delete", "hpa", "decode"]);
    kubectl_ok(
        &cp,
        &[
            "apply",
            "-f",
            &format!("{EXAMPLES}/autoscaling/hpa-decode-itl.yaml"),
        ],
    );
    let hpa = wait_able_to_scale(&cp, "decode-itl").await?;
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "decode", "{hpa}");
    cp.stop()?;
    Ok(())
}
