//! The group's Volcano PodGroup, when `spec.scheduling.podGroup` asks for gang scheduling:
//! one `scheduling.volcano.sh/v1beta1` PodGroup per group, named after it, owned by it,
//! written with server-side apply after planning and before the plan's Pods are created,
//! so Volcano finds it when the first of them arrives. Member Pods name it in their
//! `scheduling.k8s.io/group-name` annotation ([`crate::pod_builder`]).
//!
//! `minMember` is the size of the planned member set: the serving members and this
//! round's joiners, which the next epoch's communicator needs all at once. Volcano counts
//! Pods already running toward it, so an incremental scale-out waits only for its joiners
//! to fit together; a larger value (the desired replicas while `maxJoining` holds some
//! back) would keep every joiner pending for Pods that are not created yet.
//!
//! The PodGroup is a dynamic object (kube's `DynamicObject`, no Volcano crate): hcomm owns
//! `minMember`, `queue` and `priorityClassName` and leaves the rest (status, Volcano's own
//! fields) alone. A cluster without Volcano answers 404 for the resource; that is an
//! outcome ([`PodGroupOutcome::CrdMissing`]) shown on the group's `PodGroupReady`
//! condition, not a reconcile error, so the group neither crash-loops nor waits on it.

use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{GroupReason, volcano};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use crate::context::{Context, FIELD_MANAGER};
use crate::planner::Plan;
use crate::pod_builder::owner_reference;

/// What writing the PodGroup came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodGroupOutcome {
    /// The group does not ask for one (nothing written, no condition).
    NotAsked,
    /// The group is being deleted: its Pods go, the PodGroup goes with the group.
    Deleting,
    /// Created or updated with this `minMember`.
    Applied { name: String, min_member: i32 },
    /// The cluster has no PodGroup resource (Volcano is not installed).
    CrdMissing(String),
    /// The API server refused or failed the write (RBAC, webhook, network); retried on
    /// the next reconcile.
    Failed(String),
}

impl PodGroupOutcome {
    /// The `PodGroupReady` condition (status, reason, message), when the group asks for
    /// a PodGroup.
    pub fn condition(&self) -> Option<(bool, GroupReason, String)> {
        match self {
            Self::NotAsked | Self::Deleting => None,
            Self::Applied { name, min_member } => Some((
                true,
                GroupReason::PodGroupApplied,
                format!("PodGroup {name} has minMember {min_member}"),
            )),
            Self::CrdMissing(message) => Some((
                false,
                GroupReason::PodGroupCrdMissing,
                format!(
                    "spec.scheduling.podGroup is set but the cluster has no {}/{} {} resource (is Volcano installed?); members are scheduled one by one: {message}",
                    volcano::API_GROUP,
                    volcano::API_VERSION,
                    volcano::KIND
                ),
            )),
            Self::Failed(message) => Some((
                false,
                GroupReason::PodGroupFailed,
                format!("writing the PodGroup failed: {message}"),
            )),
        }
    }
}

/// Volcano's PodGroup resource.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(volcano::API_GROUP, volcano::API_VERSION, volcano::KIND),
        volcano::PLURAL,
    )
}

/// The members the next communicator needs at once: the planned set (at least one, the
/// smallest gang Volcano accepts).
pub fn min_member(plan: &Plan) -> i32 {
    i32::try_from(plan.members.len()).unwrap_or(i32::MAX).max(1)
}

/// The PodGroup `group` should have for `plan` (pure); None when the group asks for none.
pub fn desired(group: &HcommGroup, plan: &Plan) -> Option<DynamicObject> {
    let asked = group.spec.scheduling.as_ref()?.pod_group.as_ref()?;
    let name = volcano::pod_group_name(&group.name_any());
    let mut spec = serde_json::json!({ "minMember": min_member(plan) });
    if let Some(queue) = &asked.queue {
        spec["queue"] = queue.clone().into();
    }
    if let Some(priority) = &asked.priority_class_name {
        spec["priorityClassName"] = priority.clone().into();
    }
    let mut object = DynamicObject::new(&name, &api_resource()).data(serde_json::json!({
        "spec": spec
    }));
    object.metadata.namespace = group.namespace();
    object.metadata.owner_references = owner_reference(group).map(|o| vec![o]);
    Some(object)
}

/// Whether a failed write means the resource type does not exist.
fn crd_missing(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Writes the PodGroup `group` should have for `plan`.
pub async fn sync(ctx: &Context, group: &HcommGroup, plan: &Plan) -> PodGroupOutcome {
    if group.meta().deletion_timestamp.is_some() {
        return match desired(group, plan) {
            Some(_) => PodGroupOutcome::Deleting,
            None => PodGroupOutcome::NotAsked,
        };
    }
    let Some(object) = desired(group, plan) else {
        return PodGroupOutcome::NotAsked;
    };
    let name = object.name_any();
    let min_member = min_member(plan);
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &group.namespace().unwrap_or_default(),
        &api_resource(),
    );
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch(&name, &params, &Patch::Apply(&object)).await {
        Ok(_) => {
            tracing::debug!(podgroup = %name, min_member, "PodGroup applied");
            PodGroupOutcome::Applied { name, min_member }
        }
        Err(e) if crd_missing(&e) => {
            tracing::warn!(podgroup = %name, error = %e, "no PodGroup resource on the cluster");
            PodGroupOutcome::CrdMissing(e.to_string())
        }
        Err(e) => {
            tracing::warn!(podgroup = %name, error = %e, "PodGroup write failed");
            PodGroupOutcome::Failed(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::PlannedMember;

    fn group(scheduling: serde_json::Value) -> HcommGroup {
        let mut g: HcommGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
            "metadata": {"name": "decode", "namespace": "ai", "uid": "u-1"},
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [{"name": "w", "image": "w"}]}}
            }
        }))
        .unwrap();
        g.spec.scheduling = serde_json::from_value(scheduling).unwrap();
        g
    }

    fn plan_of(members: usize) -> Plan {
        Plan {
            members: (0..members)
                .map(|i| PlannedMember {
                    name: format!("decode-{i}-e1"),
                    index: i as i32,
                    node: "n1".into(),
                    devices: Vec::new(),
                    allocation: None,
                    joiner: false,
                    standby: false,
                })
                .collect(),
            ..Plan::default()
        }
    }

    #[test]
    fn no_pod_group_is_wanted_unless_the_group_asks() {
        assert!(desired(&group(serde_json::Value::Null), &plan_of(2)).is_none());
        assert!(desired(&group(serde_json::json!({})), &plan_of(2)).is_none());
    }

    #[test]
    fn the_pod_group_is_owned_named_after_the_group_and_carries_queue_priority_and_min_member() {
        let g = group(
            serde_json::json!({"podGroup": {"queue": "inference", "priorityClassName": "high"}}),
        );
        let pg = desired(&g, &plan_of(3)).unwrap();
        assert_eq!(pg.metadata.name.as_deref(), Some("decode"));
        assert_eq!(pg.metadata.namespace.as_deref(), Some("ai"));
        let owner = &pg.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("u-1", Some(true)));
        let types = pg.types.as_ref().unwrap();
        assert_eq!(types.api_version, "scheduling.volcano.sh/v1beta1");
        assert_eq!(types.kind, volcano::KIND);
        assert_eq!(
            pg.data["spec"],
            serde_json::json!({"minMember": 3, "queue": "inference", "priorityClassName": "high"})
        );
    }

    #[test]
    fn min_member_is_the_planned_set_and_never_zero() {
        assert_eq!(min_member(&plan_of(4)), 4);
        assert_eq!(min_member(&plan_of(0)), 1);
        let g = group(serde_json::json!({"podGroup": {}}));
        assert_eq!(
            desired(&g, &plan_of(2)).unwrap().data["spec"],
            serde_json::json!({"minMember": 2})
        );
    }

    #[test]
    fn each_outcome_has_its_condition() {
        assert_eq!(PodGroupOutcome::NotAsked.condition(), None);
        let (ok, reason, message) = PodGroupOutcome::Applied {
            name: "decode".into(),
            min_member: 2,
        }
        .condition()
        .unwrap();
        assert!(ok && reason == GroupReason::PodGroupApplied && message.contains("minMember 2"));
        let (ok, reason, message) = PodGroupOutcome::CrdMissing("404".into())
            .condition()
            .unwrap();
        assert!(!ok && reason == GroupReason::PodGroupCrdMissing);
        assert!(
            message.contains("scheduling.volcano.sh/v1beta1"),
            "{message}"
        );
        let (ok, reason, _) = PodGroupOutcome::Failed("403".into()).condition().unwrap();
        assert!(!ok && reason == GroupReason::PodGroupFailed);
    }
}
