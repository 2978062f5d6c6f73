//! `kubectl explain` (the real kubectl, against a real kube-apiserver with the hcomm CRDs
//! installed) shows the resources' and fields' descriptions written in `crds/src`.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions};

/// `kubectl explain <what>`; the apiserver publishes a new CRD's OpenAPI a moment after
/// it is Established, so this retries until `parts` all appear, within 60 s.
fn explain(cp: &ControlPlane, what: &str, parts: &[&str]) -> Result<String> {
    let started = Instant::now();
    loop {
        let out = cp.kubectl().args(["explain", what]).output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && parts.iter().all(|p| text.contains(p)) {
            return Ok(text);
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "kubectl explain {what} lacks one of {parts:?}:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn kubectl_explain_shows_the_descriptions_of_the_resources_and_their_fields() {
    hcomm_e2e::harness::block_on(Duration::from_secs(180), async {
        let cp = ControlPlane::start(ControlPlaneOptions {
            start_timeout: Duration::from_secs(120),
            ..ControlPlaneOptions::default()
        })
        .await?;
        cp.install_crds(&hcomm_crds::all_crds()).await?;
        let group = explain(&cp, "hcommgroup", &["An elastic pool of inference workers"])?;
        if group.contains("Auto-generated") {
            bail!("{group}");
        }
        explain(
            &cp,
            "hcommgroup.spec",
            &[
                "Number of members (worker Pods)",
                "devicesPerMember",
                "NPUs (or CPU ranks) per member",
                "How membership changes",
            ],
        )?;
        explain(
            &cp,
            "hcommgroup.status",
            &["epoch", "readyReplicas", "phase"],
        )?;
        explain(&cp, "hcommnode", &["What hcomm knows about one node"])?;
        cp.stop()?;
        Ok(())
    })
    .unwrap_or_else(|error| panic!("test failed: {error:#}"));
}
