//! Removal of weights nothing uses any more.
//!
//! Every rolling update leaves the previous version under `versions/<hex>` once the last
//! group link has moved off it, and every group that leaves a node leaves its link (and so
//! its version) behind; without removal a node's disk fills one model version at a time.
//! Three rules, each with a grace period:
//! - a group's link goes once the group has had no member Pod on this node for `grace`
//!   (the member driver tells which groups have one); then its version is unlinked;
//! - a complete version goes once no link in the store (the store-wide `current` or any
//!   group's) has pointed at it for `grace`;
//! - a partial set (a fetch that failed or was abandoned, its staging kept for a resume)
//!   goes once no fetch has held it for `grace`.
//!
//! The grace is long enough for a worker that still reads through an old path to finish,
//! for a member that comes back (a rollback, a group scaled to zero and up again) to find
//! its weights without a transfer, and for a failed fetch's retry to resume. Sets being
//! fetched are never touched.
//! [`Collector`] decides (pure, given the time); [`collect`] acts on a store.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::{Duration, Instant};

use super::digest::Digest;
use super::error::Result;
use super::link::CurrentLink;
use super::store::WeightStore;

/// Remembers since when each unused thing (a version, a group's link) has been unused.
#[derive(Debug)]
pub struct Collector<K> {
    grace: Duration,
    unused_since: HashMap<K, Instant>,
}

impl<K: Ord + Hash + Clone> Collector<K> {
    /// A collector that removes what has been unused for `grace`.
    pub fn new(grace: Duration) -> Collector<K> {
        Collector {
            grace,
            unused_since: HashMap::new(),
        }
    }

    /// What to remove now, of the `present` things, given those `in_use` (pure). A thing
    /// seen in use again starts over.
    pub fn plan(&mut self, now: Instant, present: &BTreeSet<K>, in_use: &BTreeSet<K>) -> Vec<K> {
        self.unused_since
            .retain(|k, _| present.contains(k) && !in_use.contains(k));
        let mut due = Vec::new();
        for k in present.difference(in_use) {
            let since = *self.unused_since.entry(k.clone()).or_insert(now);
            if now.saturating_duration_since(since) >= self.grace {
                due.push(k.clone());
            }
        }
        for k in &due {
            self.unused_since.remove(k);
        }
        due
    }
}

/// The cleanup state of one store: each rule's collector.
#[derive(Debug)]
pub struct Cleanup {
    links: Collector<CurrentLink>,
    versions: Collector<Digest>,
    partials: Collector<Digest>,
}

impl Cleanup {
    /// Removes links, versions and partial sets unused for `grace`.
    pub fn new(grace: Duration) -> Cleanup {
        Cleanup {
            links: Collector::new(grace),
            versions: Collector::new(grace),
            partials: Collector::new(grace),
        }
    }
}

/// What one pass removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// Links of groups that left this node.
    pub links: Vec<CurrentLink>,
    /// Versions no link used.
    pub versions: Vec<Digest>,
    /// Partial sets no fetch held.
    pub partials: Vec<Digest>,
}

/// One pass over `store`. `groups_here` gives the links of the groups with a member Pod on
/// this node, or None while that is not known yet (no link is judged then); it is asked
/// again right before each removal, so a group that arrived meanwhile keeps its link.
/// A version a link moved back onto between the plan and the removal is kept
/// ([`WeightStore::remove_unused`] re-checks under the store's link lock), and so is a
/// partial set a fetch took up again ([`WeightStore::remove_partial`]). Blocking
/// (directory removal).
pub fn collect(
    store: &WeightStore,
    cleanup: &mut Cleanup,
    now: Instant,
    groups_here: &dyn Fn() -> Option<BTreeSet<CurrentLink>>,
) -> Result<Removed> {
    let mut removed = Removed::default();
    if let Some(here) = groups_here() {
        for link in cleanup.links.plan(now, &store.group_links()?, &here) {
            let still_gone = groups_here().is_some_and(|h| !h.contains(&link));
            if still_gone && store.remove_link(&link)? {
                removed.links.push(link);
            }
        }
    }
    let complete = store.complete_versions();
    let in_use = store.linked_versions()?;
    for digest in cleanup.versions.plan(now, &complete, &in_use) {
        if store.remove_unused(&digest)? {
            removed.versions.push(digest);
        }
    }
    let partial = store.partial_sets()?;
    let fetching = store.partial_sets_in_use();
    for digest in cleanup.partials.plan(now, &partial, &fetching) {
        if store.remove_partial(&digest)? {
            removed.partials.push(digest);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u8) -> Digest {
        Digest::of(&[n])
    }

    fn set(ds: &[Digest]) -> BTreeSet<Digest> {
        ds.iter().copied().collect()
    }

    #[test]
    fn an_unused_version_is_due_only_after_the_grace_and_a_used_one_never() {
        let grace = Duration::from_secs(600);
        let mut c = Collector::new(grace);
        let t0 = Instant::now();
        let complete = set(&[d(1), d(2)]);
        let in_use = set(&[d(2)]);
        assert!(c.plan(t0, &complete, &in_use).is_empty());
        assert!(
            c.plan(t0 + grace - Duration::from_secs(1), &complete, &in_use)
                .is_empty()
        );
        assert_eq!(c.plan(t0 + grace, &complete, &in_use), vec![d(1)]);
        // Not reported twice; the used one never.
        assert!(c.plan(t0 + grace * 3, &complete, &set(&[d(2)])).is_empty());
    }

    #[test]
    fn a_version_used_again_starts_its_grace_over() {
        let grace = Duration::from_secs(10);
        let mut c = Collector::new(grace);
        let t0 = Instant::now();
        let complete = set(&[d(1)]);
        assert!(c.plan(t0, &complete, &set(&[])).is_empty());
        // A rollback points a link at it again for a while.
        assert!(
            c.plan(t0 + Duration::from_secs(8), &complete, &set(&[d(1)]))
                .is_empty()
        );
        assert!(
            c.plan(t0 + Duration::from_secs(12), &complete, &set(&[]))
                .is_empty()
        );
        assert_eq!(
            c.plan(t0 + Duration::from_secs(22), &complete, &set(&[])),
            vec![d(1)]
        );
    }

    #[test]
    fn a_zero_grace_removes_at_the_first_pass() {
        let mut c = Collector::new(Duration::ZERO);
        let complete = set(&[d(1), d(2), d(3)]);
        let mut due = c.plan(Instant::now(), &complete, &set(&[d(3)]));
        due.sort();
        let mut want = vec![d(1), d(2)];
        want.sort();
        assert_eq!(due, want);
    }

    /// A fresh store holding `n` complete versions (one 10 kB file each); returns its
    /// temporary folder too.
    fn store_with_versions(label: &str, n: u8) -> (std::path::PathBuf, WeightStore, Vec<Digest>) {
        let tmp = crate::weights::test_dirs::fresh("gc", label);
        let store = WeightStore::open(tmp.join("store")).expect("store");
        let mut digests = Vec::new();
        for seed in 1..=n {
            let src = tmp.join(format!("src{seed}"));
            std::fs::create_dir_all(&src).unwrap();
            std::fs::write(src.join("w.bin"), vec![seed; 10_000]).unwrap();
            let m = crate::weights::Manifest::build(&src, 4096).unwrap();
            store.install_dir(&src, &m.digest(), 4096).unwrap();
            digests.push(m.digest());
        }
        (tmp, store, digests)
    }

    #[test]
    fn the_store_removes_an_unlinked_version_and_keeps_linked_ones() {
        use crate::weights::link::CurrentLink;
        let (tmp, store, digests) = store_with_versions("store", 3);
        let a = CurrentLink::group("default", "a").unwrap();
        let b = CurrentLink::group("default", "b").unwrap();
        store.activate(&digests[0], &a).unwrap();
        store.activate(&digests[1], &b).unwrap();
        // Group a rolls to the third version; the first is no longer linked.
        store.activate(&digests[2], &a).unwrap();

        let mut c = Cleanup::new(Duration::ZERO);
        let both_here = || Some([a.clone(), b.clone()].into_iter().collect());
        let removed = collect(&store, &mut c, Instant::now(), &both_here).expect("collect");
        assert_eq!(removed.versions, vec![digests[0]]);
        assert!(removed.links.is_empty());
        assert!(!store.version_dir(&digests[0]).exists());
        assert!(!store.is_complete(&digests[0]));
        for kept in &digests[1..] {
            assert!(store.version_dir(kept).exists() && store.is_complete(kept));
        }
        // A linked version is refused even when asked for directly.
        assert!(!store.remove_unused(&digests[1]).expect("remove"));
        assert!(store.version_dir(&digests[1]).exists());
        // The workers' paths still resolve.
        assert!(store.link_path(&a).join("w.bin").is_file());
        assert!(store.link_path(&b).join("w.bin").is_file());
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn a_group_that_left_the_node_loses_its_link_and_then_its_version() {
        use crate::weights::link::CurrentLink;
        let (tmp, store, digests) = store_with_versions("links", 2);
        let a = CurrentLink::group("default", "a").unwrap();
        let b = CurrentLink::group("default", "b").unwrap();
        store.activate(&digests[0], &a).unwrap();
        store.activate(&digests[1], &b).unwrap();
        let only_a = || Some([a.clone()].into_iter().collect());
        let unknown = || None;

        let grace = Duration::from_secs(10);
        let mut c = Cleanup::new(grace);
        let t0 = Instant::now();
        // Before the driver has listed the node's Pods, no link is judged.
        let r = collect(&store, &mut c, t0 + grace * 5, &unknown).unwrap();
        assert_eq!(r, Removed::default());
        // b has no member here: its link goes after the grace, its version a grace later.
        assert_eq!(
            collect(&store, &mut c, t0, &only_a).unwrap(),
            Removed::default()
        );
        let r = collect(&store, &mut c, t0 + grace, &only_a).unwrap();
        assert_eq!(r.links, vec![b.clone()]);
        assert!(r.versions.is_empty(), "the version has its own grace");
        assert!(!store.link_path(&b).parent().unwrap().exists());
        let r = collect(&store, &mut c, t0 + grace * 2, &only_a).unwrap();
        assert_eq!(r.versions, vec![digests[1]]);
        assert!(!store.version_dir(&digests[1]).exists());
        // a keeps its link and version throughout.
        assert!(store.link_path(&a).join("w.bin").is_file());

        // A group that arrives between the plan and the removal keeps its link.
        store.activate(&digests[0], &b).unwrap();
        let asked = std::cell::Cell::new(0);
        let b_arrives = || {
            asked.set(asked.get() + 1);
            let here = if asked.get() == 1 {
                vec![a.clone()]
            } else {
                vec![a.clone(), b.clone()]
            };
            Some(here.into_iter().collect())
        };
        let mut c = Cleanup::new(Duration::ZERO);
        let r = collect(&store, &mut c, Instant::now(), &b_arrives).unwrap();
        assert!(r.links.is_empty(), "{r:?}");
        assert!(store.link_path(&b).join("w.bin").is_file());
        // The store-wide link is never a group's to remove.
        assert!(!store.remove_link(&CurrentLink::node()).unwrap());
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn a_fetch_abandoned_part_way_is_removed_after_the_grace_and_a_running_one_never() {
        let tmp = crate::weights::test_dirs::fresh("gc", "partial");
        let store = WeightStore::open(tmp.join("store")).expect("store");
        let src = tmp.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("w.bin"), vec![7u8; 10_000]).unwrap();
        let m = crate::weights::Manifest::build(&src, 4096).unwrap();
        let digest = m.digest();
        let nowhere = || None;
        let grace = Duration::from_secs(10);
        let mut c = Cleanup::new(grace);
        let t0 = Instant::now();

        // A running fetch holds its set: never removed, however long it runs.
        let (running, _) = store.begin(m.clone(), m.canonical_bytes()).unwrap();
        for k in 0..4 {
            let r = collect(&store, &mut c, t0 + grace * k, &nowhere).unwrap();
            assert!(r.partials.is_empty(), "{r:?}");
        }
        // It fails and lets go: the staging stays for a retry through the grace, then goes.
        drop(running);
        let t1 = t0 + grace * 4;
        let r = collect(&store, &mut c, t1, &nowhere).unwrap();
        assert!(r.partials.is_empty(), "{r:?}");
        assert!(store.root().join("staging").join(digest.hex()).is_dir());
        let r = collect(&store, &mut c, t1 + grace, &nowhere).unwrap();
        assert_eq!(r.partials, vec![digest]);
        assert!(!store.root().join("staging").join(digest.hex()).exists());
        assert!(store.have(&digest).is_none());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
