//! The local weight store: where verified weights live on a node, what it can serve, and
//! the atomic hand-over to the worker.
//!
//! ```text
//! <root>/manifests/<hex>.json   canonical manifest of set sha256:<hex>
//! <root>/staging/<hex>/...      the set's files, preallocated, filled chunk by chunk
//! <root>/versions/<hex>/...     complete, verified, fsync'd (renamed from staging)
//! <root>/groups/<ns>_<group>/current -> ../../versions/<hex>
//!                                 the link a group's workers read, swapped by rename
//! <root>/current -> versions/<hex>   the store-wide link (callers without a group)
//! ```
//!
//! Versions are content-addressed and shared: two groups with the same digest hold one
//! copy; each group's link ([`CurrentLink`]) moves independently of the others.
//!
//! Chunks are written in place into preallocated staging files (no second copy, no
//! assembly pass); a chunk counts as held only after its bytes hashed right and were
//! written. A fetch that restarts re-hashes the staging files and keeps every chunk that
//! still matches (resume). The staging directory becomes `versions/<hex>` by one rename
//! after every file is fsync'd, and only then does a link move — so the worker sees
//! either the old set or the complete new one, never a partial or unverified one.
//!
//! What is in the store is plain: directories and regular files, read-only, without
//! setuid/setgid/sticky bits (see `set::installed_mode`), never a symlink but the links
//! above. A version found holding anything else at open (or when a fetch would reuse it)
//! is removed, never served or activated; chunks are read back with `O_NOFOLLOW`.
//! Staging holds only resumable fetches (`staging/<hex>`, whose manifest is on disk and
//! whose chunks were each verified before they were written); an import's staging and
//! anything else found there at open are leftovers of a crash and are removed. A
//! resumable fetch nobody resumes is removed by the cleanup (`weights::gc`).
//!
//! The same store answers the chunk server: a verified chunk (of a complete set, or of one
//! still being fetched — that is what lets joiners serve each other) is located by digest
//! and re-read from disk for every request.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::bitset::ChunkBits;
use super::digest::{ChunkHash, Digest};
use super::error::{Result, WeightsError, io_at};
use super::link::{CURRENT_LINK, CurrentLink, GROUPS_DIR};
use super::source::SourceDir;

mod direct;
mod disk;
mod import;
mod partial;
#[cfg(test)]
mod safety_tests;
mod set;
mod staging;
#[cfg(test)]
mod tests;

pub use disk::{open_chunk, read_chunk};
use disk::{plain_tree, sync_dir};
pub(crate) use set::WeightSet;

/// Prefix of a version directory being removed (renamed into `staging/`).
const REMOVING: &str = ".removing-";

/// A handle on a node's weight store (cheap to clone; all clones share state).
#[derive(Debug, Clone)]
pub struct WeightStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    sets: Mutex<HashMap<Digest, Arc<WeightSet>>>,
    /// Held while a link moves and while an unused version is removed, so a version is
    /// never removed between a check that nothing links it and a link moving onto it.
    links: Mutex<()>,
    /// Held while a fetch begins (or resumes) a set and while a partial set is removed
    /// (`partial`), so a removal never pulls the staging from under a starting fetch.
    staging: Mutex<()>,
}

/// Where a verified chunk can be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkLocation {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
    pub set: Digest,
    pub index: usize,
    /// How the chunk's digest is computed (its set's chunk hash).
    pub hash: ChunkHash,
}

impl WeightStore {
    /// Opens (creating if needed) the store at `root` and registers the complete sets
    /// found under `versions/` (they were verified before they were renamed there).
    pub fn open(root: impl Into<PathBuf>) -> Result<WeightStore> {
        let root = root.into();
        for sub in ["manifests", "staging", "versions"] {
            let d = root.join(sub);
            fs::create_dir_all(&d).map_err(io_at("create directory", &d))?;
        }
        let store = WeightStore {
            inner: Arc::new(Inner {
                root,
                sets: Mutex::new(HashMap::new()),
                links: Mutex::new(()),
                staging: Mutex::new(()),
            }),
        };
        store.clean_staging()?;
        let versions = store.inner.root.join("versions");
        for entry in fs::read_dir(&versions).map_err(io_at("read directory", &versions))? {
            let entry = entry.map_err(io_at("read directory", &versions))?;
            let Some(digest) = entry
                .file_name()
                .to_str()
                .and_then(|n| Digest::from_hex(n).ok())
            else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if let Err(why) = if is_dir {
                plain_tree(&entry.path())
            } else {
                Err("not a directory".into())
            } {
                tracing::warn!(set = %digest, %why, "version holding a symlink or special file; removed, never served");
                store.discard_version(&digest)?;
                continue;
            }
            match store.read_manifest(&digest) {
                Ok(Some((m, bytes))) => {
                    store.register(digest, m, bytes, true, entry.path(), Vec::new());
                }
                _ => {
                    tracing::warn!(set = %digest, "version directory without a valid manifest; ignored")
                }
            }
        }
        Ok(store)
    }

    /// Removes what a crash left in `staging/`: interrupted removals (see
    /// `remove_unused`) and imports, and anything but a resumable fetch (a directory
    /// named by a digest whose verified manifest is on disk).
    fn clean_staging(&self) -> Result<()> {
        let staging = self.inner.root.join("staging");
        for entry in fs::read_dir(&staging).map_err(io_at("read directory", &staging))? {
            let entry = entry.map_err(io_at("read directory", &staging))?;
            let resumable = entry.file_type().is_ok_and(|t| t.is_dir())
                && entry
                    .file_name()
                    .to_str()
                    .and_then(|n| Digest::from_hex(n).ok())
                    .is_some_and(|d| matches!(self.read_manifest(&d), Ok(Some(_))))
                && plain_tree(&entry.path()).is_ok();
            if resumable {
                continue;
            }
            let path = entry.path();
            tracing::info!(path = %path.display(), "removing a leftover staging entry");
            let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(io_at("remove", &path))?;
        }
        Ok(())
    }

    /// Removes `versions/<hex>` if it is there (a damaged or unsafe copy about to be
    /// replaced): renamed out of `versions/` first (atomic), then deleted; the set is
    /// forgotten. A link onto it dangles until the replacement lands. Blocking.
    pub(super) fn discard_version(&self, digest: &Digest) -> Result<()> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let version = self.version_dir(digest);
        if fs::symlink_metadata(&version).is_err() {
            return Ok(());
        }
        self.inner.sets.lock().expect("store lock").remove(digest);
        let doomed = self.inner.root.join("staging").join(format!(
            "{REMOVING}{}-{}-d{}",
            digest.hex(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::rename(&version, &doomed).map_err(io_at("rename", &version))?;
        sync_dir(&self.inner.root.join("versions"))?;
        let removed = if fs::symlink_metadata(&doomed).is_ok_and(|m| m.is_dir()) {
            fs::remove_dir_all(&doomed)
        } else {
            fs::remove_file(&doomed)
        };
        removed.map_err(io_at("remove", &doomed))
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The store-wide link `<root>/current` (a symlink to the active version).
    pub fn current_path(&self) -> PathBuf {
        self.link_path(&CurrentLink::node())
    }

    /// Where `link` is: the path a worker is given.
    pub fn link_path(&self, link: &CurrentLink) -> PathBuf {
        self.inner.root.join(link.relative())
    }

    /// Directory of a complete set.
    pub fn version_dir(&self, digest: &Digest) -> PathBuf {
        self.inner.root.join("versions").join(digest.hex())
    }

    fn staging_dir(&self, digest: &Digest) -> PathBuf {
        self.inner.root.join("staging").join(digest.hex())
    }

    fn manifest_path(&self, digest: &Digest) -> PathBuf {
        self.inner
            .root
            .join("manifests")
            .join(format!("{}.json", digest.hex()))
    }

    /// The set the store-wide `current` points to, if any.
    pub fn current(&self) -> Result<Option<Digest>> {
        self.current_of(&CurrentLink::node())
    }

    /// The set `link` points to, if any.
    pub fn current_of(&self, link: &CurrentLink) -> Result<Option<Digest>> {
        let link = self.link_path(link);
        match fs::read_link(&link) {
            Ok(target) => Ok(target
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| Digest::from_hex(n).ok())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(WeightsError::io("read link", Some(link), e)),
        }
    }

    /// Whether the set is complete (verified, installed under `versions/`).
    pub fn is_complete(&self, digest: &Digest) -> bool {
        self.set(digest)
            .is_some_and(|s| s.state.lock().expect("set lock").complete)
    }

    /// The verified-chunk bitmap of a known set (complete or in progress).
    pub fn have(&self, digest: &Digest) -> Option<ChunkBits> {
        self.set(digest)
            .map(|s| s.state.lock().expect("set lock").verified.clone())
    }

    /// The chunks of a known set that this node is fetching right now.
    pub fn coming(&self, digest: &Digest) -> Option<ChunkBits> {
        self.set(digest)
            .map(|s| s.state.lock().expect("set lock").coming.clone())
    }

    /// The canonical manifest bytes of a known set.
    pub fn manifest_bytes(&self, digest: &Digest) -> Option<Arc<Vec<u8>>> {
        self.set(digest).map(|s| s.manifest_bytes.clone())
    }

    /// Where a verified chunk with this digest can be read, in any known set.
    pub fn locate(&self, chunk: &Digest) -> Option<ChunkLocation> {
        self.sets().iter().find_map(|s| {
            let index = s.table.index_of(chunk)?;
            let st = s.state.lock().expect("set lock");
            if !st.verified.get(index) {
                return None;
            }
            let info = &s.table.chunks[index];
            let (file, offset) = info.places[0];
            Some(ChunkLocation {
                path: st.dir.join(&s.manifest.files[file].path),
                offset,
                len: info.len,
                set: s.digest,
                index,
                hash: s.manifest.chunk_hash(),
            })
        })
    }

    /// Withdraws a chunk that no longer reads back right (disk corruption): it is no
    /// longer served, and the set is no longer complete, so the next sync fetches it
    /// again (repairing the version in place, see `begin`) instead of activating it.
    pub fn forget_chunk(&self, set: &Digest, index: usize) {
        if let Some(s) = self.set(set) {
            let mut st = s.state.lock().expect("set lock");
            st.verified.clear(index);
            st.complete = false;
        }
    }

    /// Makes `link` point at the complete set `digest`: a new symlink renamed over the old
    /// one (atomic for readers), then the link's directory fsync'd. Other links are not
    /// touched.
    pub fn activate(&self, digest: &Digest, link: &CurrentLink) -> Result<PathBuf> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let _links = self.inner.links.lock().unwrap_or_else(|p| p.into_inner());
        if !self.is_complete(digest) {
            return Err(WeightsError::Invalid(format!(
                "set {digest} is not complete in this store"
            )));
        }
        let path = self.link_path(link);
        let dir = path.parent().expect("a link has a parent directory");
        fs::create_dir_all(dir).map_err(io_at("create directory", dir))?;
        // Unique per call: two activations of one link may run at once (two digests).
        let tmp = dir.join(format!(
            ".{CURRENT_LINK}.tmp-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_file(&tmp);
        symlink(link.target(&digest.hex()), &tmp).map_err(io_at("symlink", &tmp))?;
        fs::rename(&tmp, &path).map_err(io_at("rename", &path))?;
        sync_dir(dir)?;
        Ok(path)
    }

    /// The complete sets (installed under `versions/`).
    pub fn complete_versions(&self) -> BTreeSet<Digest> {
        self.sets()
            .iter()
            .filter(|s| s.state.lock().expect("set lock").complete)
            .map(|s| s.digest)
            .collect()
    }

    /// The sets some link points at: the store-wide `current` and every group's.
    pub fn linked_versions(&self) -> Result<BTreeSet<Digest>> {
        let mut out: BTreeSet<Digest> = self.current()?.into_iter().collect();
        for link in self.group_links()? {
            out.extend(self.current_of(&link)?);
        }
        Ok(out)
    }

    /// The links of every group that has one in this store.
    pub fn group_links(&self) -> Result<BTreeSet<CurrentLink>> {
        let groups = self.inner.root.join(GROUPS_DIR);
        let entries = match fs::read_dir(&groups) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(e) => return Err(WeightsError::io("read directory", Some(groups), e)),
        };
        let mut out = BTreeSet::new();
        for entry in entries {
            let entry = entry.map_err(io_at("read directory", &groups))?;
            out.extend(
                entry
                    .file_name()
                    .to_str()
                    .and_then(CurrentLink::of_group_dir),
            );
        }
        Ok(out)
    }

    /// Removes a group's link and its directory, so the version it pointed at can be
    /// collected once nothing else links it. Returns false, touching nothing, for the
    /// store-wide link or a group without one. Blocking.
    pub fn remove_link(&self, link: &CurrentLink) -> Result<bool> {
        if !link.is_group() {
            return Ok(false);
        }
        let _links = self.inner.links.lock().unwrap_or_else(|p| p.into_inner());
        let path = self.link_path(link);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(WeightsError::io("remove link", Some(path), e)),
        }
        let dir = path.parent().expect("a link has a parent directory");
        // Leftover temporary links of an interrupted activation go with it.
        fs::remove_dir_all(dir).map_err(io_at("remove directory", dir))?;
        sync_dir(&self.inner.root.join(GROUPS_DIR))?;
        Ok(true)
    }

    /// Removes a complete set no link points at: it is no longer served, its directory is
    /// renamed out of `versions/` (atomic) and deleted, its manifest with it. Returns
    /// false, touching nothing, if a link points at it or it is not complete. Blocking.
    pub fn remove_unused(&self, digest: &Digest) -> Result<bool> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let _links = self.inner.links.lock().unwrap_or_else(|p| p.into_inner());
        if !self.is_complete(digest) || self.linked_versions()?.contains(digest) {
            return Ok(false);
        }
        self.inner.sets.lock().expect("store lock").remove(digest);
        let version = self.version_dir(digest);
        let doomed = self.inner.root.join("staging").join(format!(
            "{REMOVING}{}-{}-{}",
            digest.hex(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::rename(&version, &doomed).map_err(io_at("rename", &version))?;
        sync_dir(&self.inner.root.join("versions"))?;
        let manifest = self.manifest_path(digest);
        let _ = fs::remove_file(&manifest);
        fs::remove_dir_all(&doomed).map_err(io_at("remove directory", &doomed))?;
        Ok(true)
    }

    /// Installs the first members' copy and points the store-wide `current` at it (see
    /// [`WeightStore::install_dir`]). Blocking.
    pub fn import_dir(&self, source: &Path, expected: &Digest, chunk_size: u64) -> Result<PathBuf> {
        self.install_dir(source, expected, chunk_size)?;
        self.activate(expected, &CurrentLink::node())
    }

    /// Installs the first members' copy from a directory the caller vouches for (its own
    /// path is followed; inside it, symlinks and special files are refused), as
    /// [`WeightStore::install_source`] does. Blocking.
    pub fn install_dir(
        &self,
        source: &Path,
        expected: &Digest,
        chunk_size: u64,
    ) -> Result<PathBuf> {
        if self.is_complete(expected) {
            return Ok(self.version_dir(expected));
        }
        self.install_source(&SourceDir::trusted(source)?, expected, &[chunk_size])
    }

    /// A snapshot of the known sets (the store lock is not held while they are looked at).
    fn sets(&self) -> Vec<Arc<WeightSet>> {
        self.inner
            .sets
            .lock()
            .expect("store lock")
            .values()
            .cloned()
            .collect()
    }

    fn set(&self, digest: &Digest) -> Option<Arc<WeightSet>> {
        self.inner
            .sets
            .lock()
            .expect("store lock")
            .get(digest)
            .cloned()
    }
}
