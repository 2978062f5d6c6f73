//! A group's secret, as the agent reads it: the Secret the operator made for the group in
//! the release namespace (`hcomm_crds::contract::secrets`), read by name with the agent's
//! namespaced Role. It authenticates the group's comm domain (`member::adapters`) and its
//! weight-sync connections in both directions (`member::weights_sync`,
//! `member::weights_authority`).
//!
//! Lookup order: a file `<--group-secret-dir>/<namespace>_<group>` (development: agents
//! without an API server Secret); else the Secret `hcomm-group-<uid>` in
//! `--secrets-namespace`, which must carry the group's labels and 32 bytes. No secret is
//! a [`SecretError`] (the member is reported `GroupSecretMissing`), never a guessable
//! default — except with `--insecure-default-secret`, the development mode in which every
//! secret is public anyway: there a missing Secret falls back to one derived from the
//! group's UID, with a warning.
//!
//! Secrets are cached by group UID (a UID's secret never changes: a re-created group has a
//! new UID); the cache is bounded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use hcomm_crds::contract::secrets::{
    LABEL_SECRET_GROUP_NAME, LABEL_SECRET_GROUP_NAMESPACE, LABEL_SECRET_GROUP_UID, SECRET_KEY,
    SECRET_LEN, secret_name,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::weights::{GroupId, GroupSecret};

/// Deadline of one Secret read.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Secrets kept at most (the cache is emptied beyond).
const CACHE_MAX: usize = 1024;

/// Why a group's secret is not available.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "no --secrets-namespace (POD_NAMESPACE): the agent does not know where group {group}'s Secret lives"
    )]
    NoNamespace { group: String },
    #[error(
        "Secret {namespace}/{name} of group {group} does not exist (the operator makes it when it first reconciles the group)"
    )]
    Missing {
        namespace: String,
        name: String,
        group: String,
    },
    #[error("Secret {namespace}/{name} cannot be used for group {group}: {reason}")]
    Invalid {
        namespace: String,
        name: String,
        group: String,
        reason: String,
    },
    #[error("reading Secret {namespace}/{name}: {reason}")]
    Read {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// Looks up a group's secret (the agent: [`GroupSecrets`]; tests: [`FixedSecret`]).
pub trait SecretLookup: Send + Sync {
    fn secret<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<GroupSecret, SecretError>>;
}

/// The same secret for every group (tests, and agents given one secret for all).
#[derive(Debug, Clone)]
pub struct FixedSecret(pub GroupSecret);

impl SecretLookup for FixedSecret {
    fn secret<'a>(&'a self, _: &'a GroupId) -> BoxFuture<'a, Result<GroupSecret, SecretError>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

/// The secret in a group's Secret (pure): its labels must name the group, its key must
/// hold [`SECRET_LEN`] bytes.
pub fn from_secret(secret: &Secret, group: &GroupId) -> Result<GroupSecret, String> {
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    for (key, want) in [
        (LABEL_SECRET_GROUP_NAMESPACE, &group.namespace),
        (LABEL_SECRET_GROUP_NAME, &group.name),
        (LABEL_SECRET_GROUP_UID, &group.uid),
    ] {
        if labels.get(key) != Some(want) {
            return Err(format!(
                "label {key} is {:?}, not {want:?}",
                labels.get(key)
            ));
        }
    }
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SECRET_KEY))
        .ok_or_else(|| format!("no key {SECRET_KEY}"))?;
    if bytes.0.len() != SECRET_LEN {
        return Err(format!(
            "{} holds {} bytes, not {SECRET_LEN}",
            SECRET_KEY,
            bytes.0.len()
        ));
    }
    Ok(GroupSecret::new(bytes.0.clone()))
}

/// The development fallback (`--insecure-default-secret` only): derived from the UID,
/// so anyone who can read the group can compute it.
fn insecure_derived(group: &GroupId) -> GroupSecret {
    GroupSecret::new(format!("hcomm-group-uid:{}", group.uid).into_bytes())
}

/// The groups' secrets from the API server (see the module docs).
pub struct GroupSecrets {
    client: kube::Client,
    namespace: Option<String>,
    dir: Option<PathBuf>,
    insecure: bool,
    cache: Mutex<HashMap<String, GroupSecret>>,
}

impl GroupSecrets {
    /// `namespace`: where the operator keeps them (`--secrets-namespace`); `dir`:
    /// `--group-secret-dir`; `insecure`: `--insecure-default-secret` is in effect.
    pub fn new(
        client: kube::Client,
        namespace: Option<String>,
        dir: Option<PathBuf>,
        insecure: bool,
    ) -> GroupSecrets {
        GroupSecrets {
            client,
            namespace,
            dir,
            insecure,
            cache: Mutex::new(HashMap::new()),
        }
    }

    async fn read(&self, group: &GroupId) -> Result<GroupSecret, SecretError> {
        if let Some(dir) = &self.dir {
            let f = dir.join(format!("{}_{}", group.namespace, group.name));
            if let Ok(s) = tokio::fs::read(&f).await {
                return Ok(GroupSecret::new(s));
            }
        }
        let Some(namespace) = self.namespace.clone() else {
            return Err(SecretError::NoNamespace {
                group: group.to_string(),
            });
        };
        let name = secret_name(&group.uid);
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
        let read_error = |reason: String| SecretError::Read {
            namespace: namespace.clone(),
            name: name.clone(),
            reason,
        };
        let got = tokio::time::timeout(READ_TIMEOUT, api.get_opt(&name))
            .await
            .map_err(|_| read_error(format!("no answer within {READ_TIMEOUT:?}")))?
            .map_err(|e| read_error(e.to_string()))?;
        match got {
            Some(s) => from_secret(&s, group).map_err(|reason| SecretError::Invalid {
                namespace,
                name,
                group: group.to_string(),
                reason,
            }),
            None => Err(SecretError::Missing {
                namespace,
                name,
                group: group.to_string(),
            }),
        }
    }
}

impl SecretLookup for GroupSecrets {
    fn secret<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<GroupSecret, SecretError>> {
        Box::pin(async move {
            if group.uid.is_empty() {
                return Err(SecretError::Invalid {
                    namespace: self.namespace.clone().unwrap_or_default(),
                    name: String::new(),
                    group: group.to_string(),
                    reason: "the group has no UID".into(),
                });
            }
            let cached = self
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&group.uid)
                .cloned();
            if let Some(s) = cached {
                return Ok(s);
            }
            let secret = match self.read(group).await {
                Ok(s) => s,
                Err(e) if self.insecure => {
                    tracing::warn!(%group, error = %e,
                        "no group secret; --insecure-default-secret: using one derived from the group's UID");
                    return Ok(insecure_derived(group));
                }
                Err(e) => return Err(e),
            };
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(group.uid.clone(), secret.clone());
            Ok(secret)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(ns: &str, name: &str, uid: &str, bytes: usize) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": secret_name(uid), "labels": {
                (LABEL_SECRET_GROUP_NAMESPACE): ns,
                (LABEL_SECRET_GROUP_NAME): name,
                (LABEL_SECRET_GROUP_UID): uid,
            }},
            "data": {(SECRET_KEY): k8s_openapi::ByteString(vec![9; bytes])},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_secret_labelled_with_the_group_and_of_32_bytes_is_used() {
        let g = GroupId::new("a", "decode", "u1");
        let ok = from_secret(&secret("a", "decode", "u1", SECRET_LEN), &g).unwrap();
        assert_eq!(ok, GroupSecret::new(vec![9; SECRET_LEN]));
        for (bad, why) in [
            (secret("b", "decode", "u1", SECRET_LEN), "group-namespace"),
            (secret("a", "prefill", "u1", SECRET_LEN), "group-name"),
            (secret("a", "decode", "u0", SECRET_LEN), "group-uid"),
            (secret("a", "decode", "u1", 8), "8 bytes"),
        ] {
            let e = from_secret(&bad, &g).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn the_insecure_fallback_differs_per_incarnation() {
        let a = insecure_derived(&GroupId::new("a", "g", "u1"));
        let b = insecure_derived(&GroupId::new("a", "g", "u2"));
        assert_ne!(a, b);
    }
}
