//! The manifest: what a weights set is. Files (relative path, size, mode) and, per file, the
//! ordered digests of its fixed-size chunks (the last chunk of a file may be short; chunks
//! never span files) under the set's [`ChunkHash`]. Its canonical serialization — compact
//! JSON, fields in a fixed order, files sorted by path — hashes (SHA-256) to THE digest
//! users put in `HcommGroup.spec.weights.digest`, so the digest pins every byte of every
//! file.
//!
//! Two formats: `hcomm-weights/v1` has SHA-256 chunks and no `chunk_hash` field (every
//! digest computed before BLAKE3 was added); `hcomm-weights/v2` names its chunk hash in
//! `chunk_hash`, which follows `format` (`{"format":"hcomm-weights/v2","chunk_hash":
//! "blake3","chunk_size":…,"files":[…]}`) and is never `sha256` (that set is a v1 one, so
//! one directory has one digest per chunk hash). An agent refuses any other format by name.
//!
//! Data flow: `Manifest::build` on the first members' source directory → digest checked
//! against the spec → the [`ChunkTable`] (unique chunks, where each one lands) drives the
//! store, the server and the fetch scheduler.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use super::digest::{ChunkHash, Digest};
use super::error::{Result, WeightsError, io_at};

/// The `format` of a manifest with SHA-256 chunks and no `chunk_hash` field.
pub const MANIFEST_FORMAT_V1: &str = "hcomm-weights/v1";
/// The `format` of a manifest that names its chunk hash (`chunk_hash`).
pub const MANIFEST_FORMAT_V2: &str = "hcomm-weights/v2";
/// Default chunk size: 2 MiB. Joiners pass a chunk on only once it is whole and verified,
/// so each hop through a fellow joiner costs one chunk's time on an uplink it shares with
/// every other joiner: eight joiners took 1.19× one joiner's time at 500 Mbit/s with
/// 4 MiB (the default before), 1.14× with 2 MiB and 1.13× with 1 MiB (medians), 1 MiB for
/// ~0.1 more CPU-s per GiB (`docs/benchmarks.md`). 2 MiB also keeps the manifest of a
/// 1.3 TB set (~650,000 chunks) under [`MAX_MANIFEST_BYTES`]; 1 MiB would not.
pub const DEFAULT_CHUNK_SIZE: u64 = 2 << 20;
/// The default chunk size before [`DEFAULT_CHUNK_SIZE`]: digests users computed with it
/// stay valid, so an import tries it too ([`IMPORT_CHUNK_SIZES`]).
pub const FORMER_DEFAULT_CHUNK_SIZE: u64 = 4 << 20;
/// The chunk sizes a declared source's digest may have been computed with, tried in this
/// order by an import (the digest does not say which). A digest of the former default
/// costs its import one more read of the copy.
pub const IMPORT_CHUNK_SIZES: [u64; 2] = [DEFAULT_CHUNK_SIZE, FORMER_DEFAULT_CHUNK_SIZE];
/// Smallest accepted chunk size.
pub const MIN_CHUNK_SIZE: u64 = 4 << 10;
/// Largest accepted chunk size (also bounds protocol frames).
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;
/// Largest accepted serialized manifest.
pub const MAX_MANIFEST_BYTES: usize = 64 << 20;

/// One file of a weights set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative path with `/` separators, no `.`/`..`, no leading `/`.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`mode & 0o7777`) the file gets when installed.
    pub mode: u32,
    /// Digests of the file's chunks, in order (bare hex in JSON).
    #[serde(with = "hex_digests")]
    pub chunks: Vec<Digest>,
}

/// A weights set: chunk hash, chunk size and files sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT_V1`] or [`MANIFEST_FORMAT_V2`].
    pub format: String,
    /// The chunk hash of a v2 manifest (absent in v1: SHA-256). Read it with
    /// [`Manifest::chunk_hash`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chunk_hash: Option<ChunkHash>,
    /// Chunk size in bytes.
    pub chunk_size: u64,
    /// The files, sorted by path (byte order), unique.
    pub files: Vec<FileEntry>,
}

mod hex_digests {
    use super::Digest;
    use serde::{Deserialize, Deserializer, Serializer, ser::SerializeSeq};

    pub fn serialize<S: Serializer>(v: &[Digest], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for d in v {
            seq.serialize_element(&d.hex())?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Digest>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| Digest::from_hex(s).map_err(serde::de::Error::custom))
            .collect()
    }
}

impl Manifest {
    /// Describes the directory `dir` (recursively) with chunks of `chunk_size` bytes
    /// hashed with the default [`ChunkHash`]. Refuses symlinks, special files and non-UTF-8
    /// names: a weights set is plain files. Blocking (reads and hashes everything): call it
    /// from `spawn_blocking` in async code.
    pub fn build(dir: &Path, chunk_size: u64) -> Result<Manifest> {
        Self::build_with(dir, chunk_size, ChunkHash::default())
    }

    /// [`Manifest::build`] with chunks hashed by `hash`.
    pub fn build_with(dir: &Path, chunk_size: u64, hash: ChunkHash) -> Result<Manifest> {
        let mut one = Self::build_each(dir, chunk_size, &[hash])?;
        Ok(one.pop().expect("one manifest per hash"))
    }

    /// The manifests of `dir` under each of `hashes`, in that order, from one read of
    /// the files: what an import checks a digest of unknown chunk hash against.
    pub fn build_each(dir: &Path, chunk_size: u64, hashes: &[ChunkHash]) -> Result<Vec<Manifest>> {
        check_chunk_size(chunk_size)?;
        let mut paths = Vec::new();
        walk(dir, dir, &mut paths)?;
        paths.sort();
        let mut buf = vec![0u8; chunk_size as usize];
        let mut out: Vec<Manifest> = hashes
            .iter()
            .map(|&h| Manifest::empty(h, chunk_size, paths.len()))
            .collect();
        for rel in paths {
            let full = dir.join(&rel);
            let mut f = fs::File::open(&full).map_err(io_at("open", &full))?;
            let meta = f.metadata().map_err(io_at("stat", &full))?;
            let mut chunks = vec![Vec::new(); hashes.len()];
            let mut size = 0u64;
            loop {
                let n = read_full(&mut f, &mut buf).map_err(io_at("read", &full))?;
                if n == 0 {
                    break;
                }
                size += n as u64;
                for (list, h) in chunks.iter_mut().zip(hashes) {
                    list.push(h.digest(&buf[..n]));
                }
                if n < buf.len() {
                    break;
                }
            }
            for (m, chunks) in out.iter_mut().zip(chunks) {
                m.files.push(FileEntry {
                    path: rel.clone(),
                    size,
                    mode: meta.permissions().mode() & 0o7777,
                    chunks,
                });
            }
        }
        Ok(out)
    }

    /// A manifest without files in the format `hash` calls for.
    fn empty(hash: ChunkHash, chunk_size: u64, capacity: usize) -> Manifest {
        let (format, chunk_hash) = match hash {
            ChunkHash::Sha256 => (MANIFEST_FORMAT_V1, None),
            other => (MANIFEST_FORMAT_V2, Some(other)),
        };
        Manifest {
            format: format.into(),
            chunk_hash,
            chunk_size,
            files: Vec::with_capacity(capacity),
        }
    }

    /// How this set's chunks are hashed.
    pub fn chunk_hash(&self) -> ChunkHash {
        self.chunk_hash.unwrap_or(ChunkHash::Sha256)
    }

    /// The canonical serialization: compact JSON, struct field order, files as stored
    /// (sorted by [`Manifest::build`] and checked by [`Manifest::parse`]).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest always serializes")
    }

    /// SHA-256 of the canonical serialization: the value of `spec.weights.digest`.
    pub fn digest(&self) -> Digest {
        Digest::of(&self.canonical_bytes())
    }

    /// Parses and validates a manifest, accepting only its canonical form (so bytes and
    /// digest correspond one to one).
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(WeightsError::Invalid(format!(
                "manifest of {} bytes exceeds {MAX_MANIFEST_BYTES}",
                bytes.len()
            )));
        }
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| WeightsError::Invalid(format!("manifest is not valid JSON: {e}")))?;
        m.validate()?;
        if m.canonical_bytes() != bytes {
            return Err(WeightsError::Invalid(
                "manifest is not in canonical form".into(),
            ));
        }
        Ok(m)
    }

    /// Checks the invariants `build` guarantees.
    pub fn validate(&self) -> Result<()> {
        match (self.format.as_str(), self.chunk_hash) {
            (MANIFEST_FORMAT_V1, None) | (MANIFEST_FORMAT_V2, Some(ChunkHash::Blake3)) => {}
            (MANIFEST_FORMAT_V1, Some(h)) => {
                return Err(WeightsError::Invalid(format!(
                    "{MANIFEST_FORMAT_V1} manifests have SHA-256 chunks and no chunk_hash (found {h})"
                )));
            }
            (MANIFEST_FORMAT_V2, h) => {
                return Err(WeightsError::Invalid(format!(
                    "{MANIFEST_FORMAT_V2} manifests name a chunk_hash other than sha256 (found {}); SHA-256 sets are {MANIFEST_FORMAT_V1}",
                    h.map_or("none".to_string(), |h| h.to_string())
                )));
            }
            (other, _) => {
                return Err(WeightsError::Invalid(format!(
                    "manifest format {other:?}, expected {MANIFEST_FORMAT_V1:?} or {MANIFEST_FORMAT_V2:?} (the formats this agent reads)"
                )));
            }
        }
        check_chunk_size(self.chunk_size)?;
        let mut lens: HashMap<Digest, u64> = HashMap::new();
        for (i, f) in self.files.iter().enumerate() {
            check_rel_path(&f.path)?;
            if i > 0 && self.files[i - 1].path.as_bytes() >= f.path.as_bytes() {
                return Err(WeightsError::Invalid(format!(
                    "manifest files not sorted or not unique at {:?}",
                    f.path
                )));
            }
            if f.chunks.len() as u64 != f.size.div_ceil(self.chunk_size) {
                return Err(WeightsError::Invalid(format!(
                    "file {:?}: {} chunks for {} bytes",
                    f.path,
                    f.chunks.len(),
                    f.size
                )));
            }
            for (ci, d) in f.chunks.iter().enumerate() {
                let len = (f.size - ci as u64 * self.chunk_size).min(self.chunk_size);
                if *lens.entry(*d).or_insert(len) != len {
                    return Err(WeightsError::Invalid(format!(
                        "file {:?}: chunk {d} appears with two different lengths",
                        f.path
                    )));
                }
            }
        }
        Ok(())
    }

    /// Total bytes of all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// The unique chunks of a manifest, in order of first appearance, and where each lands.
/// A chunk's index in this table is how the store, the server's `Have` bitmap and the
/// fetch scheduler name it.
#[derive(Debug, Clone)]
pub struct ChunkTable {
    pub chunks: Vec<ChunkInfo>,
    by_digest: HashMap<Digest, usize>,
}

/// One unique chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkInfo {
    pub digest: Digest,
    /// Length in bytes (equal content, equal length).
    pub len: u64,
    /// Every (file index, byte offset) holding this chunk.
    pub places: Vec<(usize, u64)>,
}

impl ChunkTable {
    /// Builds the table of a (validated) manifest.
    pub fn new(m: &Manifest) -> ChunkTable {
        let mut chunks: Vec<ChunkInfo> = Vec::new();
        let mut by_digest = HashMap::new();
        for (fi, f) in m.files.iter().enumerate() {
            for (ci, d) in f.chunks.iter().enumerate() {
                let offset = ci as u64 * m.chunk_size;
                let len = (f.size - offset).min(m.chunk_size);
                let idx = *by_digest.entry(*d).or_insert_with(|| {
                    chunks.push(ChunkInfo {
                        digest: *d,
                        len,
                        places: Vec::new(),
                    });
                    chunks.len() - 1
                });
                chunks[idx].places.push((fi, offset));
            }
        }
        ChunkTable { chunks, by_digest }
    }

    /// Index of the chunk with this digest.
    pub fn index_of(&self, d: &Digest) -> Option<usize> {
        self.by_digest.get(d).copied()
    }

    /// Number of unique chunks.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether the set has no chunks (only empty files, or none).
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes that must be transferred (unique chunks only).
    pub fn unique_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }
}

pub(crate) fn check_chunk_size(chunk_size: u64) -> Result<()> {
    if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size) {
        return Err(WeightsError::Invalid(format!(
            "chunk size {chunk_size} outside {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}"
        )));
    }
    Ok(())
}

/// A manifest path must stay inside the set's directory once joined to it.
pub(crate) fn check_rel_path(p: &str) -> Result<()> {
    let bad = p.is_empty()
        || p.contains('\0')
        || p.contains('\\')
        || Path::new(p)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        || p.split('/').any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(WeightsError::Invalid(format!("unsafe file path {p:?}")));
    }
    Ok(())
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(io_at("read directory", dir))? {
        let entry = entry.map_err(io_at("read directory", dir))?;
        let path = entry.path();
        let ty = entry.file_type().map_err(io_at("stat", &path))?;
        if ty.is_dir() {
            walk(root, &path, out)?;
        } else if ty.is_file() {
            let rel = path.strip_prefix(root).expect("walk stays under root");
            let rel = rel.to_str().ok_or_else(|| {
                WeightsError::Invalid(format!("non-UTF-8 file name {}", rel.display()))
            })?;
            check_rel_path(rel)?;
            out.push(rel.to_owned());
        } else {
            return Err(WeightsError::Invalid(format!(
                "{} is not a regular file or directory (symlinks and special files are not allowed in a weights set)",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Reads until `buf` is full or EOF; returns the bytes read.
fn read_full(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
