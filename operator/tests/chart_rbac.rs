//! The chart's RBAC is sufficient for the operator: installed with the real `helm`, the
//! operator runs *as* the chart's ServiceAccount (impersonation) through a scale-out and a
//! drain, and the API server never refuses it; it makes each group's Secret in the release
//! namespace and deletes it with the group (issue 17). The refused verbs are checked in
//! `e2e/tests/chart.rs` (`kubectl auth can-i`).

mod support;

use std::time::Duration;

use anyhow::{Context, ensure};
use hcomm_crds::contract::ANNOTATION_DRAIN_REQUESTED;
use hcomm_e2e::chart::{self, OPERATOR_USER, RELEASE_NAMESPACE};
use support::{Cluster, Operator, group_manifest, run, wait_until};

#[test]
fn the_operator_scales_out_and_drains_with_only_the_charts_rbac() {
    run(Duration::from_secs(300), || async {
        let cluster = Cluster::start("rbac").await?;
        chart::install(&cluster.cp, &["agent.mode=cpu"])?;
        cluster.add_node("n1", "r0", "s0", 4, "198.18.0.10").await?;
        cluster.add_node("n2", "r0", "s1", 4, "198.18.0.11").await?;
        let kubeconfig = chart::kubeconfig_as(&cluster.cp, OPERATOR_USER)?;
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
        // The Secret of a group that went while no operator ran, and a Secret that only
        // carries the group label (not named as a group's): the sweep at leadership start
        // deletes the first and leaves the second.
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(cluster.client.clone(), RELEASE_NAMESPACE);
        let (orphan, foreign) = planted_secrets(&secrets).await?;
        let operator = Operator::start_as(&cluster, "rbac", &kubeconfig, RELEASE_NAMESPACE)?;
        wait_until("the sweep of the vanished group's Secret", || async {
            secrets.get_opt(&orphan).await.ok()?.is_none().then_some(())
        })
        .await
        .with_context(|| operator.log_tail())?;
        ensure!(
            secrets.get_opt(&foreign).await?.is_some(),
            "the sweep deleted {foreign}, which is not a group's Secret"
        );

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

        // Issue 17: each group has its own random Secret in the release namespace, made by
        // the operator as its ServiceAccount; deleting the group deletes it, and the group
        // re-created under the same name gets a different one.
        let decode_secret = group_secret(&cluster, "decode")
            .await
            .with_context(|| operator.log_tail())?;
        cluster
            .apply_group(group_manifest("spare", 0, 1, 60))
            .await?;
        let first = group_secret(&cluster, "spare")
            .await
            .with_context(|| operator.log_tail())?;
        ensure!(first.1 != decode_secret.1, "two groups share a secret");
        cluster
            .groups()
            .delete("spare", &Default::default())
            .await?;
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(cluster.client.clone(), RELEASE_NAMESPACE);
        wait_until("the deleted group's Secret to go", || async {
            secrets
                .get_opt(&first.0)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await
        .with_context(|| operator.log_tail())?;
        wait_until("the deleted group to go", || async {
            cluster
                .groups()
                .get_opt("spare")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await?;
        cluster
            .apply_group(group_manifest("spare", 0, 1, 60))
            .await?;
        let second = group_secret(&cluster, "spare")
            .await
            .with_context(|| operator.log_tail())?;
        ensure!(
            second.0 != first.0,
            "the re-created group kept its Secret's name"
        );
        ensure!(second.1 != first.1, "the re-created group kept its secret");

        // The Lease was taken in the release namespace, and nothing was refused. A refusal
        // is HTTP 403 with reason Forbidden; a bare "403" would also match timestamps
        // (00:14:48.744032Z failed a CI run that way).
        let log = std::fs::read_to_string(&operator.log)?;
        for word in ["forbidden", "Forbidden", "code: 403", "status 403"] {
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

/// Creates, as the admin, the Secret a group with a UID that no longer exists would have
/// had, and one labelled like it but named otherwise; returns their names.
async fn planted_secrets(
    api: &kube::Api<k8s_openapi::api::core::v1::Secret>,
) -> anyhow::Result<(String, String)> {
    use hcomm_crds::contract::secrets;
    let gone = "00000000-0000-4000-8000-00000000dead";
    let orphan = secrets::secret_name(gone);
    let foreign = "not-a-group-secret".to_owned();
    for name in [&orphan, &foreign] {
        let secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": RELEASE_NAMESPACE, "labels": {
                (secrets::LABEL_SECRET_GROUP_NAMESPACE): "default",
                (secrets::LABEL_SECRET_GROUP_NAME): "gone",
                (secrets::LABEL_SECRET_GROUP_UID): gone,
            }},
            "data": {(secrets::SECRET_KEY): k8s_openapi::ByteString(vec![1; secrets::SECRET_LEN])}
        }))?;
        api.create(&Default::default(), &secret).await?;
    }
    Ok((orphan, foreign))
}

/// The name and bytes of the Secret the operator made for group `name` (in the release
/// namespace, named after the group's UID, labelled with the group), once it exists.
async fn group_secret(cluster: &Cluster, name: &str) -> anyhow::Result<(String, Vec<u8>)> {
    use hcomm_crds::contract::secrets;
    let uid = cluster
        .groups()
        .get(name)
        .await?
        .metadata
        .uid
        .context("group without a UID")?;
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(cluster.client.clone(), RELEASE_NAMESPACE);
    let secret_name = secrets::secret_name(&uid);
    let secret = wait_until(&format!("the Secret of group {name}"), || async {
        api.get_opt(&secret_name).await.ok()?
    })
    .await?;
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    ensure!(
        labels.get(secrets::LABEL_SECRET_GROUP_UID) == Some(&uid)
            && labels
                .get(secrets::LABEL_SECRET_GROUP_NAME)
                .map(String::as_str)
                == Some(name),
        "Secret {secret_name} is not labelled with its group: {labels:?}"
    );
    let bytes = secret
        .data
        .unwrap_or_default()
        .remove(secrets::SECRET_KEY)
        .context("no secret key")?
        .0;
    ensure!(
        bytes.len() == secrets::SECRET_LEN,
        "the secret has {} bytes",
        bytes.len()
    );
    Ok((secret_name, bytes))
}
