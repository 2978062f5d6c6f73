//! Apply (the fourth step of the pipeline): carry a [`Plan`] out, in an order that keeps a
//! crash at any point recoverable from what is stored (see `planner::epoch`):
//! 1. remember failed nodes on the group (annotation `hcomm.io/avoid-nodes`), and promote
//!    or demote warm standby members (label `hcomm.io/standby`, merge patch) first of all:
//!    a promotion is the whole of a scale-out served from the standby;
//! 2. check the planned table's layout against the backend's rank rules, and only then
//!    create joiner Pods (server-side apply, field manager `hcomm-operator`): a plan HCCL
//!    would refuse creates no Pod; a Pod the API server refuses ends the round here, with
//!    the refusal in [`Outcome::refused`] (`crate::create_failures`);
//! 3. ask victims to drain (annotation `hcomm.io/drain-requested`, merge patch);
//! 4. write the rank table of the epoch (server-side apply of the ConfigMap) once every
//!    member in it has its device-plugin allocation and the table passes validation;
//!    until then the previous table stays and [`Outcome::held`] says why;
//! 5. delete members that drained, timed out, or never served.

use std::collections::BTreeMap;

use futures::StreamExt;
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{
    ANNOTATION_DRAIN_REQUESTED, LABEL_GROUP, LABEL_MANAGED_BY, LABEL_STANDBY, MANAGER_NAME,
    STANDBY_TRUE,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use tracing::{info, warn};

use crate::context::{Context, FIELD_MANAGER};
use crate::create_failures::Refusal;
use crate::error::{Error, Result};
use crate::observe::{ANNOTATION_AVOID_NODES, Observed, avoid_nodes};
use crate::planner::{Plan, Removal};
use crate::pod_builder;
use crate::rank_table::{self, EPOCH_KEY, MEMBERS_KEY, RANK_TABLE_KEY};

/// How many failed nodes the group remembers.
const AVOID_NODES_KEPT: usize = 8;

/// What applying a plan did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Joiner Pods created.
    pub created: Vec<String>,
    /// Members newly asked to drain.
    pub drain_requested: Vec<String>,
    /// Members promoted from standby (`false`) or moved back to it (`true`).
    pub relabelled: Vec<(String, bool)>,
    /// Member Pods deleted, with why.
    pub deleted: Vec<Removal>,
    /// The rank table was (re)written.
    pub rank_table_written: bool,
    /// Why the epoch's rank table was not written (and, for a refused layout, why no
    /// joiner was created).
    pub held: Option<rank_table::Held>,
    /// Joiner Pods the API server did not create, and why (`crate::create_failures`).
    /// Nothing after the creates was applied in that round.
    pub refused: Option<Refusal>,
}

/// Carries `plan` out for `group`.
pub async fn apply(
    ctx: &Context,
    group: &HcommGroup,
    observed: &Observed,
    plan: &Plan,
) -> Result<Outcome> {
    let namespace = group.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut outcome = Outcome::default();

    remember_failed_nodes(ctx, group, plan).await?;

    for (member, standby) in &plan.relabel {
        let value = standby.then_some(STANDBY_TRUE);
        let patch = serde_json::json!({ "metadata": { "labels": { LABEL_STANDBY: value } } });
        let action = if *standby {
            "move to standby"
        } else {
            "promote from standby"
        };
        let written = pods
            .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube(format!("{action} {namespace}/{member}")))?;
        ctx.expected.patched(&written);
        info!(%member, standby, "{action}");
        outcome.relabelled.push((member.clone(), *standby));
    }

    let world = plan.world_size(group.spec.devices_per_member);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let layout = rank_table::layout_checked(
        &plan.members,
        group.spec.devices_per_member,
        group.spec.comm.backend,
    );
    let joiners: Vec<_> = match layout {
        Ok(()) => plan.joiners().collect(),
        Err(held) => {
            warn!(epoch = plan.epoch, %held, "planned layout refused; no member created");
            outcome.held = Some(held);
            Vec::new()
        }
    };
    let creates = joiners.into_iter().map(|joiner| {
        let (pods, params) = (&pods, &params);
        let pod = pod_builder::build(group, joiner, plan.epoch, world, ctx.local_api_volume);
        async move {
            let written = pods.patch(&joiner.name, params, &Patch::Apply(&pod)).await;
            (joiner, written)
        }
    });
    let mut refused: Vec<(String, kube::Error)> = Vec::new();
    for (joiner, written) in in_parallel(creates.collect()).await {
        match written {
            Ok(written) => {
                ctx.expected.created(&written);
                info!(member = %joiner.name, node = %joiner.node, index = joiner.index, "created member");
                outcome.created.push(joiner.name.clone());
            }
            Err(error) => {
                warn!(member = %joiner.name, %error, "member Pod not created");
                refused.push((joiner.name.clone(), error));
            }
        }
    }
    if let Some((_, first)) = refused.first() {
        // As a failed round did before: no drain, table or deletion is applied on top of
        // a set that lacks planned joiners; the next round plans again from what exists.
        let members = refused.iter().map(|(name, _)| name.clone()).collect();
        outcome.refused = Some(Refusal::new(members, first));
        return Ok(outcome);
    }

    let now = Timestamp::now().to_string();
    for victim in &plan.drain {
        let already = observed
            .members
            .iter()
            .any(|m| &m.name == victim && m.drain_requested_at.is_some());
        if already {
            continue;
        }
        let patch = serde_json::json!({
            "metadata": { "annotations": { ANNOTATION_DRAIN_REQUESTED: now } }
        });
        let written = pods
            .patch(victim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube(format!(
                "request drain of {namespace}/{victim}"
            )))?;
        ctx.expected.patched(&written);
        info!(member = %victim, "requested drain");
        outcome.drain_requested.push(victim.clone());
    }

    // Also while the group is deleted: the record of the (shrinking) set keeps the epoch
    // moving by exactly one per change.
    if outcome.held.is_none() {
        match rank_table_config_map(group, observed, plan) {
            Ok(desired) => {
                outcome.rank_table_written =
                    write_rank_table(ctx, group, observed, desired).await?;
            }
            Err(held) => {
                info!(epoch = plan.epoch, %held, "rank table held back");
                outcome.held = Some(held);
            }
        }
    }

    let deletes = plan.delete.iter().map(|removal| {
        let (pods, namespace) = (&pods, &namespace);
        async move {
            match pods.delete(&removal.name, &DeleteParams::default()).await {
                Ok(_) => Ok(removal),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(removal),
                Err(error) => Err(Error::Kube {
                    action: format!("delete member Pod {namespace}/{}", removal.name),
                    source: error,
                }),
            }
        }
    });
    let deletes = in_parallel(deletes.collect()).await;
    let group_key = (namespace.clone(), group.name_any());
    first_failure(deletes, |removal| {
        ctx.expected.deleted(&group_key, &removal.name);
        info!(member = %removal.name, reason = ?removal.reason, "deleted member");
        outcome.deleted.push(removal.clone());
    })?;
    Ok(outcome)
}

/// Member-Pod writes of one kind a reconcile has in flight at once. One at a time, a
/// group's ten joiners cost ten API round trips in a row — seconds on an API server busy
/// with a 50-group storm (issue 20); a bound keeps one group from filling the server's
/// in-flight limit.
const WRITES_IN_FLIGHT: usize = 8;

/// Runs `writes`, up to [`WRITES_IN_FLIGHT`] at once; the results in their order, every
/// write tried (a failed write does not stop the others: what succeeded is recorded
/// before the first error is returned). Built futures, not a closure mapped in the
/// stream: a closure over borrowed items makes the reconcile future's `Send` bound fail
/// to prove for every lifetime.
async fn in_parallel<R>(writes: Vec<impl std::future::Future<Output = R>>) -> Vec<R> {
    futures::stream::iter(writes)
        .buffered(WRITES_IN_FLIGHT)
        .collect()
        .await
}

/// Hands every success to `done`, then returns the first failure, if any: what was
/// written is recorded even when a later write failed.
fn first_failure<R>(results: Vec<Result<R>>, mut done: impl FnMut(R)) -> Result<()> {
    let mut failed = None;
    for result in results {
        match result {
            Ok(value) => done(value),
            Err(error) => {
                failed.get_or_insert(error);
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// The rank-table ConfigMap of `plan` (pure), or why it cannot be published yet.
pub fn rank_table_config_map(
    group: &HcommGroup,
    observed: &Observed,
    plan: &Plan,
) -> std::result::Result<ConfigMap, rank_table::Held> {
    let name = group.name_any();
    let table = rank_table::checked(
        &plan.members,
        group.spec.devices_per_member,
        &observed.nodes,
        group.spec.comm.backend,
    )?;
    let json = rank_table::publishable_json(&table, &plan.members)?;
    let members: Vec<&str> = plan.members.iter().map(|m| m.name.as_str()).collect();
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(rank_table::config_map_name(&name)),
            namespace: group.namespace(),
            labels: Some(BTreeMap::from([
                (LABEL_GROUP.to_owned(), name.clone()),
                (LABEL_MANAGED_BY.to_owned(), MANAGER_NAME.to_owned()),
            ])),
            owner_references: pod_builder::owner_reference(group).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            (RANK_TABLE_KEY.to_owned(), json),
            (EPOCH_KEY.to_owned(), plan.epoch.to_string()),
            (MEMBERS_KEY.to_owned(), members.join("\n")),
        ])),
        ..ConfigMap::default()
    })
}

async fn write_rank_table(
    ctx: &Context,
    group: &HcommGroup,
    observed: &Observed,
    desired: ConfigMap,
) -> Result<bool> {
    if observed.config_map.as_ref().and_then(|c| c.data.as_ref()) == desired.data.as_ref() {
        return Ok(false);
    }
    let name = desired.name_any();
    let api: Api<ConfigMap> =
        Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    let written = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(Error::kube(format!("write rank table {name}")))?;
    let group_key = (group.namespace().unwrap_or_default(), group.name_any());
    ctx.table_writes.wrote(group_key, written);
    info!(configmap = %name, "wrote rank table");
    Ok(true)
}

async fn remember_failed_nodes(ctx: &Context, group: &HcommGroup, plan: &Plan) -> Result<()> {
    let mut nodes = avoid_nodes(group);
    let before = nodes.clone();
    for node in &plan.failed_nodes {
        nodes.retain(|n| n != node);
        nodes.push(node.clone());
    }
    let excess = nodes.len().saturating_sub(AVOID_NODES_KEPT);
    nodes.drain(..excess);
    if nodes == before {
        return Ok(());
    }
    let api: Api<HcommGroup> =
        Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "metadata": { "annotations": { ANNOTATION_AVOID_NODES: nodes.join(",") } }
    });
    api.patch(
        &group.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("remember failed nodes"))?;
    Ok(())
}
