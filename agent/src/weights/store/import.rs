//! How the first members' copy enters the store: a checked local source
//! ([`SourceDir`]) is copied into a private staging directory, the manifest of the COPY
//! must hash to the expected digest, and only then is it renamed into `versions/`.
//!
//! The staging directory is `staging/.import-<hex>-<pid>-<n>`, removed on every failure
//! (refusal, I/O error, digest mismatch, a panic: [`Cleanup`] runs on drop) and, for an
//! agent killed mid-import, by [`WeightStore::open`]. Files are created `0o600` while
//! copied (no worker can run or read a half-copied file) and get their installed mode
//! ([`super::set::installed_mode`]: setuid/setgid/sticky and group/other write bits
//! gone) when the set is finalized; the manifest records the source's mode, so the
//! digest is the one `hcomm-agent weights manifest` printed for the source.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::WeightStore;
use super::disk::open_staging_files;
use crate::weights::bitset::ChunkBits;
use crate::weights::digest::{ChunkHash, Digest};
use crate::weights::error::{Result, Subject, WeightsError, io_at};
use crate::weights::manifest::{ChunkTable, Manifest};
use crate::weights::source::{SourceDir, SourceEntry};

/// Name prefix of an import's staging directory (always removed at store open).
pub(super) const IMPORTING: &str = ".import-";

/// Removes a directory on drop unless disarmed: the staging of an import that failed.
struct Cleanup(Option<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take()
            && let Err(e) = fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove a failed import's staging directory");
        }
    }
}

impl WeightStore {
    /// Installs the first members' copy from a checked source: copies it into a private
    /// staging directory, builds the manifest of the copy (what we hold is what we
    /// checked) with each of `chunk_sizes` in turn until one hashes to `expected`
    /// (refused if none does), then renames it to `versions/<hex>` (returned). No link
    /// moves; nothing is left in staging on failure. Blocking.
    pub fn install_source(
        &self,
        source: &SourceDir,
        expected: &Digest,
        chunk_sizes: &[u64],
    ) -> Result<PathBuf> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        if self.is_complete(expected) {
            return Ok(self.version_dir(expected));
        }
        // The whole tree is checked before a byte is read; the copy checks again what it
        // reads (the tree may change in between).
        source.check()?;
        let staging = self.inner.root.join("staging").join(format!(
            "{IMPORTING}{}-{}-{}",
            expected.hex(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut cleanup = Cleanup(Some(staging.clone()));
        let modes = copy_source(source, &staging)?;
        let manifest = manifest_of_copy(&staging, &modes, expected, chunk_sizes)?;
        // A damaged copy of this set (a chunk found corrupt) is replaced whole.
        self.discard_version(expected)?;
        let bytes = manifest.canonical_bytes();
        self.write_manifest(expected, &bytes)?;
        let files = open_staging_files(&staging, &manifest)?;
        let n = ChunkTable::new(&manifest).len();
        let set = self.register(*expected, manifest, bytes, false, staging, files);
        set.state.lock().expect("set lock").verified = ChunkBits::full(n);
        match self.finalize(&set) {
            Ok(version) => {
                cleanup.0 = None;
                Ok(version)
            }
            Err(e) => {
                self.inner.sets.lock().expect("store lock").remove(expected);
                Err(e)
            }
        }
    }
}

/// The manifest of the copy in `staging` that hashes to `expected`, the files given their
/// source `modes`. The digest does not say how its chunks were cut or hashed: the copy is
/// hashed under every chunk hash in one read per chunk size, the sizes in order, until a
/// manifest hashes to it.
fn manifest_of_copy(
    staging: &Path,
    modes: &HashMap<String, u32>,
    expected: &Digest,
    chunk_sizes: &[u64],
) -> Result<Manifest> {
    let mut first = None;
    for &size in chunk_sizes {
        let mut candidates = Manifest::build_each(staging, size, &ChunkHash::ALL)?;
        for manifest in &mut candidates {
            for f in &mut manifest.files {
                f.mode = *modes.get(&f.path).ok_or_else(|| {
                    WeightsError::Invalid(format!("{} was not copied from the source", f.path))
                })?;
            }
        }
        if let Some(at) = candidates.iter().position(|m| m.digest() == *expected) {
            return Ok(candidates.swap_remove(at));
        }
        first.get_or_insert_with(|| candidates[0].digest());
    }
    Err(WeightsError::DigestMismatch {
        subject: Subject::Manifest,
        peer: None,
        expected: *expected,
        // What `hcomm-agent weights manifest` prints for the copy (the first size).
        actual: first
            .ok_or_else(|| WeightsError::Invalid("no chunk size to import with".into()))?,
    })
}

/// Copies the checked tree into `to` (created), files `0o600`; returns each file's
/// source mode by manifest path.
fn copy_source(source: &SourceDir, to: &Path) -> Result<HashMap<String, u32>> {
    fs::create_dir(to).map_err(io_at("create directory", to))?;
    let mut modes = HashMap::new();
    source.walk(&mut |entry| -> Result<()> {
        match entry {
            SourceEntry::Dir(rel) => {
                let d = to.join(rel);
                fs::create_dir(&d).map_err(io_at("create directory", &d))
            }
            SourceEntry::File(rel, file) => {
                let dst = to.join(rel);
                let mut from = file.open().map_err(io_at("open", &file.path))?;
                let mut out = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&dst)
                    .map_err(io_at("create", &dst))?;
                std::io::copy(&mut from, &mut out).map_err(io_at("copy", &file.path))?;
                modes.insert(rel.to_string_lossy().into_owned(), file.mode());
                Ok(())
            }
        }
    })?;
    Ok(modes)
}
