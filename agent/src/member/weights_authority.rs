//! Who may fetch what from this node's chunk server: the [`Authority`] the agent gives
//! its `ChunkServer`. A client names its group (namespace, name, UID); the group must
//! exist with that UID (a deleted or re-created group's members are refused), the client
//! must prove the group's own secret (`crate::group_secrets`), and it is granted only the
//! set its group's `spec.weights.digest` names — so a member of group B cannot read
//! group A's weights from a node that holds them, even with B's valid secret.
//!
//! The decision ([`grant_for`]) is pure; [`KubeAuthority`] reads the group and the secret.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use hcomm_crds::HcommGroup;
use kube::Api;

use super::group::{ReadAt, get_opt_at};
use crate::group_secrets::SecretLookup;
use crate::weights::{Authority, Digest, Grant, GroupId, GroupSecret};

/// Deadline of reading the group.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The sets a client of `group` may fetch, given the group as stored (pure): Err when it
/// does not exist or is another incarnation. A group without weights may fetch nothing.
pub fn grant_for(
    group: &GroupId,
    stored: Option<&HcommGroup>,
    secret: GroupSecret,
) -> Result<Grant, String> {
    if group.is_anonymous() {
        return Err("no group named".into());
    }
    let Some(g) = stored else {
        return Err("no such HcommGroup".into());
    };
    let uid = g.metadata.uid.as_deref().unwrap_or_default();
    if uid != group.uid {
        return Err(format!(
            "the HcommGroup's UID is {uid}: the client's group was deleted (and perhaps re-created)"
        ));
    }
    let sets: Vec<Digest> = g
        .spec
        .weights
        .as_ref()
        .and_then(|w| w.digest.trim().parse().ok())
        .into_iter()
        .collect();
    Ok(Grant {
        group: group.clone(),
        secret,
        sets: Some(sets),
    })
}

/// The agent's authority: reads the group from the API server and its secret through
/// `secrets`.
pub struct KubeAuthority {
    client: kube::Client,
    secrets: Arc<dyn SecretLookup>,
}

impl KubeAuthority {
    pub fn new(client: kube::Client, secrets: Arc<dyn SecretLookup>) -> KubeAuthority {
        KubeAuthority { client, secrets }
    }
}

impl std::fmt::Debug for KubeAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeAuthority")
    }
}

impl Authority for KubeAuthority {
    fn grant<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<Grant, String>> {
        Box::pin(async move {
            if group.is_anonymous() {
                return Err("no group named".into());
            }
            let api: Api<HcommGroup> = Api::namespaced(self.client.clone(), &group.namespace);
            let stored = stored_group(group, |at| read_group(&api, &group.name, at)).await?;
            // The UID first: a stale client learns nothing about the secret lookup.
            grant_for(group, stored.as_ref(), GroupSecret::new(Vec::new()))?;
            let secret = self
                .secrets
                .secret(group)
                .await
                .map_err(|e| e.to_string())?;
            grant_for(group, stored.as_ref(), secret)
        })
    }
}

/// The client's group as stored, read from the API server's cache first: every connection
/// asks this before the client has proven anything, and a consistent read of the group
/// under a scale-out's burst of writes cost each joiner's connections tens of ms. The
/// cache feeds the operator too, so it shows the group at least as new as the one the
/// joiner was created for; only a copy that would refuse the client is read again at the
/// latest (a group created or re-created moments ago is not refused for the cache's delay).
async fn stored_group<F, R>(group: &GroupId, read: F) -> Result<Option<HcommGroup>, String>
where
    F: Fn(ReadAt) -> R,
    R: std::future::Future<Output = Result<Option<HcommGroup>, String>>,
{
    let cached = read(ReadAt::Cache).await?;
    if grant_for(group, cached.as_ref(), GroupSecret::new(Vec::new())).is_ok() {
        return Ok(cached);
    }
    read(ReadAt::Latest).await
}

async fn read_group(
    api: &Api<HcommGroup>,
    name: &str,
    at: ReadAt,
) -> Result<Option<HcommGroup>, String> {
    tokio::time::timeout(READ_TIMEOUT, get_opt_at(api, name, &at))
        .await
        .map_err(|_| format!("reading the HcommGroup took over {READ_TIMEOUT:?}"))?
        .map_err(|e| format!("reading the HcommGroup: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(uid: &str, digest: Option<&str>) -> HcommGroup {
        let mut spec = serde_json::json!({"replicas": 1, "template": {"spec": {"containers": [{"name": "w"}]}}});
        if let Some(d) = digest {
            spec["weights"] = serde_json::json!({"version": "v1", "source": "", "digest": d});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
            "metadata": {"name": "g", "namespace": "a", "uid": uid},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_group_is_granted_exactly_the_set_its_spec_names() {
        let d = Digest::of(b"set");
        let id = GroupId::new("a", "g", "u1");
        let s = GroupSecret::new("k");
        let grant = grant_for(&id, Some(&stored("u1", Some(&d.to_string()))), s.clone()).unwrap();
        assert!(grant.allows(&d));
        assert!(!grant.allows(&Digest::of(b"other")));
        let none = grant_for(&id, Some(&stored("u1", None)), s.clone()).unwrap();
        assert!(!none.allows(&d));
    }

    #[test]
    fn unknown_re_created_or_anonymous_groups_are_refused() {
        let s = GroupSecret::new("k");
        let id = GroupId::new("a", "g", "u1");
        assert!(
            grant_for(&id, None, s.clone())
                .unwrap_err()
                .contains("no such")
        );
        let e = grant_for(&id, Some(&stored("u2", None)), s.clone()).unwrap_err();
        assert!(e.contains("u2") && e.contains("deleted"), "{e}");
        let e = grant_for(&GroupId::default(), Some(&stored("u1", None)), s).unwrap_err();
        assert!(e.contains("no group"), "{e}");
    }

    #[tokio::test]
    async fn the_cached_group_serves_unless_it_would_refuse_then_the_latest_decides() {
        let client = GroupId::new("a", "g", "uid-2");
        let reads = std::sync::Mutex::new(Vec::new());
        // The cache holds the group's previous incarnation; the latest read the new one.
        let read = |at: ReadAt| {
            reads.lock().unwrap().push(at.clone());
            let uid = if at == ReadAt::Cache {
                "uid-1"
            } else {
                "uid-2"
            };
            std::future::ready(Ok(Some(stored(uid, None))))
        };
        let g = stored_group(&client, read).await.unwrap().unwrap();
        assert_eq!(g.metadata.uid.as_deref(), Some("uid-2"));
        assert_eq!(*reads.lock().unwrap(), [ReadAt::Cache, ReadAt::Latest]);
        // A cached copy that grants is the answer: one read.
        reads.lock().unwrap().clear();
        let read = |at: ReadAt| {
            reads.lock().unwrap().push(at.clone());
            std::future::ready(Ok(Some(stored("uid-2", None))))
        };
        stored_group(&client, read).await.unwrap();
        assert_eq!(*reads.lock().unwrap(), [ReadAt::Cache]);
        // Not in the cache (created moments ago) and not at the latest either: refused later
        // by `grant_for`, after both reads.
        reads.lock().unwrap().clear();
        let read = |at: ReadAt| {
            reads.lock().unwrap().push(at.clone());
            std::future::ready(Ok(None))
        };
        assert!(stored_group(&client, read).await.unwrap().is_none());
        assert_eq!(*reads.lock().unwrap(), [ReadAt::Cache, ReadAt::Latest]);
    }
}
