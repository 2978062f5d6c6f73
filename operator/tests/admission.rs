//! Pod Security "baseline" and member Pods (issue 17, point 6), on a real API server with
//! its built-in Pod Security admission, in a namespace labelled
//! `pod-security.kubernetes.io/enforce=baseline`:
//! - a member Pod exactly as the operator builds it by default (its local API through the
//!   agent's CSI driver, an inline volume) is admitted;
//! - with `--local-api-volume host-path` the same Pod is refused, and only for that
//!   `hostPath` volume: the fallback's cost, written down in docs/security.md;
//! - an operator run that way meets the refusal: the group says it in the API server's
//!   words (`Degraded=True`, reason `FailedCreate`, a Warning Event, a metric), tries again
//!   at a growing interval, and creates the member once the namespace admits it;
//! - a `ResourceQuota` that leaves no PodDisruptionBudget (its status written as the quota
//!   controller would, which this control plane does not run) refuses the group's budget: the
//!   group says so (`Degraded=True`, reason `RequestRefused`, a Warning Event) and gets its
//!   members once the quota goes.
//!
//! One control plane for all of it (the machine has 2 cores).

mod support;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{CONDITION_DEGRADED, CONDITION_PROGRESSING, GroupReason};
use hcomm_operator::planner::PlannedMember;
use hcomm_operator::pod_builder::LocalApiVolume;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use support::{
    Cluster, Operator, group_condition, group_condition_message, group_manifest, run, wait_until,
};

const NS: &str = "psa";
const FAILED_CREATE: &str = GroupReason::FailedCreate.as_str();

#[test]
fn baseline_refuses_only_the_host_path_member_pod_and_refusals_show_on_the_group() {
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

        // The same control plane: the test's own Pod and group go first.
        cluster
            .pods()
            .delete("decode-0-e1", &DeleteParams::default().grace_period(0))
            .await?;
        cluster
            .groups()
            .delete("decode", &DeleteParams::default())
            .await?;
        let operator =
            refused_members_show_on_the_group_until_admitted(&cluster, &namespaces).await?;
        a_refused_budget_shows_on_the_group_until_the_quota_goes(&cluster, &operator).await
    });
}

/// Waits for a Warning Event with `reason` on the group `group`; returns its note.
async fn warning(cluster: &Cluster, group: &str, reason: &str) -> Result<String> {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    wait_until(&format!("a Warning {reason} Event on {group}"), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            let on_group = e.regarding.as_ref()?.name.as_deref() == Some(group);
            let wanted =
                e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning");
            (on_group && wanted).then(|| e.note.unwrap_or_default())
        })
    })
    .await
}

async fn a_refused_budget_shows_on_the_group_until_the_quota_goes(
    cluster: &Cluster,
    operator: &Operator,
) -> Result<()> {
    let quotas: Api<ResourceQuota> = Api::namespaced(cluster.client.clone(), NS);
    let quota: ResourceQuota = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "no-budgets"},
        "spec": {"hard": {"count/poddisruptionbudgets.policy": "0"}}
    }))?;
    quotas.create(&PostParams::default(), &quota).await?;
    // The quota controller's part (this control plane runs none): what the quota admits
    // follows from its status, which the API server's quota admission reads.
    let none = serde_json::json!({"count/poddisruptionbudgets.policy": "0"});
    quotas
        .patch_status(
            "no-budgets",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"hard": none, "used": none}})),
        )
        .await?;
    cluster
        .apply_group(group_manifest("budgetless", 1, 1, 60))
        .await?;
    let refused = GroupReason::RequestRefused.as_str();
    let group = cluster
        .wait_group("budgetless", "Degraded=RequestRefused", |g| {
            group_condition(g, CONDITION_DEGRADED) == Some(("True".into(), refused.into()))
        })
        .await
        .with_context(|| operator.log_tail())?;
    let (_, _, message) = group_condition_message(&group, CONDITION_DEGRADED).unwrap_or_default();
    ensure!(
        message.starts_with(&format!("apply PodDisruptionBudget {NS}/budgetless"))
            && message.contains("forbidden")
            && message.contains("no-budgets"),
        "Degraded does not give the API server's reason: {message}"
    );
    eprintln!("the budgetless group says: {message}");
    ensure!(cluster.members("budgetless").await?.is_empty());
    let note = warning(cluster, "budgetless", refused).await?;
    ensure!(note == message, "Event note: {note}");

    // The quota goes; an edit of the group runs the round at once (else within 30 s).
    quotas
        .delete("no-budgets", &DeleteParams::default())
        .await?;
    cluster
        .groups()
        .patch(
            "budgetless",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await?;
    wait_until("the budgetless group's member", || async {
        let members = cluster.members("budgetless").await.ok()?;
        (!members.is_empty()).then_some(())
    })
    .await
    .with_context(|| operator.log_tail())?;
    cluster
        .wait_group("budgetless", "Degraded no longer RequestRefused", |g| {
            group_condition(g, CONDITION_DEGRADED).is_some_and(|(_, reason)| reason != refused)
        })
        .await?;
    Ok(())
}

async fn refused_members_show_on_the_group_until_admitted(
    cluster: &Cluster,
    namespaces: &Api<Namespace>,
) -> Result<Operator> {
    cluster.add_node("n1", "r0", "s0", 2, "10.0.0.1").await?;
    let operator = Operator::start_with(
        cluster,
        "solo",
        cluster.cp.kubeconfig_path(),
        "default",
        &["--local-api-volume", "host-path"],
    )?;
    cluster
        .apply_group(group_manifest("refused", 1, 1, 60))
        .await?;
    let failed_create = |g: &HcommGroup| {
        group_condition(g, CONDITION_DEGRADED) == Some(("True".into(), FAILED_CREATE.into()))
    };
    // The third try: each one is recorded, and they come 1 s and 2 s apart.
    let group = cluster
        .wait_group("refused", "Degraded=FailedCreate, tried 3 times", |g| {
            failed_create(g)
                && group_condition_message(g, CONDITION_DEGRADED)
                    .is_some_and(|(_, _, m)| m.contains("tried 3 time(s)"))
        })
        .await
        .with_context(|| operator.log_tail())?;
    let (_, _, message) = group_condition_message(&group, CONDITION_DEGRADED).unwrap_or_default();
    ensure!(
        message.contains("member Pod refused-0-e")
            && message.contains("not created (Forbidden)")
            && message.contains("violates PodSecurity \"baseline:latest\"")
            && message.contains("hostPath volumes"),
        "Degraded does not give the API server's reason: {message}"
    );
    eprintln!("the refused group says: {message}");
    ensure!(
        group_condition(&group, CONDITION_PROGRESSING)
            == Some(("True".into(), FAILED_CREATE.into())),
        "Progressing: {:?}",
        group_condition_message(&group, CONDITION_PROGRESSING)
    );
    ensure!(cluster.members("refused").await?.is_empty());
    let note = warning(cluster, "refused", FAILED_CREATE).await?;
    ensure!(note.contains("hostPath volumes"), "Event note: {note}");
    let metrics = operator.metrics_text().await?;
    let refusals = hcomm_e2e::bench::metric(
        &metrics,
        "hcomm_operator_member_create_failures_total{code=\"403\"}",
    );
    ensure!(
        refusals.is_some_and(|n| n >= 3.0),
        "create failures metric: {refusals:?}"
    );

    // The tenant lets the Pod in; the next try (4 s after the third) creates it.
    namespaces
        .patch(
            NS,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "privileged"
            }}})),
        )
        .await?;
    let members = wait_until("the refused member created", || async {
        let members = cluster.members("refused").await.ok()?;
        (!members.is_empty()).then_some(members)
    })
    .await
    .with_context(|| operator.log_tail())?;
    let names: Vec<&String> = members.keys().collect();
    // The refused rounds recorded no epoch of their own: the member is epoch 1's.
    ensure!(
        names == ["refused-0-e1"],
        "created after the refusals: {names:?}"
    );
    cluster
        .wait_group("refused", "Degraded no longer FailedCreate", |g| {
            group_condition(g, CONDITION_DEGRADED)
                .is_some_and(|(_, reason)| reason != FAILED_CREATE)
        })
        .await
        .with_context(|| operator.log_tail())?;
    Ok(operator)
}
