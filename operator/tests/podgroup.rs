//! Volcano gang scheduling against a real API server: a group that sets
//! `spec.scheduling.podGroup` gets one PodGroup (owned, `minMember` following the planned
//! set through a scale-out) and member Pods that name it; on a cluster without the
//! PodGroup CRD the group says so on its `PodGroupReady` condition and its members are
//! still created.
//!
//! Volcano itself is not installed: [`pod_group_crd`] is a test fixture written here, a
//! minimal `podgroups.scheduling.volcano.sh` CRD whose schema preserves unknown fields
//! (Volcano's real CRD has the full schema; the API server treats both alike for what the
//! operator writes).

mod support;

use std::time::Duration;

use anyhow::{Context, ensure};
use hcomm_crds::contract::{GroupConditionType, GroupReason, volcano};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use support::{Cluster, Operator, group_condition, group_manifest, run, wait_until};

/// The fixture CRD: Volcano's PodGroup resource with an open schema.
fn pod_group_crd() -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", volcano::PLURAL, volcano::API_GROUP)},
        "spec": {
            "group": volcano::API_GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": volcano::PLURAL,
                "singular": "podgroup",
                "kind": volcano::KIND,
                "shortNames": ["pg"]
            },
            "versions": [{
                "name": volcano::API_VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true
                }}
            }]
        }
    }))?)
}

/// A group of `replicas` members of two devices that asks for a PodGroup.
fn gang_group(replicas: i32) -> serde_json::Value {
    let mut manifest = group_manifest("decode", replicas, 2, 60);
    manifest["spec"]["scheduling"] =
        serde_json::json!({"podGroup": {"queue": "inference", "priorityClassName": "high"}});
    manifest
}

fn pod_groups(cluster: &Cluster) -> Api<DynamicObject> {
    Api::namespaced_with(
        cluster.client.clone(),
        &cluster.namespace,
        &hcomm_operator::podgroup::api_resource(),
    )
}

/// Waits until the group's PodGroup has `min_member`; returns it.
async fn pod_group_with(cluster: &Cluster, min_member: i64) -> anyhow::Result<DynamicObject> {
    let api = pod_groups(cluster);
    wait_until(
        &format!("PodGroup decode with minMember {min_member}"),
        || async {
            let pg = api.get_opt("decode").await.ok()??;
            (pg.data["spec"]["minMember"].as_i64() == Some(min_member)).then_some(pg)
        },
    )
    .await
}

/// Every member Pod names the group's PodGroup.
async fn members_name_the_pod_group(cluster: &Cluster, count: usize) -> anyhow::Result<()> {
    let members = wait_until(&format!("{count} members"), || async {
        let m = cluster.members("decode").await.ok()?;
        (m.len() == count).then_some(m)
    })
    .await?;
    for (name, pod) in members {
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(volcano::ANNOTATION_GROUP_NAME));
        ensure!(
            annotation.map(String::as_str) == Some("decode"),
            "{name} does not name the PodGroup: {annotation:?}"
        );
    }
    Ok(())
}

#[test]
fn a_group_asking_for_a_pod_group_gets_one_that_follows_its_scale_out() {
    run(Duration::from_secs(240), || async {
        let cluster = Cluster::start("podgroup").await?;
        cluster.cp.install_crds(&[pod_group_crd()?]).await?;
        cluster.add_node("n1", "r0", "s0", 4, "10.0.0.1").await?;
        cluster.add_node("n2", "r0", "s1", 4, "10.0.0.2").await?;
        let operator = Operator::start(&cluster, "solo")?;
        let group = cluster.apply_group(gang_group(2)).await?;

        let pg = pod_group_with(&cluster, 2)
            .await
            .with_context(|| operator.log_tail())?;
        ensure!(pg.data["spec"]["queue"] == "inference", "{:?}", pg.data);
        ensure!(
            pg.data["spec"]["priorityClassName"] == "high",
            "{:?}",
            pg.data
        );
        let owner = &pg
            .metadata
            .owner_references
            .as_ref()
            .context("PodGroup without owner")?[0];
        ensure!(owner.controller == Some(true) && Some(&owner.uid) == group.metadata.uid.as_ref());
        members_name_the_pod_group(&cluster, 2).await?;
        let ready = GroupConditionType::PodGroupReady.as_str();
        cluster
            .wait_group("decode", "PodGroupReady=True", |g| {
                group_condition(g, ready)
                    == Some(("True".into(), GroupReason::PodGroupApplied.as_str().into()))
            })
            .await
            .with_context(|| operator.log_tail())?;

        // A scale-out's joiners and the serving members form the next gang.
        cluster.make_all_ready("decode").await?;
        cluster.kubectl_scale("decode", 3)?;
        pod_group_with(&cluster, 3)
            .await
            .with_context(|| operator.log_tail())?;
        members_name_the_pod_group(&cluster, 3).await?;
        Ok(())
    });
}

#[test]
fn without_the_pod_group_crd_the_group_says_so_and_members_are_still_created() {
    run(Duration::from_secs(180), || async {
        let cluster = Cluster::start("podgroup-missing").await?;
        cluster.add_node("n1", "r0", "s0", 4, "10.0.0.1").await?;
        let operator = Operator::start(&cluster, "solo")?;
        cluster.apply_group(gang_group(2)).await?;
        let ready = GroupConditionType::PodGroupReady.as_str();
        let group = cluster
            .wait_group("decode", "PodGroupReady=False", |g| {
                group_condition(g, ready)
                    == Some((
                        "False".into(),
                        GroupReason::PodGroupCrdMissing.as_str().into(),
                    ))
            })
            .await
            .with_context(|| operator.log_tail())?;
        let message = support::group_condition_message(&group, ready)
            .map(|c| c.2)
            .unwrap_or_default();
        ensure!(
            message.contains("is Volcano installed?"),
            "the condition should say what is missing: {message}"
        );
        // No crash loop: the reconcile goes on and creates the members.
        members_name_the_pod_group(&cluster, 2)
            .await
            .with_context(|| operator.log_tail())?;
        Ok(())
    });
}
