//! Where a consumer reads a weights set: a symlink inside the store, pointing at one
//! complete `versions/<hex>` directory and swapped atomically (see
//! [`super::WeightStore::activate`]).
//!
//! Versions are shared and content-addressed, but which version is *active* is a per-group
//! decision: two groups on one node may serve different models, so each gets its own link,
//! `groups/<namespace>_<group>/current`, and neither can swap the other's weights away. The
//! store-wide `current` remains for callers without a group (engine tests, benchmarks).
//! Kubernetes namespaces are DNS labels (no `_`), so `<namespace>_<group>` names exactly
//! one group.

use std::path::{Path, PathBuf};

use super::error::{Result, WeightsError};

/// Name of the symlink the worker reads.
pub const CURRENT_LINK: &str = "current";
/// Directory under the store root holding one sub-directory per group.
pub const GROUPS_DIR: &str = "groups";

/// A symlink in the store through which one consumer reads one set.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CurrentLink {
    /// Relative to the store root; ends in [`CURRENT_LINK`].
    rel: PathBuf,
}

impl CurrentLink {
    /// The store-wide `<root>/current`.
    pub fn node() -> CurrentLink {
        CurrentLink {
            rel: PathBuf::from(CURRENT_LINK),
        }
    }

    /// `<root>/groups/<namespace>_<group>/current`: the link of one group's members.
    pub fn group(namespace: &str, group: &str) -> Result<CurrentLink> {
        for (what, name) in [("namespace", namespace), ("group", group)] {
            let bad = name.is_empty()
                || name.starts_with('.')
                || name
                    .chars()
                    .any(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'));
            if bad {
                return Err(WeightsError::Invalid(format!(
                    "{what} {name:?} cannot name a weights link (expected a Kubernetes name)"
                )));
            }
        }
        Ok(CurrentLink {
            rel: Path::new(GROUPS_DIR)
                .join(format!("{namespace}_{group}"))
                .join(CURRENT_LINK),
        })
    }

    /// The link of the group whose directory under [`GROUPS_DIR`] is `dir_name`
    /// (`<namespace>_<group>`); None for a name no group link has.
    pub(crate) fn of_group_dir(dir_name: &str) -> Option<CurrentLink> {
        let (namespace, group) = dir_name.split_once('_')?;
        CurrentLink::group(namespace, group).ok()
    }

    /// Whether this is a group's link (not the store-wide one).
    pub fn is_group(&self) -> bool {
        self.rel.starts_with(GROUPS_DIR)
    }

    /// The link's path relative to the store root.
    pub fn relative(&self) -> &Path {
        &self.rel
    }

    /// The symlink's target for the set `hex`, relative to the link's own directory, so
    /// the store can be moved or mounted elsewhere (the worker's container).
    pub(crate) fn target(&self, hex: &str) -> PathBuf {
        let depth = self.rel.components().count() - 1;
        let mut t = PathBuf::new();
        for _ in 0..depth {
            t.push("..");
        }
        t.join("versions").join(hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_links_live_under_groups_and_point_back_at_versions() {
        let l = CurrentLink::group("default", "llama-70b").unwrap();
        assert_eq!(l.relative(), Path::new("groups/default_llama-70b/current"));
        assert_eq!(l.target("ab"), Path::new("../../versions/ab"));
        assert_eq!(CurrentLink::node().target("ab"), Path::new("versions/ab"));
        assert!(l.is_group() && !CurrentLink::node().is_group());
        assert_eq!(CurrentLink::of_group_dir("default_llama-70b"), Some(l));
        // A group name may hold `_`; a namespace cannot, so the first `_` splits them.
        assert_eq!(
            CurrentLink::of_group_dir("ns_a_b"),
            Some(CurrentLink::group("ns", "a_b").unwrap())
        );
        for stray in ["nounderscore", "_g", "ns_", ".x_g"] {
            assert_eq!(CurrentLink::of_group_dir(stray), None, "{stray}");
        }
        for (ns, g) in [
            ("", "g"),
            ("ns", ""),
            ("..", "g"),
            ("ns", "a/b"),
            ("ns", ".x"),
        ] {
            assert!(CurrentLink::group(ns, g).is_err(), "{ns:?} {g:?}");
        }
    }
}
