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
//! The same store answers the chunk server: a verified chunk (of a complete set, or of one
//! still being fetched — that is what lets joiners serve each other) is located by digest
//! and re-read from disk for every request.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::bitset::ChunkBits;
use super::digest::Digest;
use super::error::{Result, Subject, WeightsError, io_at};
use super::link::{CURRENT_LINK, CurrentLink, GROUPS_DIR};
use super::manifest::{ChunkTable, Manifest};

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
}

/// One weights set known to the store, complete or being fetched.
#[derive(Debug)]
pub(crate) struct WeightSet {
    pub digest: Digest,
    pub manifest: Manifest,
    pub manifest_bytes: Arc<Vec<u8>>,
    pub table: ChunkTable,
    state: Mutex<SetState>,
    flush: Arc<EarlyFlush>,
}

/// Writes back a fetched set's data while the fetch runs. Finalizing must fsync every
/// file before the set counts as complete; left to the end, that fsync waits for the
/// whole set to reach the disk (about 0.4 s per GiB here, the page cache holding it all),
/// time during which the joiner is still not Ready. So every [`FLUSH_EVERY`] bytes a
/// background thread `fdatasync`s the set's files, and the final fsync finds little left.
/// A failed early flush fails the finalize: the kernel reports a write-back error to
/// each open file once, so the final fsync might not see it again.
#[derive(Debug, Default)]
struct EarlyFlush {
    unflushed: AtomicU64,
    running: std::sync::atomic::AtomicBool,
    failed: Mutex<Option<String>>,
}

/// Bytes written between two early flushes.
const FLUSH_EVERY: u64 = 64 << 20;

impl EarlyFlush {
    /// Counts `bytes` written to `files`; starts a flush when enough has piled up and none
    /// is running.
    fn wrote(self: &Arc<Self>, bytes: u64, files: &[Arc<File>]) {
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
    fn failure(&self) -> Option<String> {
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
struct SetState {
    verified: ChunkBits,
    /// Chunks this node's own fetch has in flight (advertised to fellow joiners).
    coming: ChunkBits,
    /// Directory holding the files now: staging while fetching, versions once complete.
    dir: PathBuf,
    complete: bool,
    /// Open staging files (index = manifest file index), for positional writes.
    files: Vec<Arc<File>>,
}

/// Where a verified chunk can be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkLocation {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
    pub set: Digest,
    pub index: usize,
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
            }),
        };
        // Removals interrupted by a crash (see `remove_unused`).
        let staging = store.inner.root.join("staging");
        for entry in fs::read_dir(&staging).map_err(io_at("read directory", &staging))? {
            let entry = entry.map_err(io_at("read directory", &staging))?;
            if entry.file_name().to_string_lossy().starts_with(REMOVING) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
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
            })
        })
    }

    /// Withdraws a chunk that no longer reads back right (disk corruption): it is no
    /// longer served, and the set is no longer offered as complete.
    pub fn forget_chunk(&self, set: &Digest, index: usize) {
        if let Some(s) = self.set(set) {
            s.state.lock().expect("set lock").verified.clear(index);
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

    /// Installs the first members' copy: copies the source directory into staging,
    /// builds the manifest of the COPY (what we hold is what we checked), refuses it if
    /// its digest is not `expected`, then renames it to `versions/<hex>` (returned). No link
    /// moves. Blocking.
    pub fn install_dir(
        &self,
        source: &Path,
        expected: &Digest,
        chunk_size: u64,
    ) -> Result<PathBuf> {
        if self.is_complete(expected) {
            return Ok(self.version_dir(expected));
        }
        let staging = self.staging_dir(expected);
        let _ = fs::remove_dir_all(&staging);
        copy_tree(source, &staging)?;
        let manifest = Manifest::build(&staging, chunk_size)?;
        let actual = manifest.digest();
        if actual != *expected {
            let _ = fs::remove_dir_all(&staging);
            return Err(WeightsError::DigestMismatch {
                subject: Subject::Manifest,
                peer: None,
                expected: *expected,
                actual,
            });
        }
        let bytes = manifest.canonical_bytes();
        self.write_manifest(expected, &bytes)?;
        let files = open_staging_files(&staging, &manifest)?;
        let n = ChunkTable::new(&manifest).len();
        let set = self.register(*expected, manifest, bytes, false, staging, files);
        set.state.lock().expect("set lock").verified = ChunkBits::full(n);
        self.finalize(&set)
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

    fn register(
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

    fn read_manifest(&self, digest: &Digest) -> Result<Option<(Manifest, Vec<u8>)>> {
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

    fn write_manifest(&self, digest: &Digest, bytes: &[u8]) -> Result<()> {
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
        let digest = Digest::of(&bytes);
        if let Some(set) = self.set(&digest) {
            let have = set.state.lock().expect("set lock").verified.count();
            return Ok((set, have));
        }
        self.write_manifest(&digest, &bytes)?;
        let version = self.version_dir(&digest);
        if version.is_dir() {
            let set = self.register(digest, manifest, bytes, true, version, Vec::new());
            let n = set.table.len();
            return Ok((set, n));
        }
        let staging = self.staging_dir(&digest);
        let resuming = staging.is_dir();
        let files = open_staging_files(&staging, &manifest)?;
        let set = self.register(digest, manifest, bytes, false, staging, files);
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

    /// Flushes every file, renames staging to `versions/<hex>`, and marks the set
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
            fs::set_permissions(&path, fs::Permissions::from_mode(entry.mode))
                .map_err(io_at("chmod", &path))?;
        }
        sync_tree_dirs(&st.dir)?;
        let version = self.version_dir(&set.digest);
        fs::rename(&st.dir, &version).map_err(io_at("rename", &version))?;
        sync_dir(&self.inner.root.join("versions"))?;
        sync_dir(&self.inner.root.join("staging"))?;
        st.dir = version.clone();
        st.complete = true;
        st.files.clear();
        Ok(version)
    }
}

impl WeightSet {
    /// Writes a verified chunk at every place it occurs, then marks it held. Blocking.
    pub(crate) fn write_chunk(&self, index: usize, data: &[u8]) -> Result<()> {
        let (files, dir) = {
            let st = self.state.lock().expect("set lock");
            if st.complete || st.verified.get(index) {
                return Ok(());
            }
            (st.files.clone(), st.dir.clone())
        };
        let places = &self.table.chunks[index].places;
        for &(file, offset) in places {
            files[file]
                .write_all_at(data, offset)
                .map_err(io_at("write", &dir.join(&self.manifest.files[file].path)))?;
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

    fn staged_chunk_matches(&self, index: usize) -> Result<bool> {
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
        if Digest::of(&buf) != info.digest {
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

/// Reads a located chunk back from disk. Blocking.
pub fn read_chunk(loc: &ChunkLocation) -> std::io::Result<Vec<u8>> {
    let f = File::open(&loc.path)?;
    let mut buf = vec![0u8; loc.len as usize];
    f.read_exact_at(&mut buf, loc.offset)?;
    Ok(buf)
}

fn open_staging_files(staging: &Path, manifest: &Manifest) -> Result<Vec<Arc<File>>> {
    let mut files = Vec::with_capacity(manifest.files.len());
    for entry in &manifest.files {
        let path = staging.join(&entry.path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_at("create directory", parent))?;
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_at("open", &path))?;
        f.set_len(entry.size).map_err(io_at("preallocate", &path))?;
        files.push(Arc::new(f));
    }
    Ok(files)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).map_err(io_at("create directory", to))?;
    for entry in fs::read_dir(from).map_err(io_at("read directory", from))? {
        let entry = entry.map_err(io_at("read directory", from))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let ty = entry.file_type().map_err(io_at("stat", &src))?;
        if ty.is_dir() {
            copy_tree(&src, &dst)?;
        } else if ty.is_file() {
            fs::copy(&src, &dst).map_err(io_at("copy", &src))?;
        } else {
            return Err(WeightsError::Invalid(format!(
                "{} is not a regular file or directory",
                src.display()
            )));
        }
    }
    Ok(())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let f = File::create(path).map_err(io_at("create", path))?;
    f.write_all_at(bytes, 0).map_err(io_at("write", path))?;
    f.sync_all().map_err(io_at("fsync", path))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at("fsync directory", dir))
}

fn sync_tree_dirs(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(io_at("read directory", dir))? {
        let entry = entry.map_err(io_at("read directory", dir))?;
        if entry
            .file_type()
            .map_err(io_at("stat", &entry.path()))?
            .is_dir()
        {
            sync_tree_dirs(&entry.path())?;
        }
    }
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::manifest::MIN_CHUNK_SIZE;

    #[test]
    fn an_early_flush_starts_once_enough_is_written_and_finishes_clean() {
        let dir = temp("early-flush");
        fs::create_dir_all(&dir).unwrap();
        let file = Arc::new(File::create(dir.join("w.bin")).unwrap());
        file.write_all_at(&[7u8; 4096], 0).unwrap();
        let flush = Arc::new(EarlyFlush::default());
        flush.wrote(FLUSH_EVERY - 1, std::slice::from_ref(&file));
        assert!(!flush.running.load(Ordering::Acquire), "not enough yet");
        assert_eq!(flush.unflushed.load(Ordering::Acquire), FLUSH_EVERY - 1);
        flush.wrote(1, std::slice::from_ref(&file));
        assert_eq!(
            flush.unflushed.load(Ordering::Acquire),
            0,
            "a flush took it"
        );
        // failure() waits for the flush to end.
        assert_eq!(flush.failure(), None);
        assert!(!flush.running.load(Ordering::Acquire));
        let _ = fs::remove_dir_all(&dir);
    }

    fn temp(label: &str) -> PathBuf {
        crate::weights::test_dirs::fresh("store", label)
    }

    /// A two-file set whose content depends on `fill`; returns its digest.
    fn make_set(dir: &Path, fill: u8) -> Digest {
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("w.bin"), vec![fill; 10_000]).unwrap();
        fs::write(dir.join("sub/config.json"), br#"{"layers": 2}"#).unwrap();
        Manifest::build(dir, MIN_CHUNK_SIZE).unwrap().digest()
    }

    fn versions(store: &WeightStore) -> usize {
        fs::read_dir(store.root().join("versions")).unwrap().count()
    }

    #[test]
    fn each_group_has_its_own_link_and_equal_digests_share_one_copy() {
        let tmp = temp("groups");
        let (a, b) = (make_set(&tmp.join("a"), 1), make_set(&tmp.join("b"), 2));
        let store = WeightStore::open(tmp.join("store")).unwrap();
        store
            .install_dir(&tmp.join("a"), &a, MIN_CHUNK_SIZE)
            .unwrap();
        store
            .install_dir(&tmp.join("b"), &b, MIN_CHUNK_SIZE)
            .unwrap();
        let (g1, g2, g3) = (
            CurrentLink::group("ns", "g1").unwrap(),
            CurrentLink::group("ns", "g2").unwrap(),
            CurrentLink::group("other", "g1").unwrap(),
        );
        let p1 = store.activate(&a, &g1).unwrap();
        let p2 = store.activate(&b, &g2).unwrap();
        assert_eq!(p1, tmp.join("store/groups/ns_g1/current"));
        assert_eq!(p2, tmp.join("store/groups/ns_g2/current"));
        let read = |p: &Path| fs::read(p.join("w.bin")).unwrap()[0];
        assert_eq!((read(&p1), read(&p2)), (1, 2));

        // A third group with g1's digest: no second copy, and nobody else's link moves.
        let p3 = store.activate(&a, &g3).unwrap();
        assert_eq!(versions(&store), 2);
        assert_eq!(
            fs::canonicalize(&p3).unwrap(),
            fs::canonicalize(&p1).unwrap()
        );
        assert_eq!(fs::canonicalize(&p1).unwrap(), store.version_dir(&a));
        // Installing the same digest again is a no-op, not a copy.
        store
            .install_dir(&tmp.join("a"), &a, MIN_CHUNK_SIZE)
            .unwrap();
        assert_eq!(versions(&store), 2);
        // g2 moves to a: g1 and g3 stay where they were; the store-wide link is untouched.
        store.activate(&a, &g2).unwrap();
        assert_eq!(store.current_of(&g1).unwrap(), Some(a));
        assert_eq!(store.current_of(&g2).unwrap(), Some(a));
        assert_eq!(store.current_of(&g3).unwrap(), Some(a));
        store.activate(&b, &g2).unwrap();
        assert_eq!((read(&p1), read(&p2), read(&p3)), (1, 2, 1));
        assert_eq!(store.current().unwrap(), None);
        // No temporary links are left behind, and a reopened store sees the same links.
        let names: Vec<_> = fs::read_dir(tmp.join("store/groups/ns_g2"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [CURRENT_LINK]);
        let again = WeightStore::open(tmp.join("store")).unwrap();
        assert_eq!(again.current_of(&g1).unwrap(), Some(a));
        assert_eq!(again.current_of(&g2).unwrap(), Some(b));
        let _ = fs::remove_dir_all(&tmp);
    }

    #[test]
    fn only_a_complete_set_can_be_activated() {
        let tmp = temp("incomplete");
        let store = WeightStore::open(&tmp).unwrap();
        let g = CurrentLink::group("ns", "g").unwrap();
        assert!(store.activate(&Digest::of(b"unknown"), &g).is_err());
        assert!(!store.link_path(&g).exists());
        let _ = fs::remove_dir_all(&tmp);
    }
}
