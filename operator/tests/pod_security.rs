//! Pod Security "baseline" and member Pods (issue 17, point 6), on a real API server with
//! its built-in Pod Security admission: a member Pod exactly as the operator builds it is
//! refused in a namespace labelled `pod-security.kubernetes.io/enforce=baseline`, and the
//! only field refused is the local API's `hostPath` volume — the same Pod without that
//! volume (and its mounts) is admitted. A known limitation, written down in
//! docs/security.md ("Pod Security"): such namespaces need `privileged` for their workers
//! until the socket directory reaches Pods through a volume type baseline allows.

mod support;

use std::time::Duration;

use anyhow::{Context, ensure};
use hcomm_operator::planner::PlannedMember;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use support::{Cluster, group_manifest, run};

const NS: &str = "psa";

#[test]
fn a_member_pod_is_refused_by_baseline_only_for_its_local_api_host_path() {
    run(Duration::from_secs(180), || async {
        let cluster = Cluster::start(NS).await?;
        let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
        namespaces
            .patch(
                NS,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                    "pod-security.kubernetes.io/enforce": "baseline",
                    "pod-security.kubernetes.io/enforce-version": "latest"
                }}})),
            )
            .await?;
        let group = cluster
            .apply_group(group_manifest("decode", 1, 1, 60))
            .await?;
        let member = PlannedMember {
            name: "decode-0-e1".into(),
            index: 0,
            node: "n1".into(),
            devices: Vec::new(),
            allocation: None,
            joiner: true,
            standby: false,
        };
        let pod = hcomm_operator::pod_builder::build(&group, &member, 1, 1);
        let host_paths: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter(|v| v.host_path.is_some())
            .map(|v| v.name.clone())
            .collect();
        ensure!(
            host_paths.len() == 1,
            "expected exactly the local API's hostPath volume: {host_paths:?}"
        );

        let refused = cluster.pods().create(&PostParams::default(), &pod).await;
        let message = match &refused {
            Err(kube::Error::Api(status)) if status.code == 403 => status.message.clone(),
            other => anyhow::bail!("baseline admitted the member Pod: {other:?}"),
        };
        ensure!(
            message.contains("baseline")
                && message.contains("hostPath volumes")
                && message.contains(&host_paths[0]),
            "refused, but not for the local API's hostPath: {message}"
        );
        eprintln!("baseline refuses the member Pod: {message}");

        // That volume is the only field baseline refuses.
        let mut without = pod.clone();
        let spec = without.spec.as_mut().context("no spec")?;
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| v.host_path.is_none());
        }
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            if let Some(mounts) = c.volume_mounts.as_mut() {
                mounts.retain(|m| !host_paths.contains(&m.name));
            }
        }
        cluster
            .pods()
            .create(&PostParams::default(), &without)
            .await
            .context("the member Pod without the local API's hostPath must pass baseline")?;
        Ok(())
    });
}
