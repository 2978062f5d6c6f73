//! The per-group Secret: one random 32-byte secret per `HcommGroup`, made on the group's
//! first reconcile, kept in the operator's own (release) namespace and deleted with the
//! group. The agents authenticate the group's comm domain and its weight-sync
//! connections with it, so a member of another group — or anyone who only knows the
//! group's name or UID — cannot join the domain or fetch its weights.
//!
//! Why the release namespace: an ownerReference cannot point across namespaces, but a
//! Secret in the tenant's namespace would need Secret rights in every namespace (for the
//! operator to write it and for every agent to read it) and would be readable by the
//! tenant. Here both components get a namespaced Role in one namespace. Cleanup is
//! therefore the operator's: the group's finalizer deletes it once the members are gone
//! ([`delete`]), and a sweep at leadership start ([`sweep`]) deletes the Secrets of
//! groups that disappeared without it (a finalizer removed by hand, an operator down
//! while the group went). The name carries the group's UID, so a group deleted and
//! re-created gets a fresh secret: rotation on delete.
//!
//! The bytes come from the OS RNG ([`rand::rngs::OsRng`]), never from names or UIDs. An
//! existing Secret is never rewritten: members already authenticated with it keep working.

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::HcommGroup;
use hcomm_crds::contract::secrets::{
    LABEL_SECRET_GROUP_NAME, LABEL_SECRET_GROUP_NAMESPACE, LABEL_SECRET_GROUP_UID, SECRET_KEY,
    SECRET_LEN, secret_name,
};
use hcomm_crds::contract::{LABEL_MANAGED_BY, MANAGER_NAME};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};
use rand::TryRngCore;

use crate::error::{Error, Result};

/// Fresh secret bytes from the OS RNG.
pub fn random_secret() -> Result<[u8; SECRET_LEN]> {
    let mut bytes = [0u8; SECRET_LEN];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| Error::Secret(format!("the OS random number generator failed: {e}")))?;
    Ok(bytes)
}

/// The Secret of `group` in `namespace` holding `bytes` (pure). None when the group has no
/// UID yet (not stored).
pub fn desired(group: &HcommGroup, namespace: &str, bytes: &[u8]) -> Option<Secret> {
    let uid = group.meta().uid.clone()?;
    let labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGER_NAME.to_owned()),
        (
            LABEL_SECRET_GROUP_NAMESPACE.to_owned(),
            group.namespace().unwrap_or_default(),
        ),
        (LABEL_SECRET_GROUP_NAME.to_owned(), group.name_any()),
        (LABEL_SECRET_GROUP_UID.to_owned(), uid.clone()),
    ]);
    Some(Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(&uid)),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        immutable: Some(true),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_owned(),
            ByteString(bytes.to_vec()),
        )])),
        ..Default::default()
    })
}

/// Makes the group's Secret if it does not exist yet; an existing one is kept as is.
pub async fn ensure(client: &kube::Client, namespace: &str, group: &HcommGroup) -> Result<()> {
    let Some(uid) = group.meta().uid.clone() else {
        return Ok(());
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = secret_name(&uid);
    if api
        .get_metadata_opt(&name)
        .await
        .map_err(Error::kube(format!("get Secret {namespace}/{name}")))?
        .is_some()
    {
        return Ok(());
    }
    let secret = desired(group, namespace, &random_secret()?).expect("the group has a UID");
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(secret = %name, "group secret created");
            Ok(())
        }
        // Made meanwhile (a previous leader): keep that one.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(Error::kube(format!("create Secret {namespace}/{name}"))(e)),
    }
}

/// Deletes the Secret of the group with `uid` (gone already is fine).
pub async fn delete(client: &kube::Client, namespace: &str, uid: &str) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = secret_name(uid);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(secret = %name, "group secret deleted");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(format!("delete Secret {namespace}/{name}"))(e)),
    }
}

/// The group Secrets to delete (pure): those whose group UID is not among `live`, of the
/// groups in `scope` (a namespace-scoped operator never touches another namespace's).
pub fn orphans(secrets: &[Secret], live: &BTreeSet<String>, scope: Option<&str>) -> Vec<String> {
    secrets
        .iter()
        .filter_map(|s| {
            let labels = s.metadata.labels.as_ref()?;
            let uid = labels.get(LABEL_SECRET_GROUP_UID)?;
            let ns = labels.get(LABEL_SECRET_GROUP_NAMESPACE)?;
            let in_scope = scope.is_none_or(|w| w == ns);
            let name = s.metadata.name.clone()?;
            (in_scope && !live.contains(uid) && name == secret_name(uid)).then_some(name)
        })
        .collect()
}

/// Deletes the Secrets of groups that no longer exist; returns how many.
pub async fn sweep(client: &kube::Client, namespace: &str, scope: Option<&str>) -> Result<usize> {
    let groups: Api<HcommGroup> = match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let live: BTreeSet<String> = groups
        .list_metadata(&ListParams::default())
        .await
        .map_err(Error::kube("list HcommGroups for the secret sweep"))?
        .items
        .into_iter()
        .filter_map(|g| g.metadata.uid)
        .collect();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secrets = api
        .list(&ListParams::default().labels(LABEL_SECRET_GROUP_UID))
        .await
        .map_err(Error::kube(format!("list group Secrets in {namespace}")))?
        .items;
    let doomed = orphans(&secrets, &live, scope);
    for name in &doomed {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::kube(format!("delete Secret {namespace}/{name}"))(e)),
        }
        tracing::info!(secret = %name, "secret of a group that no longer exists deleted");
    }
    Ok(doomed.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(ns: &str, name: &str, uid: &str) -> HcommGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "w"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_secret_is_named_and_labelled_after_its_group_and_holds_the_bytes() {
        let g = group("team-a", "decode", "u-1");
        let s = desired(&g, "hcomm-system", &[7; SECRET_LEN]).unwrap();
        assert_eq!(
            s.metadata.name.as_deref(),
            Some(secret_name("u-1").as_str())
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("hcomm-system"));
        let l = s.metadata.labels.as_ref().unwrap();
        assert_eq!(l[LABEL_SECRET_GROUP_NAMESPACE], "team-a");
        assert_eq!(l[LABEL_SECRET_GROUP_NAME], "decode");
        assert_eq!(l[LABEL_SECRET_GROUP_UID], "u-1");
        assert_eq!(s.data.as_ref().unwrap()[SECRET_KEY].0, vec![7; SECRET_LEN]);
        assert_eq!(s.immutable, Some(true));
        let mut no_uid = g.clone();
        no_uid.metadata.uid = None;
        assert!(desired(&no_uid, "hcomm-system", &[0; SECRET_LEN]).is_none());
    }

    #[test]
    fn secrets_are_random_not_derived() {
        let (a, b) = (random_secret().unwrap(), random_secret().unwrap());
        assert_ne!(a, b);
        assert_ne!(a, [0; SECRET_LEN]);
    }

    #[test]
    fn only_secrets_of_vanished_groups_in_scope_are_orphans() {
        let s = |ns: &str, uid: &str| desired(&group(ns, "g", uid), "hcomm-system", &[1]).unwrap();
        let mut foreign = s("a", "u-9");
        foreign.metadata.name = Some("someone-elses".into());
        let secrets = vec![s("a", "u-1"), s("a", "u-2"), s("b", "u-3"), foreign];
        let live = BTreeSet::from(["u-1".to_owned()]);
        assert_eq!(
            orphans(&secrets, &live, None),
            [secret_name("u-2"), secret_name("u-3")]
        );
        assert_eq!(orphans(&secrets, &live, Some("a")), [secret_name("u-2")]);
    }
}
