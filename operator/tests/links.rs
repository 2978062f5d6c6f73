//! Group link health against a real control plane: the test stands in for the node agents
//! (HcommNode inventories, Pod conditions, and the link tests their probe loops publish);
//! a dead link between two member nodes turns `LinksHealthy` False naming the pair, sets
//! `Degraded=LinkDown`, raises a Warning Event and the `group_links{state="down"}` gauge;
//! the link answering again turns it True with a `LinksRecovered` Event. The operator only
//! reads the HcommNodes: no field of theirs is under its field manager.

mod support;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hcomm_crds::HcommNode;
use hcomm_crds::contract::{CONDITION_DEGRADED, CONDITION_LINKS_HEALTHY, reasons};
use hcomm_operator::context::FIELD_MANAGER;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use support::{
    Cluster, Operator, group_condition, group_condition_message, group_manifest, http_get, run,
    wait_until,
};

/// Waits for an Event on group `decode` with `reason` and `type_`; returns its note.
async fn wait_event(cluster: &Cluster, reason: &str, type_: &str) -> Result<String> {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    wait_until(&format!("a {type_} {reason} event"), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            let on_group = e.regarding.as_ref()?.name.as_deref() == Some("decode");
            (on_group && e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some(type_))
                .then(|| e.note.unwrap_or_default())
        })
    })
    .await
}

/// The names of group `decode`'s member Pods, sorted.
async fn member_names(cluster: &Cluster) -> Result<Vec<String>> {
    Ok(cluster.members("decode").await?.into_keys().collect())
}

/// The value of `hcomm_operator_group_links{…state="<state>"}` for group `decode`.
async fn links_gauge(operator: &Operator, state: &str) -> Option<f64> {
    let text = http_get(operator.metrics, "/metrics").await.ok()?;
    let labels = format!("group=\"decode\",namespace=\"links\",state=\"{state}\"");
    text.lines().find_map(|line| {
        line.strip_prefix(&format!("hcomm_operator_group_links{{{labels}}} "))?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn a_dead_link_between_member_nodes_shows_on_the_group_and_recovers() {
    run(Duration::from_secs(240), || async {
        let cluster = Cluster::start("links").await?;
        cluster.add_node("n1", "r0", "s0", 2, "10.0.0.1").await?;
        cluster.add_node("n2", "r0", "s0", 2, "10.0.0.2").await?;
        let operator = Operator::start(&cluster, "solo")?;

        // Two members of two devices: one on each node.
        cluster
            .apply_group(group_manifest("decode", 2, 2, 60))
            .await?;
        wait_until("two member Pods", || async {
            (cluster.members("decode").await.ok()?.len() == 2).then_some(())
        })
        .await
        .with_context(|| operator.log_tail())?;
        cluster.make_all_ready("decode").await?;

        // Serving members on two nodes, no probe published yet: unknown, not healthy.
        let g = cluster
            .wait_group("decode", "LinksHealthy=Unknown/NoRecentProbe", |g| {
                group_condition(g, CONDITION_LINKS_HEALTHY)
                    .is_some_and(|(s, r)| s == "Unknown" && r == reasons::NO_RECENT_PROBE)
            })
            .await
            .with_context(|| operator.log_tail())?;
        let (_, _, message) = group_condition_message(&g, CONDITION_LINKS_HEALTHY).unwrap();
        ensure!(
            message.contains("n1 → n2 (10.0.0.2) never probed"),
            "{message}"
        );
        ensure!(
            group_condition(&g, CONDITION_DEGRADED).is_some_and(|(s, _)| s == "False"),
            "no recent probe is not Degraded"
        );

        // n1's agent finds n2's data address dead; n2 still reaches n1. The findings are
        // stamped a second after the members were created (API times have second
        // precision), so they count as evidence about them: a one-way fault between two
        // nodes must still blame neither, and nobody is replaced.
        let members_before = member_names(&cluster).await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        cluster
            .set_link_tests("n1", &[("10.0.0.2", false, 0)])
            .await?;
        cluster
            .set_link_tests("n2", &[("10.0.0.1", true, 310)])
            .await?;
        let g = cluster
            .wait_group("decode", "LinksHealthy=False/LinkDown", |g| {
                group_condition(g, CONDITION_LINKS_HEALTHY)
                    .is_some_and(|(s, r)| s == "False" && r == reasons::LINK_DOWN)
            })
            .await
            .with_context(|| operator.log_tail())?;
        let (_, _, message) = group_condition_message(&g, CONDITION_LINKS_HEALTHY).unwrap();
        ensure!(
            message.starts_with("1 of 2 link(s) down: n1 → n2 (10.0.0.2) unreachable at ")
                && message.contains("timed out after 5s"),
            "{message}"
        );
        let (status, reason, message) = group_condition_message(&g, CONDITION_DEGRADED).unwrap();
        ensure!(
            status == "True" && reason == reasons::LINK_DOWN,
            "Degraded {status}/{reason}"
        );
        ensure!(message == "link(s) down: n1 → n2 (10.0.0.2)", "{message}");
        let note = wait_event(&cluster, reasons::LINK_DOWN, "Warning").await?;
        ensure!(
            member_names(&cluster).await? == members_before,
            "a member was replaced over a one-way fault: {:?} → {:?}\n{}",
            members_before,
            member_names(&cluster).await?,
            operator.log_tail()
        );
        ensure!(note.contains("n1 → n2 (10.0.0.2)"), "{note}");
        wait_until("group_links{state=down} 1", || async {
            (links_gauge(&operator, "down").await? == 1.0).then_some(())
        })
        .await?;

        // The link answers again.
        cluster
            .set_link_tests("n1", &[("10.0.0.2", true, 280)])
            .await?;
        let g = cluster
            .wait_group("decode", "LinksHealthy=True/AllLinksUp", |g| {
                group_condition(g, CONDITION_LINKS_HEALTHY)
                    .is_some_and(|(s, r)| s == "True" && r == reasons::ALL_LINKS_UP)
            })
            .await
            .with_context(|| operator.log_tail())?;
        let (_, _, message) = group_condition_message(&g, CONDITION_LINKS_HEALTHY).unwrap();
        ensure!(
            message.contains("slowest n2 → n1 (10.0.0.1) 310 µs at"),
            "{message}"
        );
        ensure!(
            group_condition(&g, CONDITION_DEGRADED)
                .is_some_and(|(s, r)| s == "False" && r == reasons::HEALTHY),
            "Degraded cleared"
        );
        wait_event(&cluster, reasons::LINKS_RECOVERED, "Normal").await?;
        wait_until("group_links{state=down} 0", || async {
            (links_gauge(&operator, "down").await? == 0.0
                && links_gauge(&operator, "up").await? == 2.0)
                .then_some(())
        })
        .await?;

        // The operator only reads HcommNodes (their agents are the one writer of
        // `status.linkTests`): no field of theirs is managed under the operator's field manager.
        let nodes: Api<HcommNode> = Api::all(cluster.client.clone());
        for name in ["n1", "n2"] {
            let managers: Vec<String> = nodes
                .get(name)
                .await?
                .metadata
                .managed_fields
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.manager)
                .collect();
            ensure!(
                !managers.iter().any(|m| m == FIELD_MANAGER),
                "HcommNode {name} has fields managed by the operator: {managers:?}"
            );
        }
        Ok(())
    });
}
