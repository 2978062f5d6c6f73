//! The group's PodDisruptionBudget: one per `HcommGroup`, owner-referenced (it goes with
//! the group), selecting the group's member Pods, with `maxUnavailable: 0`.
//!
//! Why: a member must leave through hcomm's drain (gate off → in-flight 0 → leave the
//! epoch → delete), never through a bare eviction. With this budget the apiserver refuses
//! every eviction of a serving member (`kubectl drain` gets 429 and retries) while the
//! operator moves the member off the cordoned node itself (`crate::disruption`); once the
//! member is gone, the drain's next retry finds nothing left to evict. Written with
//! server-side apply under the operator's field manager on every reconcile of a live
//! group (idempotent: an unchanged budget is no write in etcd).

use hcomm_crds::HcommGroup;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::context::FIELD_MANAGER;
use crate::error::{Error, Result};
use crate::pod_builder::{owner_reference, selector_labels};

/// The budget's name: the group's (one budget per group, in the group's namespace).
pub fn name(group: &HcommGroup) -> String {
    group.name_any()
}

/// The budget `group` should have (pure).
pub fn desired(group: &HcommGroup) -> PodDisruptionBudget {
    let group_name = group.name_any();
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name(group)),
            namespace: group.namespace(),
            labels: Some(selector_labels(&group_name)),
            owner_references: owner_reference(group).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            // No voluntary disruption bypasses hcomm: the operator drains and deletes.
            max_unavailable: Some(IntOrString::Int(0)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(&group_name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

/// Applies the budget of `group` (a live group; a deleted group's budget goes with it
/// through its owner reference).
pub async fn ensure(client: &kube::Client, group: &HcommGroup) -> Result<()> {
    let namespace = group.namespace().unwrap_or_default();
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &namespace);
    // k8s-openapi writes `apiVersion` and `kind`, which server-side apply needs.
    let object = desired(group);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name(group), &params, &Patch::Apply(&object))
        .await
        .map_err(Error::kube(format!(
            "apply PodDisruptionBudget {namespace}/{}",
            name(group)
        )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use hcomm_crds::contract::LABEL_GROUP;
    use kube::Resource;

    use super::*;

    fn group() -> HcommGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": HcommGroup::api_version(&()), "kind": HcommGroup::kind(&()),
            "metadata": {"name": "decode", "namespace": "pools", "uid": "u-1"},
            "spec": {"replicas": 2, "devicesPerMember": 1,
                     "template": {"spec": {"containers": [{"name": "w", "image": "w"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_budget_selects_the_groups_members_allows_no_eviction_and_goes_with_the_group() {
        let pdb = desired(&group());
        assert_eq!(pdb.metadata.name.as_deref(), Some("decode"));
        assert_eq!(pdb.metadata.namespace.as_deref(), Some("pools"));
        let owner = &pdb.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("u-1", Some(true)));
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(0)));
        assert_eq!(spec.min_available, None);
        let labels = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(labels.len(), 1);
        assert_eq!(labels[LABEL_GROUP], "decode");
    }
}
