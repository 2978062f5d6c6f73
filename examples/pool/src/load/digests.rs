//! The weights digests a load run accepts. Shared and changeable while the run goes on,
//! because a harness rolling a new weights version widens the set before the roll and
//! narrows it after.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

/// Accepted `weights_digest` values; `None` inside means any digest (a missing digest is
/// still wrong). Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct AllowedDigests(Arc<RwLock<Option<BTreeSet<String>>>>);

impl AllowedDigests {
    /// Accepts any digest an answer carries.
    pub fn any() -> AllowedDigests {
        AllowedDigests::default()
    }

    /// Accepts exactly `digests`.
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(digests: I) -> AllowedDigests {
        let a = AllowedDigests::default();
        a.set(digests);
        a
    }

    /// Replaces the accepted set.
    pub fn set<I: IntoIterator<Item = S>, S: Into<String>>(&self, digests: I) {
        *self.write() = Some(digests.into_iter().map(Into::into).collect());
    }

    /// Adds one digest (turning "any" into just this one).
    pub fn allow(&self, digest: impl Into<String>) {
        self.write()
            .get_or_insert_with(BTreeSet::new)
            .insert(digest.into());
    }

    /// Removes one digest.
    pub fn forbid(&self, digest: &str) {
        if let Some(s) = self.write().as_mut() {
            s.remove(digest);
        }
    }

    /// Accepts any digest again.
    pub fn allow_any(&self) {
        *self.write() = None;
    }

    /// Whether an answer carrying `digest` is right.
    pub fn allows(&self, digest: Option<&str>) -> bool {
        let Some(d) = digest.filter(|d| !d.is_empty()) else {
            return false;
        };
        match &*self.0.read().unwrap_or_else(|p| p.into_inner()) {
            None => true,
            Some(set) => set.contains(d),
        }
    }

    /// The accepted set (`None`: any).
    pub fn snapshot(&self) -> Option<BTreeSet<String>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Option<BTreeSet<String>>> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_changes_for_every_clone() {
        let a = AllowedDigests::any();
        assert!(a.allows(Some("sha256:aa")));
        assert!(!a.allows(None), "a missing digest is never right");
        let b = a.clone();
        b.set(["sha256:aa"]);
        assert!(!a.allows(Some("sha256:bb")));
        a.allow("sha256:bb");
        assert!(b.allows(Some("sha256:bb")));
        b.forbid("sha256:aa");
        assert!(!a.allows(Some("sha256:aa")));
        a.allow_any();
        assert!(b.allows(Some("sha256:zz")));
    }
}
