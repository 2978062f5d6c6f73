//! The operator against a real control plane (etcd, kube-apiserver, controller-manager,
//! scheduler, kwok): member Pods, incremental scale-out, drain-first scale-in, drain timeout,
//! deletion, a killed operator resuming, and leader election between two replicas. The
//! node agent and the Ascend device plugin are stood in for by the test (HcommNode
//! inventories, Pod conditions; NPU allocatable on the kwok Nodes, allocation annotations).
//! Size: two long scenarios against one control plane each (starting one per case would
//! spend the test's time on etcd and the apiserver), with their step helpers.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hcomm_crds::contract::ascend::RESOURCE_ASCEND910;
use hcomm_crds::contract::{
    ANNOTATION_DRAIN_REQUESTED, CONDITION_DEGRADED, CONDITION_READY, GroupReason, LABEL_EPOCH,
    LABEL_GROUP, LABEL_MEMBER_INDEX, LABEL_RANK, LABEL_ROLE, POD_MEMBER_READY, POD_VERIFIED,
    READINESS_GATE, reasons,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use support::{Cluster, Operator, group_condition, group_manifest, run, wait_until};

fn env_of(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

fn label<'a>(pod: &'a Pod, key: &str) -> &'a str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

fn uids(pods: &BTreeMap<String, Pod>) -> BTreeMap<String, String> {
    pods.iter()
        .map(|(n, p)| (n.clone(), p.metadata.uid.clone().unwrap_or_default()))
        .collect()
}

async fn wait_members(
    cluster: &Cluster,
    group: &str,
    count: usize,
) -> Result<BTreeMap<String, Pod>> {
    wait_until(&format!("{count} live members of {group}"), || async {
        let pods = cluster.members(group).await.ok()?;
        let live: BTreeMap<String, Pod> = pods
            .into_iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
            .collect();
        (live.len() == count).then_some(live)
    })
    .await
}

async fn wait_ready(
    cluster: &Cluster,
    group: &str,
    replicas: i32,
) -> Result<hcomm_crds::HcommGroup> {
    cluster
        .wait_group(group, &format!("{group} Ready with {replicas}"), |g| {
            group_condition(g, CONDITION_READY).is_some_and(|(s, _)| s == "True")
                && g.status
                    .as_ref()
                    .is_some_and(|s| s.ready_replicas == replicas)
        })
        .await
}

async fn rank_table(cluster: &Cluster, group: &str) -> Result<(String, serde_json::Value)> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let cm = api.get(&format!("{group}-rank-table")).await?;
    let data = cm.data.context("rank table data")?;
    Ok((
        data["epoch"].clone(),
        serde_json::from_str(&data[hcomm_crds::rank_table::KEY_RANK_TABLE])?,
    ))
}

/// The rank table once it is published at `epoch`: only after the device plugin (the
/// test's stand-in) allocated every member in it.
async fn published(cluster: &Cluster, group: &str, epoch: &str) -> Result<serde_json::Value> {
    wait_until(
        &format!("{group}'s rank table at epoch {epoch}"),
        || async {
            let (at, table) = rank_table(cluster, group).await.ok()?;
            (at == epoch).then_some(table)
        },
    )
    .await
}

/// The node a member Pod is on, or (not bound yet) required on.
fn node_of(pod: &Pod) -> Option<String> {
    hcomm_operator::affinity::node_of(pod.spec.as_ref()?)
}

#[test]
fn members_scale_out_incrementally_scale_in_only_after_draining_and_go_with_the_group() {
    run(Duration::from_secs(240), || async {
        let cluster = Cluster::start("lifecycle").await?;
        cluster.add_node("n1", "r0", "s0", 4, "10.0.0.1").await?;
        cluster.add_node("n2", "r0", "s1", 4, "10.0.0.2").await?;
        let operator = Operator::start(&cluster, "solo")?;

        // Create: two members of two devices, both on n1 (topology order), epoch 1.
        let created = cluster
            .apply_group(group_manifest("decode", 2, 2, 60))
            .await?;
        let group_uid = created.metadata.uid.clone().unwrap_or_default();
        let pods = wait_members(&cluster, "decode", 2)
            .await
            .with_context(|| operator.log_tail())?;
        let names: Vec<&String> = pods.keys().collect();
        ensure!(names == ["decode-0-e1", "decode-1-e1"], "names: {names:?}");
        for (index, pod) in pods.values().enumerate() {
            ensure!(label(pod, LABEL_GROUP) == "decode");
            ensure!(label(pod, LABEL_MEMBER_INDEX) == index.to_string());
            ensure!(label(pod, LABEL_RANK) == (index * 2).to_string());
            ensure!(label(pod, LABEL_ROLE) == "decode" && label(pod, LABEL_EPOCH) == "1");
            ensure!(label(pod, "app") == "worker", "template labels kept");
            let spec = pod.spec.as_ref().unwrap();
            ensure!(
                hcomm_operator::affinity::required_node(spec).as_deref() == Some("n1"),
                "required on n1 by affinity"
            );
            ensure!(spec.readiness_gates.as_ref().unwrap()[0].condition_type == READINESS_GATE);
            let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
            ensure!(
                owner.controller == Some(true)
                    && owner.uid == group_uid
                    && owner.kind == "HcommGroup"
            );
            let worker = &spec.containers[0];
            let limits = worker.resources.as_ref().unwrap().limits.as_ref().unwrap();
            ensure!(limits[RESOURCE_ASCEND910].0 == "2", "limits: {limits:?}");
            let env = env_of(pod);
            ensure!(
                !env.contains_key(hcomm_crds::contract::env::VISIBLE_DEVICES),
                "the device plugin's to set"
            );
            ensure!(
                env[hcomm_crds::contract::env::FIRST_RANK] == (index * 2).to_string()
                    && env[hcomm_crds::contract::env::RANK_SIZE] == "4"
                    && !env.contains_key(hcomm_crds::contract::env::RANK_ID)
            );
            ensure!(
                env[hcomm_crds::contract::env::LOCAL_RANK_SIZE] == "2"
                    && env[hcomm_crds::contract::env::EPOCH] == "1"
            );
            ensure!(
                env[hcomm_crds::contract::env::SOCKET_IFNAME] == "=data0"
                    && env[hcomm_crds::contract::env::BACKEND] == "tcp"
            );
            ensure!(
                !env.contains_key(hcomm_crds::contract::env::RANK_TABLE_FILE),
                "RootInfo bootstrap"
            );
            ensure!(spec.volumes.as_ref().unwrap().iter().any(|v| {
                v.config_map
                    .as_ref()
                    .is_some_and(|c| c.name == "decode-rank-table")
            }));
        }
        let table = published(&cluster, "decode", "1").await?;
        for pod in cluster.members("decode").await?.values() {
            ensure!(
                node_of(pod).as_deref() == Some("n1")
                    && pod.spec.as_ref().unwrap().node_name.is_some()
            );
        }
        ensure!(
            table["version"] == "1.0"
                && table["server_count"] == "1"
                && table["status"] == "completed"
        );
        ensure!(table["server_list"][0]["server_id"] == "10.0.0.1");
        ensure!(table["server_list"][0]["device"][3]["rank_id"] == "3");
        // Devices and their addresses are the device plugin's allocation.
        ensure!(
            table["server_list"][0]["device"][0]["device_id"] == "0"
                && table["server_list"][0]["device"][3]["device_id"] == "3"
                && table["server_list"][0]["device"][2]["device_ip"] == "192.168.1.3",
            "table: {table}"
        );
        cluster.make_all_ready("decode").await?;
        let group = wait_ready(&cluster, "decode", 2).await?;
        let status = group.status.unwrap();
        ensure!(
            status.epoch == 1
                && status.selector.as_deref()
                    == Some(format!("{}=decode", hcomm_crds::contract::LABEL_GROUP).as_str())
        );
        ensure!(status.topology.len() == 4 && status.members.len() == 2);

        // One `MemberCreated` Event per member, each naming its own member (Events are
        // written after the reconcile, so they may arrive a moment later).
        let events: Api<Event> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
        let notes = wait_until("a MemberCreated Event per member", || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            let mut notes: Vec<String> = list
                .items
                .iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(GroupReason::MemberCreated.as_str())
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("decode")
                })
                .filter_map(|e| e.note.clone())
                .collect();
            notes.sort();
            (notes.len() >= 2).then_some(notes)
        })
        .await?;
        ensure!(
            notes == ["member decode-0-e1 created", "member decode-1-e1 created"],
            "{notes:?}"
        );

        // Scale out with kubectl: one joiner at epoch 2 on n2, existing Pods untouched.
        let before = uids(&pods);
        cluster.kubectl_scale("decode", 3)?;
        let pods = wait_members(&cluster, "decode", 3).await?;
        let joiner = &pods["decode-2-e2"];
        ensure!(label(joiner, LABEL_EPOCH) == "2" && label(joiner, LABEL_RANK) == "4");
        ensure!(node_of(joiner).as_deref() == Some("n2"));
        for (name, uid) in &before {
            let pod = &pods[name];
            ensure!(
                pod.metadata.uid.as_ref() == Some(uid),
                "{name} was replaced"
            );
            ensure!(label(pod, LABEL_EPOCH) == "1", "{name} relabelled");
            ensure!(
                !pod.metadata
                    .annotations
                    .as_ref()
                    .unwrap()
                    .contains_key(ANNOTATION_DRAIN_REQUESTED)
            );
        }
        published(&cluster, "decode", "2").await?;
        cluster.make_ready("decode-2-e2").await?;
        wait_ready(&cluster, "decode", 3).await?;

        // Scale in: the highest index is asked to drain and survives until it has drained.
        cluster.kubectl_scale("decode", 2)?;
        let pods_api = cluster.pods();
        wait_until("drain request on decode-2-e2", || async {
            let p = pods_api.get("decode-2-e2").await.ok()?;
            p.metadata
                .annotations?
                .contains_key(ANNOTATION_DRAIN_REQUESTED)
                .then_some(())
        })
        .await?;
        cluster
            .set_conditions(
                "decode-2-e2",
                &[(hcomm_crds::contract::POD_MEMBER_READY, "False", "Draining")],
            )
            .await?;
        cluster
            .wait_group("decode", "decode-2-e2 Draining at epoch 3", |g| {
                g.status.as_ref().is_some_and(|s| {
                    s.epoch == 3
                        && s.members.iter().any(|m| {
                            m.name == "decode-2-e2" && m.phase == hcomm_crds::MemberPhase::Draining
                        })
                })
            })
            .await?;
        let victim = pods_api.get("decode-2-e2").await?;
        ensure!(
            victim.metadata.deletion_timestamp.is_none(),
            "deleted before it drained"
        );
        ensure!(rank_table(&cluster, "decode").await?.0 == "3");
        cluster.finish_drain("decode-2-e2").await?;
        wait_until("decode-2-e2 gone", || async {
            pods_api
                .get_opt("decode-2-e2")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await?;

        // Drain timeout: nobody drains, the member is removed anyway and it is recorded.
        let patch = serde_json::json!({"spec": {"scaling": {"drainTimeoutSeconds": 2}}});
        cluster
            .groups()
            .patch("decode", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        cluster.kubectl_scale("decode", 1)?;
        wait_until("decode-1-e1 removed after its drain timed out", || async {
            pods_api
                .get_opt("decode-1-e1")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await?;
        cluster
            .wait_group("decode", "Degraded=DrainTimedOut", |g| {
                group_condition(g, CONDITION_DEGRADED)
                    .is_some_and(|(s, r)| s == "True" && r == reasons::DRAIN_TIMED_OUT)
            })
            .await?;
        wait_until("a DrainTimedOut event", || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some(reasons::DRAIN_TIMED_OUT))
                .then_some(())
        })
        .await?;

        // Delete the group: the last member drains first, then everything goes.
        cluster
            .groups()
            .delete("decode", &DeleteParams::default())
            .await?;
        wait_until("drain request on decode-0-e1", || async {
            let p = pods_api.get("decode-0-e1").await.ok()?;
            p.metadata
                .annotations?
                .contains_key(ANNOTATION_DRAIN_REQUESTED)
                .then_some(())
        })
        .await?;
        ensure!(
            pods_api
                .get("decode-0-e1")
                .await?
                .metadata
                .deletion_timestamp
                .is_none()
        );
        // Draining the last member is one change: epoch 4 → 5, and it stays there.
        cluster
            .set_conditions("decode-0-e1", &[(POD_MEMBER_READY, "False", "Draining")])
            .await?;
        let deleting = cluster
            .wait_group("decode", "Deleting, decode-0-e1 Draining", |g| {
                g.status.as_ref().is_some_and(|s| {
                    s.phase == Some(hcomm_crds::GroupPhase::Deleting)
                        && s.members.iter().any(|m| {
                            m.name == "decode-0-e1" && m.phase == hcomm_crds::MemberPhase::Draining
                        })
                })
            })
            .await?;
        ensure!(
            deleting.status.unwrap().epoch == 5,
            "one epoch for one change"
        );
        cluster.finish_drain("decode-0-e1").await?;
        let groups = cluster.groups();
        wait_until("group gone", || async {
            groups.get_opt("decode").await.ok()?.is_none().then_some(())
        })
        .await
        .with_context(|| operator.log_tail())?;
        ensure!(cluster.members("decode").await?.is_empty());

        // strategy: Rebuild — a change drains every member first (epoch 2, empty set), then
        // builds the whole new set (epoch 3).
        let mut rebuild = group_manifest("rebuild", 1, 1, 60);
        rebuild["spec"]["scaling"]["strategy"] = "Rebuild".into();
        cluster.apply_group(rebuild).await?;
        wait_members(&cluster, "rebuild", 1).await?;
        cluster.make_all_ready("rebuild").await?;
        wait_ready(&cluster, "rebuild", 1).await?;
        cluster.kubectl_scale("rebuild", 2)?;
        wait_until("drain request on rebuild-0-e1", || async {
            let p = pods_api.get("rebuild-0-e1").await.ok()?;
            p.metadata
                .annotations?
                .contains_key(ANNOTATION_DRAIN_REQUESTED)
                .then_some(())
        })
        .await?;
        ensure!(
            cluster.members("rebuild").await?.len() == 1,
            "no joiner before teardown"
        );
        cluster.finish_drain("rebuild-0-e1").await?;
        let pods = wait_members(&cluster, "rebuild", 2).await?;
        let names: Vec<&String> = pods.keys().collect();
        ensure!(
            names == ["rebuild-0-e3", "rebuild-1-e3"],
            "names: {names:?}"
        );

        ensure!(operator.metric("hcomm_operator_reconciles_total").await? > 0.0);
        // Its API calls are timed by verb and resource, as the apiserver counts them.
        let text = operator.metrics_text().await?;
        let timed = |verb: &str, resource: &str| {
            text.lines().any(|l| {
                l.starts_with("hcomm_operator_api_request_duration_seconds_count{")
                    && l.contains(&format!("verb=\"{verb}\""))
                    && l.contains(&format!("resource=\"{resource}\""))
                    && !l.ends_with(" 0")
            })
        };
        ensure!(
            timed("PATCH", "hcommgroups/status")
                && timed("PATCH", "pods")
                && timed("WATCH", "pods"),
            "the operator's status writes, Pod applies and Pod watches are not all timed:\n{text}"
        );
        if std::env::var_os("HCOMM_SHOW_OPERATOR_LOG").is_some() {
            eprintln!("{}", std::fs::read_to_string(&operator.log)?);
        }
        Ok(())
    });
}

#[test]
fn a_killed_operator_resumes_a_scale_out_and_only_one_of_two_replicas_leads() {
    run(Duration::from_secs(240), || async {
        let cluster = Cluster::start("resume").await?;
        cluster.add_node("n1", "r0", "s0", 4, "10.0.1.1").await?;
        cluster.add_node("n2", "r0", "s0", 4, "10.0.1.2").await?;
        let mut first = Operator::start(&cluster, "op-a")?;
        cluster
            .apply_group(group_manifest("pool", 2, 1, 60))
            .await?;
        let pods = wait_members(&cluster, "pool", 2)
            .await
            .with_context(|| first.log_tail())?;
        cluster.make_all_ready("pool").await?;
        wait_ready(&cluster, "pool", 2).await?;
        let before = uids(&pods);

        // Kill the operator as soon as the scale-out has started, then start it again.
        cluster.kubectl_scale("pool", 6)?;
        wait_until("the first joiner", || async {
            let pods = cluster.members("pool").await.ok()?;
            (pods.len() > 2).then_some(())
        })
        .await?;
        first.kill()?;
        let first = Operator::start(&cluster, "op-a")?;
        let pods = wait_members(&cluster, "pool", 6)
            .await
            .with_context(|| first.log_tail())?;
        for (name, uid) in &before {
            ensure!(
                pods[name].metadata.uid.as_ref() == Some(uid),
                "{name} was replaced"
            );
        }
        for (name, pod) in &pods {
            if !before.contains_key(name) {
                ensure!(
                    label(pod, LABEL_EPOCH) == "2",
                    "{name} at epoch {}",
                    label(pod, LABEL_EPOCH)
                );
            }
        }
        cluster.make_all_ready("pool").await?;
        let group = wait_ready(&cluster, "pool", 6).await?;
        ensure!(
            group.status.unwrap().epoch == 2,
            "exactly one epoch for one change"
        );
        published(&cluster, "pool", "2").await?;

        // A second replica stands by; only the Lease holder acts.
        let second = Operator::start(&cluster, "op-b")?;
        let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
        let holder = || async {
            leases
                .get_opt("hcomm-operator")
                .await
                .ok()??
                .spec?
                .holder_identity
        };
        ensure!(holder().await.as_deref() == Some("op-a"));
        ensure!(second.metric("hcomm_operator_leader").await? == 0.0);
        ensure!(first.metric("hcomm_operator_leader").await? == 1.0);
        ensure!(second.metric("hcomm_operator_reconciles_total").await? == 0.0);

        // The leader dies; the standby takes over once the Lease expires, and acts.
        let mut first = first;
        first.kill()?;
        wait_until("op-b holds the lease", || async {
            (holder().await.as_deref() == Some("op-b")).then_some(())
        })
        .await
        .with_context(|| second.log_tail())?;
        cluster.kubectl_scale("pool", 7)?;
        let pods = wait_members(&cluster, "pool", 7)
            .await
            .with_context(|| second.log_tail())?;
        ensure!(
            pods.keys().any(|n| n == "pool-6-e3"),
            "pods: {:?}",
            pods.keys()
        );
        ensure!(second.metric("hcomm_operator_leader").await? == 1.0);

        // A member fails verification: it is removed and replaced, away from its node.
        ensure!(node_of(&pods["pool-1-e1"]).as_deref() == Some("n1"));
        cluster
            .set_conditions(
                "pool-1-e1",
                &[
                    (
                        POD_VERIFIED,
                        "False",
                        hcomm_crds::contract::PodReason::NicUnreachable.as_str(),
                    ),
                    (
                        POD_MEMBER_READY,
                        "False",
                        hcomm_crds::contract::GroupReason::VerificationFailed.as_str(),
                    ),
                ],
            )
            .await?;
        let pods = wait_until("pool-1-e1 replaced by pool-1-e4", || async {
            let pods = cluster.members("pool").await.ok()?;
            (!pods.contains_key("pool-1-e1") && pods.contains_key("pool-1-e4")).then_some(pods)
        })
        .await
        .with_context(|| second.log_tail())?;
        ensure!(node_of(&pods["pool-1-e4"]).as_deref() == Some("n2"));
        let group = cluster.groups().get("pool").await?;
        let avoid = group.metadata.annotations.unwrap_or_default();
        ensure!(
            avoid
                .get(hcomm_crds::contract::ANNOTATION_AVOID_NODES)
                .map(String::as_str)
                == Some("n1")
        );
        Ok(())
    });
}
