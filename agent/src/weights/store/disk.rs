//! Disk helpers of the store: reading a located chunk back, opening staging files,
//! checking a tree holds only plain files, and the fsyncs that make a rename durable.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use super::ChunkLocation;
use crate::weights::error::{Result, io_at};
use crate::weights::manifest::Manifest;

/// Opens the file holding a located chunk. Blocking.
/// The file's last component is never followed (`O_NOFOLLOW`) and must be a regular
/// file holding the whole chunk: nothing in the store is served through a symlink, and a
/// file cut short since it was verified is not served.
pub fn open_chunk(loc: &ChunkLocation) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&loc.path)?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            loc.path.display()
        )));
    }
    if meta.len() < loc.offset + loc.len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "{} is {} bytes, shorter than its chunk at {}+{}",
                loc.path.display(),
                meta.len(),
                loc.offset,
                loc.len
            ),
        ));
    }
    Ok(f)
}

/// Reads a located chunk back from disk ([`open_chunk`]'s checks). Blocking.
pub fn read_chunk(loc: &ChunkLocation) -> std::io::Result<Vec<u8>> {
    let f = open_chunk(loc)?;
    let mut buf = vec![0u8; loc.len as usize];
    f.read_exact_at(&mut buf, loc.offset)?;
    Ok(buf)
}

pub(super) fn open_staging_files(staging: &Path, manifest: &Manifest) -> Result<Vec<Arc<File>>> {
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

/// Whether `dir` holds only directories and regular files (`lstat`: a symlink is seen as
/// one, never followed); the first entry that is not, as an error message.
pub(super) fn plain_tree(dir: &Path) -> std::result::Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let ty = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if ty.is_dir() {
            plain_tree(&path)?;
        } else if !ty.is_file() {
            return Err(format!(
                "{} is not a regular file or directory",
                path.display()
            ));
        }
    }
    Ok(())
}

pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let f = File::create(path).map_err(io_at("create", path))?;
    f.write_all_at(bytes, 0).map_err(io_at("write", path))?;
    f.sync_all().map_err(io_at("fsync", path))
}

pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at("fsync directory", dir))
}

pub(super) fn sync_tree_dirs(dir: &Path) -> Result<()> {
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
