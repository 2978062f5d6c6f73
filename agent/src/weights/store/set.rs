//! One weights set the store knows ([`WeightSet`]): its manifest, which chunks are verified
//! or coming, the open staging files it is written through, and the early write-back that
//! keeps the final fsync short.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::weights::bitset::ChunkBits;
use crate::weights::digest::Digest;
use crate::weights::error::{Result, io_at};
use crate::weights::manifest::{ChunkTable, Manifest};

/// The mode a file of the store gets: the manifest's permission bits without setuid,
/// setgid, sticky and group/other write (`mode & 0o755`). The store is mounted into
/// every worker and its files are owned by the agent (root): a tenant's manifest must
/// not hand workers a setuid-root file, nor a shared file they could rewrite. The usual
/// `0o644`/`0o755` stay as they are, so an installed set still hashes to its digest.
pub(crate) fn installed_mode(manifest_mode: u32) -> u32 {
    manifest_mode & 0o755
}

/// One weights set known to the store, complete or being fetched.
#[derive(Debug)]
pub(crate) struct WeightSet {
    pub digest: Digest,
    pub manifest: Manifest,
    pub manifest_bytes: Arc<Vec<u8>>,
    pub table: ChunkTable,
    pub(super) state: Mutex<SetState>,
    pub(super) flush: Arc<EarlyFlush>,
}

/// Writes back a fetched set's data while the fetch runs. Finalizing must fsync every
/// file before the set counts as complete; left to the end, that fsync waits for the
/// whole set to reach the disk (about 0.4 s per GiB here, the page cache holding it all),
/// time during which the joiner is still not Ready. So every [`FLUSH_EVERY`] bytes a
/// background thread `fdatasync`s the set's files, and the final fsync finds little left.
/// A failed early flush fails the finalize: the kernel reports a write-back error to
/// each open file once, so the final fsync might not see it again.
#[derive(Debug, Default)]
pub(super) struct EarlyFlush {
    pub(super) unflushed: AtomicU64,
    pub(super) running: std::sync::atomic::AtomicBool,
    pub(super) failed: Mutex<Option<String>>,
}

/// Bytes written between two early flushes.
pub(super) const FLUSH_EVERY: u64 = 64 << 20;

impl EarlyFlush {
    /// Counts `bytes` written to `files`; starts a flush when enough has piled up and none
    /// is running.
    pub(super) fn wrote(self: &Arc<Self>, bytes: u64, files: &[Arc<File>]) {
        let pending = self.unflushed.fetch_add(bytes, Ordering::AcqRel) + bytes;
        if pending < FLUSH_EVERY || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        self.unflushed.store(0, Ordering::Release);
        let (flush, files) = (self.clone(), files.to_vec());
        let spawned = std::thread::Builder::new()
            .name("weights-flush".into())
            .spawn(move || {
                for f in &files {
                    if let Err(e) = f.sync_data() {
                        let mut failed = flush.failed.lock().unwrap_or_else(|p| p.into_inner());
                        failed.get_or_insert_with(|| e.to_string());
                    }
                }
                flush.running.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            // No thread to spare: the final fsync does it all.
            self.running.store(false, Ordering::Release);
        }
    }

    /// The first early flush error, if any, once no flush runs any more (one still
    /// running could yet take the error the final fsync would not see). Blocking.
    pub(super) fn failure(&self) -> Option<String> {
        while self.running.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[derive(Debug)]
pub(super) struct SetState {
    pub(super) verified: ChunkBits,
    /// Chunks this node's own fetch has in flight (advertised to fellow joiners).
    pub(super) coming: ChunkBits,
    /// Directory holding the files now: staging while fetching, versions once complete.
    pub(super) dir: PathBuf,
    pub(super) complete: bool,
    /// Open staging files (index = manifest file index), for positional writes.
    pub(super) files: Vec<Arc<File>>,
    /// The same files opened `O_DIRECT` while a fetch writes them (`None` where refused;
    /// empty when not fetching): see [`super::direct`].
    pub(super) direct: Vec<Option<Arc<File>>>,
}

impl WeightSet {
    /// Writes a verified chunk at every place it occurs, then marks it held. Blocking.
    pub(crate) fn write_chunk(&self, index: usize, data: &[u8]) -> Result<()> {
        let (files, mut direct, dir) = {
            let st = self.state.lock().expect("set lock");
            if st.complete || st.verified.get(index) {
                return Ok(());
            }
            (st.files.clone(), st.direct.clone(), st.dir.clone())
        };
        let places = &self.table.chunks[index].places;
        for &(file, offset) in places {
            let handle = direct.get(file).and_then(|d| d.as_deref());
            let refused = super::direct::write_at(&files[file], handle, data, offset)
                .map_err(io_at("write", &dir.join(&self.manifest.files[file].path)))?;
            if refused {
                tracing::debug!(file = %self.manifest.files[file].path, "O_DIRECT write refused; this file goes through the page cache");
                // This chunk's other places in the file too, and every later chunk's.
                if let Some(d) = direct.get_mut(file) {
                    *d = None;
                }
                if let Some(d) = self.state.lock().expect("set lock").direct.get_mut(file) {
                    *d = None;
                }
            }
        }
        self.flush.wrote((data.len() * places.len()) as u64, &files);
        self.state.lock().expect("set lock").verified.set(index);
        Ok(())
    }

    /// Replaces the set of chunks advertised as being fetched.
    pub(crate) fn set_coming(&self, coming: ChunkBits) {
        self.state.lock().expect("set lock").coming = coming;
    }

    pub(crate) fn is_held(&self, index: usize) -> bool {
        self.state.lock().expect("set lock").verified.get(index)
    }

    pub(super) fn staged_chunk_matches(&self, index: usize) -> Result<bool> {
        let info = &self.table.chunks[index];
        let (file, offset) = info.places[0];
        let (f, path) = {
            let st = self.state.lock().expect("set lock");
            (
                st.files[file].clone(),
                st.dir.join(&self.manifest.files[file].path),
            )
        };
        let mut buf = vec![0u8; info.len as usize];
        f.read_exact_at(&mut buf, offset)
            .map_err(io_at("read", &path))?;
        if self.manifest.chunk_hash().digest(&buf) != info.digest {
            return Ok(false);
        }
        // Duplicates of this chunk elsewhere may not have been written yet.
        for &(file, offset) in &info.places[1..] {
            let f = self.state.lock().expect("set lock").files[file].clone();
            f.write_all_at(&buf, offset)
                .map_err(io_at("write", &path))?;
        }
        Ok(true)
    }
}
