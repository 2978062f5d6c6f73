//! Disk helpers of the store: reading a located chunk back, opening staging files,
//! copying trees, and the fsyncs that make a rename durable.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::ChunkLocation;
use crate::weights::error::{Result, WeightsError, io_at};
use crate::weights::manifest::Manifest;

/// Reads a located chunk back from disk. Blocking.
pub fn read_chunk(loc: &ChunkLocation) -> std::io::Result<Vec<u8>> {
    let f = File::open(&loc.path)?;
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

pub(super) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
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
