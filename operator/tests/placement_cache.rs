//! Reconciles read the controller's watch caches (issue 20), and placement still never
//! hands one NPU to two members: several groups created at once on nodes with exactly the
//! room they need get every member placed and no node asked for more NPUs than it has —
//! each reconcile waited for the cache to show the Pods the one before it created. And
//! the rank tables, read from a watch cache too, are written again at once when someone
//! deletes or edits one.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use hcomm_crds::contract::ascend::RESOURCE_ASCEND910;
use hcomm_crds::rank_table::KEY_RANK_TABLE;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use support::{Cluster, Operator, group_manifest, run, wait_until};

const GROUPS: [&str; 3] = ["a", "b", "c"];
const NODES: usize = 3;
const NPUS_PER_NODE: i32 = 2;

fn requested(pod: &Pod) -> u32 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .limits
                .as_ref()?
                .get(RESOURCE_ASCEND910)
        })
        .filter_map(|q| q.0.parse::<u32>().ok())
        .sum()
}

#[test]
fn groups_created_at_once_fill_the_nodes_exactly_and_never_share_an_npu() {
    run(Duration::from_secs(180), || async {
        let cluster = Cluster::start("placement").await?;
        for n in 0..NODES {
            cluster
                .add_node(
                    &format!("n{n}"),
                    "r0",
                    "s0",
                    NPUS_PER_NODE,
                    &format!("10.0.0.{}", n + 1),
                )
                .await?;
        }
        let operator = Operator::start(&cluster, "solo")?;
        // Every NPU of the cluster, asked for by three groups at once.
        for g in GROUPS {
            cluster.apply_group(group_manifest(g, 2, 1, 60)).await?;
        }
        let pods = wait_until("every member Pod of the three groups", || async {
            let pods = cluster
                .pods()
                .list(&ListParams::default())
                .await
                .ok()?
                .items;
            (pods.len() == NODES * NPUS_PER_NODE as usize).then_some(pods)
        })
        .await
        .with_context(|| operator.log_tail())?;
        let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
        for pod in &pods {
            let node = pod
                .spec
                .as_ref()
                .and_then(hcomm_operator::affinity::node_of)
                .context("a member Pod without a node")?;
            *per_node.entry(node).or_default() += requested(pod);
        }
        ensure!(
            per_node.len() == NODES && per_node.values().all(|n| *n == NPUS_PER_NODE as u32),
            "NPUs asked for per node: {per_node:?}"
        );
        // The reconciles read the caches (the operator would say when it listed instead).
        let log = operator.log_text();
        ensure!(!log.contains("listing instead"), "{log}");

        // A rank table deleted, or edited, by someone else is written again by the next
        // reconcile its watch event triggers — well before any periodic requeue (300 s
        // for a quiet group) — and with the same epoch and members.
        let tables: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
        let name = "a-rank-table";
        let published = wait_until("a's rank table", || async {
            tables.get_opt(name).await.ok()?.and_then(|t| t.data)
        })
        .await
        .with_context(|| operator.log_tail())?;
        tables.delete(name, &DeleteParams::default()).await?;
        restored(&tables, name, &published)
            .await
            .with_context(|| operator.log_tail())?;
        let tamper = serde_json::json!({"data": {KEY_RANK_TABLE: "{}"}});
        tables
            .patch(name, &PatchParams::default(), &Patch::Merge(&tamper))
            .await?;
        restored(&tables, name, &published)
            .await
            .with_context(|| operator.log_tail())?;
        Ok(())
    });
}

/// How soon a rank table someone else changed must be back (a watch event and one
/// reconcile; no periodic requeue comes this soon).
const RESTORED_WITHIN: Duration = Duration::from_secs(15);

/// Waits, within [`RESTORED_WITHIN`], until the ConfigMap `name` holds `data` again.
async fn restored(
    tables: &Api<ConfigMap>,
    name: &str,
    data: &BTreeMap<String, String>,
) -> Result<()> {
    let started = std::time::Instant::now();
    loop {
        let now = tables.get_opt(name).await?.and_then(|t| t.data);
        if now.as_ref() == Some(data) {
            return Ok(());
        }
        if started.elapsed() > RESTORED_WITHIN {
            bail!("{name} not restored within {RESTORED_WITHIN:?}: {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
