//! Which requests of an authenticated connection the chunk server answers: only those
//! about the weights sets its group may fetch ([`Grant::sets`], the group's
//! `spec.weights.digest`). A manifest or bitmap of another set is refused with a named
//! error (the connection then ends); a chunk that belongs to none of the allowed sets is
//! answered `Missing`, as if not held, so chunk digests learnt elsewhere reveal nothing.

use std::collections::HashSet;

use super::auth::Grant;
use super::digest::Digest;
use super::manifest::{ChunkTable, Manifest};
use super::store::WeightStore;

/// A connection's permissions, with the chunks of its allowed sets learnt from the
/// store's manifests on first need.
#[derive(Debug)]
pub struct Allowed {
    grant: Grant,
    chunks: HashSet<Digest>,
    /// Allowed sets whose manifest was in the store when `chunks` was built.
    known: usize,
}

impl Allowed {
    pub fn new(grant: Grant) -> Allowed {
        Allowed {
            grant,
            chunks: HashSet::new(),
            known: 0,
        }
    }

    /// Why a request about `set` is refused, or None when it may be answered.
    pub fn refuse_set(&self, set: &Digest) -> Option<String> {
        (!self.grant.allows(set)).then(|| {
            format!(
                "not authorized: weights set {set} is not named by the spec.weights.digest of group {}",
                self.grant.group
            )
        })
    }

    /// Whether `chunk` belongs to a set the group may fetch (as far as the store knows).
    pub fn chunk(&mut self, store: &WeightStore, chunk: &Digest) -> bool {
        let Some(sets) = &self.grant.sets else {
            return true;
        };
        if self.chunks.contains(chunk) {
            return true;
        }
        // A set may have arrived since: relearn only when more manifests are known.
        let manifests: Vec<Manifest> = sets
            .iter()
            .filter_map(|s| store.manifest_bytes(s))
            .filter_map(|b| Manifest::parse(&b).ok())
            .collect();
        if manifests.len() > self.known {
            self.known = manifests.len();
            self.chunks = manifests
                .iter()
                .flat_map(|m| ChunkTable::new(m).chunks.into_iter().map(|c| c.digest))
                .collect();
        }
        self.chunks.contains(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::GroupSecret;
    use crate::weights::auth::GroupId;

    #[test]
    fn only_the_groups_sets_and_their_chunks_are_allowed() {
        let tmp = crate::weights::test_dirs::fresh("authorize", "sets");
        let store = WeightStore::open(tmp.join("store")).unwrap();
        let mut sets = Vec::new();
        for (i, byte) in [1u8, 2].into_iter().enumerate() {
            let src = tmp.join(format!("src{i}"));
            std::fs::create_dir_all(&src).unwrap();
            std::fs::write(src.join("w.bin"), vec![byte; 8192]).unwrap();
            let m = Manifest::build(&src, 4096).unwrap();
            store.install_dir(&src, &m.digest(), 4096).unwrap();
            sets.push(m);
        }
        let (mine, theirs) = (&sets[0], &sets[1]);
        let grant = Grant {
            group: GroupId::new("ns", "b", "u"),
            secret: GroupSecret::new("k"),
            sets: Some(vec![mine.digest()]),
        };
        let mut a = Allowed::new(grant.clone());
        assert_eq!(a.refuse_set(&mine.digest()), None);
        let why = a.refuse_set(&theirs.digest()).unwrap();
        assert!(
            why.contains("not authorized") && why.contains("ns/b"),
            "{why}"
        );
        let my_chunk = ChunkTable::new(mine).chunks[0].digest;
        let their_chunk = ChunkTable::new(theirs).chunks[0].digest;
        assert!(a.chunk(&store, &my_chunk));
        assert!(!a.chunk(&store, &their_chunk));
        let mut any = Allowed::new(Grant {
            sets: None,
            ..grant
        });
        assert!(any.refuse_set(&theirs.digest()).is_none() && any.chunk(&store, &their_chunk));
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
