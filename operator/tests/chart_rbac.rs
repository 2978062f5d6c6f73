//! The chart's RBAC is sufficient for the operator: installed with the real `helm`, the
//! operator runs *as* the chart's ServiceAccount (impersonation) through a scale-out and a
//! drain, and the API server never refuses it. The refused verbs are checked in
//! `e2e/tests/chart.rs` (`kubectl auth can-i`).

mod support;

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use hcomm_crds::contract::ANNOTATION_DRAIN_REQUESTED;
use hcomm_e2e::controlplane::assets;
use support::{Cluster, Operator, group_manifest, run, wait_until};

const RELEASE_NAMESPACE: &str = "hcomm-system";
const OPERATOR_SA: &str = "system:serviceaccount:hcomm-system:hcomm-operator";

/// Installs the chart (cpu mode) into the test's control plane with the real helm.
fn helm_install(cluster: &Cluster) -> Result<()> {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/hcomm");
    let home = cluster.cp.state_dir().join("helm");
    let out = std::process::Command::new(assets::helm()?)
        .args([
            "install",
            "hcomm",
            chart,
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
        ])
        .args(["--set", "agent.mode=cpu", "--timeout", "120s"])
        .env("KUBECONFIG", cluster.cp.kubeconfig_path())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()?;
    if !out.status.success() {
        bail!("helm install: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The admin kubeconfig, acting as `user` (the `as:` field, as `kubectl --as` does).
fn impersonating_kubeconfig(cluster: &Cluster, user: &str) -> Result<std::path::PathBuf> {
    let mut config = kube::config::Kubeconfig::read_from(cluster.cp.kubeconfig_path())?;
    for named in &mut config.auth_infos {
        named
            .auth_info
            .get_or_insert_with(Default::default)
            .impersonate = Some(user.to_owned());
    }
    let path = cluster.cp.state_dir().join("operator-sa.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

#[test]
fn the_operator_scales_out_and_drains_with_only_the_charts_rbac() {
    run(Duration::from_secs(300), || async {
        let cluster = Cluster::start("rbac").await?;
        helm_install(&cluster)?;
        cluster.add_node("n1", "r0", "s0", 4, "198.18.0.10").await?;
        cluster.add_node("n2", "r0", "s1", 4, "198.18.0.11").await?;
        let kubeconfig = impersonating_kubeconfig(&cluster, OPERATOR_SA)?;
        // The operator's client library honours the impersonation: what the chart does not
        // grant is refused through this very kubeconfig.
        let as_operator = kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(&kubeconfig)?,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?,
        )?;
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(as_operator);
        let refused = nodes.delete("n1", &Default::default()).await;
        ensure!(
            matches!(&refused, Err(kube::Error::Api(status)) if status.code == 403),
            "deleting a Node as the operator's ServiceAccount must be forbidden: {refused:?}"
        );
        let operator = Operator::start_as(&cluster, "rbac", &kubeconfig, RELEASE_NAMESPACE)?;

        // Create and serve one member, then scale out to three.
        cluster
            .apply_group(group_manifest("decode", 1, 2, 60))
            .await?;
        let first = wait_until("the first member", || async {
            cluster.members("decode").await.ok()?.into_keys().next()
        })
        .await
        .with_context(|| operator.log_tail())?;
        cluster.make_ready(&first).await?;
        cluster.kubectl_scale("decode", 3)?;
        wait_until("three members", || async {
            (cluster.members("decode").await.ok()?.len() == 3).then_some(())
        })
        .await
        .with_context(|| operator.log_tail())?;
        cluster.make_all_ready("decode").await?;
        cluster
            .wait_group("decode", "3 ready members", |g| {
                g.status.as_ref().is_some_and(|s| s.ready_replicas == 3)
            })
            .await
            .with_context(|| operator.log_tail())?;

        // Scale in: the operator asks for a drain, waits for it, then deletes the Pod.
        cluster.kubectl_scale("decode", 2)?;
        let victim = wait_until("a drain request", || async {
            cluster
                .members("decode")
                .await
                .ok()?
                .into_iter()
                .find_map(|(name, pod)| {
                    pod.metadata
                        .annotations?
                        .contains_key(ANNOTATION_DRAIN_REQUESTED)
                        .then_some(name)
                })
        })
        .await
        .with_context(|| operator.log_tail())?;
        cluster.finish_drain(&victim).await?;
        wait_until("the drained member to be deleted", || async {
            (!cluster.members("decode").await.ok()?.contains_key(&victim)).then_some(())
        })
        .await
        .with_context(|| operator.log_tail())?;
        ensure!(cluster.members("decode").await?.len() == 2);

        // The Lease was taken in the release namespace, and nothing was refused.
        let log = std::fs::read_to_string(&operator.log)?;
        for word in ["forbidden", "Forbidden", "403"] {
            ensure!(
                !log.contains(word),
                "the operator was refused something:\n{}",
                operator.log_tail()
            );
        }
        let lease = cluster
            .cp
            .kubectl()
            .args(["get", "lease", "hcomm-operator", "-n", RELEASE_NAMESPACE])
            .output()?;
        ensure!(lease.status.success(), "no Lease in {RELEASE_NAMESPACE}");
        Ok(())
    });
}
