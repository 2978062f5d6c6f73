//! Pod Security "baseline" and member Pods (issue 17, point 6), on a real API server with
//! its built-in Pod Security admission, in a namespace labelled
//! `pod-security.kubernetes.io/enforce=baseline`:
//! - a member Pod exactly as the operator builds it by default (its local API through the
//!   agent's CSI driver, an inline volume) is admitted;
//! - with `--local-api-volume host-path` the same Pod is refused, and only for that
//!   `hostPath` volume: the fallback's cost, written down in docs/security.md.

mod support;

use std::time::Duration;

use anyhow::ensure;
use hcomm_operator::planner::PlannedMember;
use hcomm_operator::pod_builder::LocalApiVolume;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use support::{Cluster, group_manifest, run};

const NS: &str = "psa";

#[test]
fn baseline_admits_a_member_pod_with_the_csi_local_api_and_refuses_only_the_host_path_one() {
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
        let member = |index: i32| PlannedMember {
            name: format!("decode-{index}-e1"),
            index,
            node: "n1".into(),
            devices: Vec::new(),
            allocation: None,
            joiner: true,
            standby: false,
        };
        let build =
            |index, api| hcomm_operator::pod_builder::build(&group, &member(index), 1, 2, api);

        let csi = build(0, LocalApiVolume::default());
        ensure!(
            csi.spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .all(|v| v.host_path.is_none()),
            "the default member Pod has a hostPath volume"
        );
        let admitted = cluster.pods().create(&PostParams::default(), &csi).await;
        ensure!(
            admitted.is_ok(),
            "baseline refused the default member Pod: {admitted:?}"
        );

        let host_path = build(1, LocalApiVolume::HostPath);
        let host_paths: Vec<String> = host_path
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
        let refused = cluster
            .pods()
            .create(&PostParams::default(), &host_path)
            .await;
        let message = match &refused {
            Err(kube::Error::Api(status)) if status.code == 403 => status.message.clone(),
            other => anyhow::bail!("baseline admitted a member Pod with a hostPath: {other:?}"),
        };
        ensure!(
            message.contains("baseline")
                && message.contains("hostPath volumes")
                && message.contains(&host_paths[0]),
            "refused, but not for the local API's hostPath: {message}"
        );
        eprintln!("baseline refuses the host-path member Pod: {message}");
        Ok(())
    });
}
