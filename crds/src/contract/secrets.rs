//! The per-group Secret: its name, where it lives, its labels and its key. The operator
//! makes one random Secret per group in its own (release) namespace; the agents read it
//! there to authenticate the group's comm domain and its weight-sync connections.
//!
//! It lives in the release namespace, not the group's, so neither component needs any
//! right on Secrets in tenant namespaces (a tenant cannot read or replace it either). An
//! ownerReference cannot cross namespaces, so the operator deletes it itself when the
//! group's finalizer runs; it is named after the group's UID, so a group deleted and
//! re-created (a new UID) gets a new secret.

/// Label on a group Secret: the group's namespace.
pub const LABEL_SECRET_GROUP_NAMESPACE: &str = "hcomm.io/group-namespace";
/// Label on a group Secret: the group's name.
pub const LABEL_SECRET_GROUP_NAME: &str = "hcomm.io/group-name";
/// Label on a group Secret: the group's UID (what the sweep of orphans matches).
pub const LABEL_SECRET_GROUP_UID: &str = "hcomm.io/group-uid";
/// The data key holding the secret bytes.
pub const SECRET_KEY: &str = "secret";
/// Bytes of a group secret (random, from the OS).
pub const SECRET_LEN: usize = 32;
/// Prefix of a group Secret's name.
pub const SECRET_NAME_PREFIX: &str = "hcomm-group-";

/// The name of the Secret of the group with this UID.
pub fn secret_name(group_uid: &str) -> String {
    format!("{SECRET_NAME_PREFIX}{group_uid}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_name_is_the_uid_behind_the_prefix() {
        let uid = "0b6e1c2a-7f3d-4a51-9d7e-2b1f0c9e8a77";
        let n = super::secret_name(uid);
        assert_eq!(n.strip_prefix(super::SECRET_NAME_PREFIX), Some(uid));
        // A DNS subdomain name: at most 253 characters, lowercase.
        assert!(n.len() <= 253 && n == n.to_lowercase());
    }
}
