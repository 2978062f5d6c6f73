//! Fetches that stopped part-way. A failed fetch keeps its staging (`staging/<hex>`, its
//! manifest in `manifests/`) so that the member's retry resumes instead of starting over;
//! a fetch nobody resumes — its member deleted mid-sync, its group gone, a digest no
//! source ever served in full — would otherwise hold its bytes on the node for good.
//! `weights::gc` removes those no fetch has held for its grace, through these.

use std::collections::BTreeSet;
use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{REMOVING, WeightStore};
use crate::weights::digest::Digest;
use crate::weights::error::{Result, io_at};

impl WeightStore {
    /// The sets staged part-way: every `staging/<hex>` directory (after a restart they are
    /// on disk only, not yet registered). One whose version is installed meanwhile (the
    /// declared source imported instead) is a leftover of its fetch.
    pub fn partial_sets(&self) -> Result<BTreeSet<Digest>> {
        let staging = self.inner.root.join("staging");
        let mut out = BTreeSet::new();
        for entry in fs::read_dir(&staging).map_err(io_at("read directory", &staging))? {
            let entry = entry.map_err(io_at("read directory", &staging))?;
            let digest = entry
                .file_name()
                .to_str()
                .and_then(|n| Digest::from_hex(n).ok());
            if let Some(digest) = digest
                && entry.file_type().is_ok_and(|t| t.is_dir())
            {
                out.insert(digest);
            }
        }
        Ok(out)
    }

    /// The sets a fetch is filling now. A running fetch holds its set (besides the store's
    /// own reference) from `begin` until it finishes or fails.
    pub fn partial_sets_in_use(&self) -> BTreeSet<Digest> {
        self.inner
            .sets
            .lock()
            .expect("store lock")
            .values()
            .filter(|s| Arc::strong_count(s) > 1)
            .map(|s| s.digest)
            .collect()
    }

    /// Removes a partial set no fetch holds: forgotten (no longer served), its manifest
    /// removed, its staging renamed out of the way and deleted. Of a set whose version is
    /// installed only the leftover staging goes. Returns false, touching nothing, if a
    /// fetch holds the set or nothing is staged. A fetch starting meanwhile waits for the
    /// check and the rename (`begin` takes the same lock) and then starts afresh. Blocking.
    pub fn remove_partial(&self, digest: &Digest) -> Result<bool> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let doomed = {
            let _staging = self.inner.staging.lock().unwrap_or_else(|p| p.into_inner());
            let mut sets = self.inner.sets.lock().expect("store lock");
            let staging = self.staging_dir(digest);
            if let Some(set) = sets.get(digest) {
                if Arc::strong_count(set) > 1 {
                    return Ok(false);
                }
                let staged = set.state.lock().expect("set lock").dir == staging;
                if staged {
                    sets.remove(digest);
                }
            }
            drop(sets);
            let doomed = self.inner.root.join("staging").join(format!(
                "{REMOVING}{}-{}-p{}",
                digest.hex(),
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            match fs::rename(&staging, &doomed) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(io_at("rename", &staging)(e)),
            }
            if fs::symlink_metadata(self.version_dir(digest)).is_err() {
                let manifest = self.manifest_path(digest);
                match fs::remove_file(&manifest) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(io_at("remove", &manifest)(e));
                    }
                    _ => {}
                }
            }
            doomed
        };
        fs::remove_dir_all(&doomed).map_err(io_at("remove directory", &doomed))?;
        Ok(true)
    }
}
