//! How a set enters the store: registering it (manifest on disk, staging files open,
//! already-verified chunks kept), and finalizing it (fsync, rename staging → versions).

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::WeightStore;
use super::direct;
use super::disk::{open_staging_files, plain_tree, sync_dir, sync_tree_dirs, write_synced};
use super::set::{SetState, WeightSet, installed_mode};
use crate::weights::bitset::ChunkBits;
use crate::weights::digest::Digest;
use crate::weights::error::{Result, WeightsError, io_at};
use crate::weights::manifest::{ChunkTable, Manifest};

impl WeightStore {
    pub(super) fn register(
        &self,
        digest: Digest,
        manifest: Manifest,
        bytes: Vec<u8>,
        complete: bool,
        dir: PathBuf,
        files: Vec<Arc<File>>,
    ) -> Arc<WeightSet> {
        let table = ChunkTable::new(&manifest);
        let n = table.len();
        let set = Arc::new(WeightSet {
            digest,
            manifest,
            manifest_bytes: Arc::new(bytes),
            table,
            state: Mutex::new(SetState {
                coming: ChunkBits::new(n),
                verified: if complete {
                    ChunkBits::full(n)
                } else {
                    ChunkBits::new(n)
                },
                dir,
                complete,
                files,
                direct: Vec::new(),
            }),
            flush: Arc::default(),
        });
        self.inner
            .sets
            .lock()
            .expect("store lock")
            .insert(digest, set.clone());
        set
    }

    pub(super) fn read_manifest(&self, digest: &Digest) -> Result<Option<(Manifest, Vec<u8>)>> {
        let path = self.manifest_path(digest);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(WeightsError::io("read", Some(path), e)),
        };
        if Digest::of(&bytes) != *digest {
            return Ok(None);
        }
        Ok(Some((Manifest::parse(&bytes)?, bytes)))
    }

    pub(super) fn write_manifest(&self, digest: &Digest, bytes: &[u8]) -> Result<()> {
        let path = self.manifest_path(digest);
        let tmp = path.with_extension("json.tmp");
        write_synced(&tmp, bytes)?;
        fs::rename(&tmp, &path).map_err(io_at("rename", &path))?;
        sync_dir(&self.inner.root.join("manifests"))
    }

    /// Starts (or resumes) holding a set whose manifest was verified: records the
    /// manifest, preallocates the staging files, and keeps every staged chunk that still
    /// hashes right. Returns the set and how many chunks were already there. Blocking.
    pub(crate) fn begin(
        &self,
        manifest: Manifest,
        bytes: Vec<u8>,
    ) -> Result<(Arc<WeightSet>, usize)> {
        let _staging = self.inner.staging.lock().unwrap_or_else(|p| p.into_inner());
        let digest = Digest::of(&bytes);
        if let Some(set) = self.set(&digest) {
            let mut st = set.state.lock().expect("set lock");
            if !st.complete && st.files.is_empty() {
                // A complete version with a chunk found corrupt (`forget_chunk`): its
                // files are reopened for writing and the missing chunks fetched into them.
                for entry in &set.manifest.files {
                    let path = st.dir.join(&entry.path);
                    // Owner write added, read bits kept: workers may be reading it.
                    let mode = installed_mode(entry.mode) | 0o200;
                    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                        .map_err(io_at("chmod", &path))?;
                }
                st.files = open_staging_files(&st.dir, &set.manifest)?;
                st.direct = direct::open_all(&st.dir, &set.manifest);
            }
            let have = st.verified.count();
            drop(st);
            return Ok((set, have));
        }
        self.write_manifest(&digest, &bytes)?;
        let version = self.version_dir(&digest);
        if fs::symlink_metadata(&version).is_ok() {
            if version.is_dir() && plain_tree(&version).is_ok() && !version.is_symlink() {
                let set = self.register(digest, manifest, bytes, true, version, Vec::new());
                let n = set.table.len();
                return Ok((set, n));
            }
            tracing::warn!(set = %digest, "version holding a symlink or special file; removed, fetched again");
            self.discard_version(&digest)?;
        }
        let staging = self.staging_dir(&digest);
        let resuming = staging.is_dir();
        let files = open_staging_files(&staging, &manifest)?;
        let direct = direct::open_all(&staging, &manifest);
        let set = self.register(digest, manifest, bytes, false, staging, files);
        set.state.lock().expect("set lock").direct = direct;
        let mut have = 0;
        if resuming {
            for index in 0..set.table.len() {
                if set.staged_chunk_matches(index)? {
                    set.state.lock().expect("set lock").verified.set(index);
                    have += 1;
                }
            }
        }
        Ok((set, have))
    }

    /// Flushes every file, gives each its installed mode, renames staging to
    /// `versions/<hex>` (a repaired version is already there), and marks the set
    /// complete (it moves no link; see [`WeightStore::activate`]). Blocking.
    pub(crate) fn finalize(&self, set: &WeightSet) -> Result<PathBuf> {
        let mut st = set.state.lock().expect("set lock");
        if st.complete {
            return Ok(st.dir.clone());
        }
        if !st.verified.is_full() {
            return Err(WeightsError::Invalid(format!(
                "set {} has {} of {} chunks; not finalizing",
                set.digest,
                st.verified.count(),
                set.table.len()
            )));
        }
        if let Some(e) = set.flush.failure() {
            return Err(WeightsError::io(
                "write back (early flush)",
                Some(st.dir.clone()),
                std::io::Error::other(e),
            ));
        }
        for (f, entry) in st.files.iter().zip(&set.manifest.files) {
            let path = st.dir.join(&entry.path);
            f.sync_all().map_err(io_at("fsync", &path))?;
            fs::set_permissions(
                &path,
                fs::Permissions::from_mode(installed_mode(entry.mode)),
            )
            .map_err(io_at("chmod", &path))?;
        }
        sync_tree_dirs(&st.dir)?;
        let version = self.version_dir(&set.digest);
        if st.dir != version {
            fs::rename(&st.dir, &version).map_err(io_at("rename", &version))?;
            sync_dir(&self.inner.root.join("staging"))?;
        }
        sync_dir(&self.inner.root.join("versions"))?;
        st.dir = version.clone();
        st.complete = true;
        st.files.clear();
        st.direct.clear();
        Ok(version)
    }
}
