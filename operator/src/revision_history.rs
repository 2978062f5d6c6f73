//! Revision history: one ControllerRevision per revision of a group's template and
//! weights, owned by the group, as StatefulSets and DaemonSets keep theirs.
//!
//! Each is named `<group>-<revision>`, labelled with the group and the revision, holds
//! the template and weights of that revision, and a number that grows with every change.
//! Applying an old template again (a rollback) finds its ControllerRevision and gives it
//! the newest number instead of making a copy. Revisions no member runs any more are kept
//! up to `spec.revisionHistoryLimit`, oldest deleted first. The decision ([`plan`]) is
//! pure; [`sync`] lists, creates, renumbers and deletes. Written before the round's Pods,
//! so every member's revision has its record.

use std::collections::BTreeSet;

use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{LABEL_GROUP, LABEL_MANAGED_BY, LABEL_REVISION, MANAGER_NAME};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use tracing::info;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::phase::ObservedMember;
use crate::pod_builder::{owner_reference, selector_string};
use crate::revision;

/// A ControllerRevision of the group, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its name.
    pub name: String,
    /// The revision (its `hcomm.io/revision` label).
    pub revision: String,
    /// Its number (`.revision`).
    pub number: i64,
}

/// What to change in the history.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryPlan {
    /// Create the update revision's record with this number.
    pub create: Option<i64>,
    /// Give an existing record (a rollback's) the newest number.
    pub renumber: Option<(String, i64)>,
    /// Records to delete: unused and beyond the limit.
    pub delete: Vec<String>,
}

/// The history changes for `update` when members run the revisions `in_use`, keeping
/// `limit` unused revisions.
pub fn plan(
    stored: &[Stored],
    update: &str,
    in_use: &BTreeSet<String>,
    limit: usize,
) -> HistoryPlan {
    let newest = stored.iter().map(|s| s.number).max().unwrap_or(0);
    let mut out = HistoryPlan::default();
    match stored.iter().find(|s| s.revision == update) {
        Some(s) if s.number < newest => {
            out.renumber = Some((s.name.clone(), newest + 1));
        }
        Some(_) => {}
        None => out.create = Some(newest + 1),
    }
    let mut unused: Vec<&Stored> = stored
        .iter()
        .filter(|s| s.revision != update && !in_use.contains(&s.revision))
        .collect();
    unused.sort_by_key(|s| std::cmp::Reverse(s.number));
    out.delete = unused.iter().skip(limit).map(|s| s.name.clone()).collect();
    out
}

/// The ControllerRevision name of `revision` of `group`.
pub fn name(group: &str, revision: &str) -> String {
    format!("{group}-{revision}")
}

/// Whether the history may need a change: not while the status says every member runs
/// the spec's revision already (recorded when that rollout began; old records are pruned
/// at the next change). Saves a list call per reconcile of a settled group.
pub fn needed(group: &HcommGroup) -> bool {
    let update = revision::of(&group.spec);
    let status = group.status.as_ref();
    let settled = status.is_some_and(|s| {
        s.update_revision.as_deref() == Some(update.as_str())
            && s.current_revision.as_deref() == Some(update.as_str())
    });
    !settled
}

/// Brings the group's history up to date (see the module docs).
pub async fn sync(ctx: &Context, group: &HcommGroup, members: &[ObservedMember]) -> Result<()> {
    let namespace = group.namespace().unwrap_or_default();
    let group_name = group.name_any();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &namespace);
    let owned_by_group = |r: &ControllerRevision| {
        r.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == group.metadata.uid.as_ref())
    };
    let list = api
        .list(&ListParams::default().labels(&selector_string(&group_name)))
        .await
        .map_err(Error::kube("list controller revisions"))?;
    let stored: Vec<Stored> = list
        .items
        .iter()
        .filter(|r| owned_by_group(r))
        .filter_map(|r| {
            Some(Stored {
                name: r.metadata.name.clone()?,
                revision: r.labels().get(LABEL_REVISION)?.clone(),
                number: r.revision,
            })
        })
        .collect();
    let update = revision::of(&group.spec);
    let in_use: BTreeSet<String> = members.iter().filter_map(|m| m.revision.clone()).collect();
    let limit = group.spec.revision_history_limit.max(0) as usize;
    let todo = plan(&stored, &update, &in_use, limit);
    if let Some(number) = todo.create {
        let record = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name(&group_name, &update)),
                namespace: Some(namespace.clone()),
                labels: Some(
                    [
                        (LABEL_GROUP.to_owned(), group_name.clone()),
                        (LABEL_REVISION.to_owned(), update.clone()),
                        (LABEL_MANAGED_BY.to_owned(), MANAGER_NAME.to_owned()),
                    ]
                    .into(),
                ),
                owner_references: owner_reference(group).map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(serde_json::json!({
                "spec": revision::material(&group.spec)
            }))),
            revision: number,
        };
        match api.create(&PostParams::default(), &record).await {
            Ok(_) => info!(revision = %update, number, "revision recorded"),
            // Another round made it meanwhile.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::kube("create controller revision")(e)),
        }
    }
    if let Some((record, number)) = &todo.renumber {
        let patch = serde_json::json!({ "revision": number });
        api.patch(record, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("renumber controller revision"))?;
        info!(revision = %update, number, "revision in use again (rollback)");
    }
    for record in &todo.delete {
        match api.delete(record, &DeleteParams::default()).await {
            Ok(_) => info!(record = %record, "old revision removed (revisionHistoryLimit)"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::kube("delete controller revision")(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(revision: &str, number: i64) -> Stored {
        Stored {
            name: name("g", revision),
            revision: revision.into(),
            number,
        }
    }

    fn used(revisions: &[&str]) -> BTreeSet<String> {
        revisions.iter().map(|r| (*r).to_owned()).collect()
    }

    #[test]
    fn a_new_revision_is_recorded_with_the_next_number() {
        let p = plan(&[stored("a", 1)], "b", &used(&["a"]), 10);
        assert_eq!(p.create, Some(2));
        assert_eq!((p.renumber, p.delete.len()), (None, 0));
    }

    #[test]
    fn the_first_revision_is_number_one_and_an_unchanged_one_changes_nothing() {
        assert_eq!(plan(&[], "a", &used(&[]), 10).create, Some(1));
        assert_eq!(
            plan(&[stored("a", 1)], "a", &used(&["a"]), 10),
            HistoryPlan::default()
        );
    }

    #[test]
    fn a_rollback_reuses_the_old_record_with_the_newest_number() {
        let p = plan(&[stored("a", 1), stored("b", 2)], "a", &used(&["b"]), 10);
        assert_eq!(p.create, None);
        assert_eq!(p.renumber, Some(("g-a".to_owned(), 3)));
    }

    #[test]
    fn unused_revisions_beyond_the_limit_go_oldest_first_and_used_ones_stay() {
        let all = [
            stored("a", 1),
            stored("b", 2),
            stored("c", 3),
            stored("d", 4),
            stored("e", 5),
        ];
        // "a" is still run by a member below a partition; "e" is the update.
        let p = plan(&all, "e", &used(&["a", "e"]), 1);
        assert_eq!(p.delete, vec!["g-c".to_owned(), "g-b".to_owned()]);
        assert!(plan(&all, "e", &used(&[]), 0).delete.len() == 4);
    }
}
