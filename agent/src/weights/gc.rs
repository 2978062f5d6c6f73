//! Removal of weight versions nothing uses any more.
//!
//! Every rolling update leaves the previous version under `versions/<hex>` once the last
//! group link has moved off it; without removal a node's disk fills one model version at a
//! time. A complete version is removed once no link in the store (the store-wide `current`
//! or any group's) has pointed at it for `grace`: long enough for a worker that still
//! reads through an old path to finish, and for a member that comes back with the old
//! digest (a rollback) to find it without a transfer. Sets still being fetched are never
//! touched. [`Collector`] decides (pure, given the time); [`collect`] acts on a store.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::digest::Digest;
use super::error::Result;
use super::store::WeightStore;

/// Remembers since when each unused version has been unused.
#[derive(Debug)]
pub struct Collector {
    grace: Duration,
    unused_since: HashMap<Digest, Instant>,
}

impl Collector {
    /// A collector that removes versions unused for `grace`.
    pub fn new(grace: Duration) -> Collector {
        Collector {
            grace,
            unused_since: HashMap::new(),
        }
    }

    /// The versions to remove now, of the `complete` ones, given those `in_use` (pure).
    /// A version seen in use again starts over.
    pub fn plan(
        &mut self,
        now: Instant,
        complete: &BTreeSet<Digest>,
        in_use: &BTreeSet<Digest>,
    ) -> Vec<Digest> {
        self.unused_since
            .retain(|d, _| complete.contains(d) && !in_use.contains(d));
        let mut due = Vec::new();
        for d in complete.difference(in_use) {
            let since = *self.unused_since.entry(*d).or_insert(now);
            if now.saturating_duration_since(since) >= self.grace {
                due.push(*d);
            }
        }
        for d in &due {
            self.unused_since.remove(d);
        }
        due
    }
}

/// One pass over `store`: removes the versions [`Collector::plan`] says are due and
/// returns them. Blocking (directory removal). A version a link moved back onto between
/// the plan and the removal is kept ([`WeightStore::remove_unused`] re-checks under the
/// store's link lock).
pub fn collect(
    store: &WeightStore,
    collector: &mut Collector,
    now: Instant,
) -> Result<Vec<Digest>> {
    let complete = store.complete_versions();
    let in_use = store.linked_versions()?;
    let mut removed = Vec::new();
    for digest in collector.plan(now, &complete, &in_use) {
        if store.remove_unused(&digest)? {
            removed.push(digest);
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

    #[test]
    fn the_store_removes_an_unlinked_version_and_keeps_linked_ones() {
        use crate::weights::link::CurrentLink;
        let tmp = crate::weights::test_dirs::fresh("gc", "store");
        let store = WeightStore::open(tmp.join("store")).expect("store");
        let mut digests = Vec::new();
        for seed in [1u8, 2, 3] {
            let src = tmp.join(format!("src{seed}"));
            std::fs::create_dir_all(&src).unwrap();
            std::fs::write(src.join("w.bin"), vec![seed; 10_000]).unwrap();
            let m = crate::weights::Manifest::build(&src, 4096).unwrap();
            store.install_dir(&src, &m.digest(), 4096).unwrap();
            digests.push(m.digest());
        }
        let a = CurrentLink::group("default", "a").unwrap();
        let b = CurrentLink::group("default", "b").unwrap();
        store.activate(&digests[0], &a).unwrap();
        store.activate(&digests[1], &b).unwrap();
        // Group a rolls to the third version; the first is no longer linked.
        store.activate(&digests[2], &a).unwrap();

        let mut c = Collector::new(Duration::ZERO);
        let removed = collect(&store, &mut c, Instant::now()).expect("collect");
        assert_eq!(removed, vec![digests[0]]);
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
}
