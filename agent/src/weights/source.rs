//! Local weight sources: which directories a group's `spec.weights.source` may name, and
//! a race-free way to open and walk one.
//!
//! A group manifest is written by a tenant; the agent that imports its source runs as
//! root and copies what it reads into the store every worker mounts. So the agent reads
//! a local source only below the roots the cluster admin configured
//! (`--weights-source-root`; none by default = peers only), and only plain directories
//! and regular files: an absolute path outside the roots, a `..`, a symlink (on the way
//! or inside the tree), a device, a FIFO, a socket or a file with more than one hard link
//! is a [`SourceRefused`] naming the path and the reason, returned before a byte of any
//! file is read. A hard link is a symlink that cannot be seen: the same inode may also sit
//! outside the roots (a token, a key), linked in by whoever may write below a root.
//!
//! Why not `canonicalize` the path, compare it with the roots, then open it: those are
//! two lookups of the same names, and whoever may write below a root can swap a checked
//! directory for a symlink to `/var/run/secrets` between the check and the open. Here
//! every component is looked up relative to the directory descriptor already opened,
//! never following a symlink (`O_PATH | O_NOFOLLOW` through `/proc/self/fd/<dir>/<name>`,
//! which is `openat(dir, name)` without `unsafe`), its type is taken from that descriptor
//! (`fstat`), and a file is read by reopening that same descriptor; a name swapped after
//! the check is never the one read.

use std::ffi::OsString;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use thiserror::Error;

/// Deepest directory nesting walked in a source (a deeper tree is refused, not recursed).
pub const MAX_DEPTH: usize = 64;

/// Why a local source (or a name in it) was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    #[error(
        "local weight sources are disabled on this node (the agent has no --weights-source-root; peers only)"
    )]
    NoRoots,
    #[error("not an absolute path")]
    NotAbsolute,
    #[error("a `..` component is not allowed")]
    ParentComponent,
    #[error("outside the allowed source roots [{}]", show(.0))]
    OutsideRoots(Vec<PathBuf>),
    #[error("is a symlink (never followed in a weights source)")]
    Symlink,
    #[error("is a {0} (only directories and regular files are imported)")]
    Special(&'static str),
    #[error("is not a directory")]
    NotADirectory,
    #[error("has {0} hard links (one may lie outside the source roots; copy the file in instead)")]
    HardLinked(u64),
    #[error("nests deeper than {MAX_DEPTH} directories")]
    TooDeep,
    #[error("cannot be opened: {0}")]
    Unreadable(String),
}

fn show(roots: &[PathBuf]) -> String {
    roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A local source path (or a name in it) the agent will not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("weights source {}: {why}", .path.display())]
pub struct SourceRefused {
    pub path: PathBuf,
    pub why: Refusal,
}

fn refused(path: impl Into<PathBuf>, why: Refusal) -> SourceRefused {
    SourceRefused {
        path: path.into(),
        why,
    }
}

/// The directories local sources may lie below (`--weights-source-root`), as configured:
/// absolute, without `..`. Symlinks in a root's own path are the admin's and are followed;
/// nothing below a root is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceRoots {
    roots: Vec<PathBuf>,
}

impl SourceRoots {
    /// Checks and normalizes (`.`, doubled and trailing `/` dropped) the configured roots.
    pub fn new(roots: impl IntoIterator<Item = PathBuf>) -> Result<SourceRoots, SourceRefused> {
        let mut out = Vec::new();
        for r in roots {
            let n = normal(&r)?;
            if !out.contains(&n) {
                out.push(n);
            }
        }
        Ok(SourceRoots { roots: out })
    }

    /// The roots (empty: local sources disabled).
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Which root `source` lies below and the names from there to it (pure; the names
    /// are single normal components). Refuses a relative path, a `..`, a path outside
    /// every root, and everything when no root is configured.
    pub fn resolve(&self, source: &Path) -> Result<(PathBuf, Vec<OsString>), SourceRefused> {
        if self.roots.is_empty() {
            return Err(refused(source, Refusal::NoRoots));
        }
        let source = normal(source)?;
        let root = self
            .roots
            .iter()
            .filter(|r| source.starts_with(r))
            .max_by_key(|r| r.components().count())
            .ok_or_else(|| refused(&source, Refusal::OutsideRoots(self.roots.clone())))?;
        let rest = source
            .strip_prefix(root)
            .expect("starts_with checked")
            .iter()
            .map(|c| c.to_os_string())
            .collect();
        Ok((root.clone(), rest))
    }

    /// Opens `source` as a directory below one of the roots, descending one component at
    /// a time from the root's descriptor and refusing a symlink or a non-directory on the
    /// way (see the module docs). Reads no file.
    pub fn open(&self, source: &Path) -> Result<SourceDir, SourceRefused> {
        let (root, rest) = self.resolve(source)?;
        let mut dir = open_dir(&root).map_err(|e| refused(&root, unreadable(&e)))?;
        let mut shown = root;
        for name in rest {
            shown.push(&name);
            let next = open_beneath(&dir, &name).map_err(|e| refused(&shown, unreadable(&e)))?;
            let meta = next
                .metadata()
                .map_err(|e| refused(&shown, unreadable(&e)))?;
            match classify(&meta) {
                Ok(Kind::Dir) => dir = next,
                Ok(Kind::File) => return Err(refused(&shown, Refusal::NotADirectory)),
                Err(why) => return Err(refused(&shown, why)),
            }
        }
        Ok(SourceDir { dir, path: shown })
    }
}

/// `p` without `.`, doubled or trailing `/`; refused if relative or holding a `..`.
fn normal(p: &Path) -> Result<PathBuf, SourceRefused> {
    if !p.is_absolute() {
        return Err(refused(p, Refusal::NotAbsolute));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(refused(p, Refusal::ParentComponent));
    }
    Ok(p.components().collect())
}

fn unreadable(e: &io::Error) -> Refusal {
    Refusal::Unreadable(e.to_string())
}

enum Kind {
    Dir,
    File,
}

/// What a descriptor's `fstat` says it is; anything but a directory or a regular file is
/// a refusal.
fn classify(meta: &Metadata) -> Result<Kind, Refusal> {
    let t = meta.file_type();
    if t.is_dir() {
        Ok(Kind::Dir)
    } else if t.is_file() {
        Ok(Kind::File)
    } else if t.is_symlink() {
        Err(Refusal::Symlink)
    } else if t.is_block_device() {
        Err(Refusal::Special("block device"))
    } else if t.is_char_device() {
        Err(Refusal::Special("character device"))
    } else if t.is_fifo() {
        Err(Refusal::Special("FIFO"))
    } else if t.is_socket() {
        Err(Refusal::Special("socket"))
    } else {
        Err(Refusal::Special("special file"))
    }
}

/// A directory (a root's own path may hold the admin's symlinks), as an `O_PATH` handle.
fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
}

/// `openat(dir, name, O_PATH | O_NOFOLLOW)`: the entry itself (a symlink stays a
/// symlink), opened without reading it (a FIFO does not block, a device is not opened).
fn open_beneath(dir: &File, name: &std::ffi::OsStr) -> io::Result<File> {
    let mut p = fd_path(dir);
    p.push(name);
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
}

/// The descriptor's own `/proc` name: opening or listing it reaches that very inode.
fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// A source directory opened and checked by [`SourceRoots::open`] (or trusted, for the
/// CLI and tests: [`SourceDir::trusted`]); its tree is walked by [`SourceDir::walk`].
#[derive(Debug)]
pub struct SourceDir {
    dir: File,
    path: PathBuf,
}

/// One regular file met by [`SourceDir::walk`], not opened for reading yet.
#[derive(Debug)]
pub struct SourceFile {
    handle: File,
    meta: Metadata,
    /// Where it is, for messages.
    pub path: PathBuf,
}

impl SourceFile {
    /// Permission bits as found (`mode & 0o7777`; the manifest records them).
    pub fn mode(&self) -> u32 {
        self.meta.mode() & 0o7777
    }

    /// Opens the checked file itself for reading (the inode `fstat` was taken from, not
    /// whatever the name points at now).
    pub fn open(&self) -> io::Result<File> {
        let f = File::open(fd_path(&self.handle))?;
        let m = f.metadata()?;
        if !m.file_type().is_file() || m.ino() != self.meta.ino() || m.dev() != self.meta.dev() {
            return Err(io::Error::other("the file changed while it was opened"));
        }
        Ok(f)
    }
}

/// What [`SourceDir::walk`] hands its visitor, parents before children.
#[derive(Debug)]
pub enum SourceEntry<'a> {
    /// A directory at this path relative to the source.
    Dir(&'a Path),
    /// A regular file at this path relative to the source.
    File(&'a Path, &'a SourceFile),
}

impl SourceDir {
    /// Opens a directory the caller vouches for (the `hcomm-agent weights` commands, an
    /// admin's own path, tests): its own path is followed, its tree is walked like any
    /// other source (no symlink or special file inside).
    pub fn trusted(path: &Path) -> Result<SourceDir, SourceRefused> {
        let dir = open_dir(path).map_err(|e| {
            let why = if e.raw_os_error() == Some(libc::ENOTDIR) {
                Refusal::NotADirectory
            } else {
                unreadable(&e)
            };
            refused(path, why)
        })?;
        Ok(SourceDir {
            dir,
            path: path.to_path_buf(),
        })
    }

    /// The source's path, as named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Walks the tree in name order, refusing at the first symlink, special file or
    /// too-deep directory (see [`Refusal`]). Reads no file itself: the visitor decides.
    pub fn walk<E: From<SourceRefused>>(
        &self,
        visit: &mut dyn FnMut(SourceEntry<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.walk_dir(&self.dir, Path::new(""), 0, visit)
    }

    /// Walks the whole tree without reading a file: `Ok` if every entry may be imported.
    pub fn check(&self) -> Result<(), SourceRefused> {
        self.walk(&mut |_| Ok::<(), SourceRefused>(()))
    }

    fn walk_dir<E: From<SourceRefused>>(
        &self,
        dir: &File,
        rel: &Path,
        depth: usize,
        visit: &mut dyn FnMut(SourceEntry<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let here = self.path.join(rel);
        if depth > MAX_DEPTH {
            return Err(refused(&here, Refusal::TooDeep).into());
        }
        let mut names = std::fs::read_dir(fd_path(dir))
            .and_then(|d| {
                d.map(|e| e.map(|e| e.file_name()))
                    .collect::<io::Result<Vec<_>>>()
            })
            .map_err(|e| refused(&here, unreadable(&e)))?;
        names.sort();
        for name in names {
            let child = rel.join(&name);
            let shown = self.path.join(&child);
            let handle = open_beneath(dir, &name).map_err(|e| refused(&shown, unreadable(&e)))?;
            let meta = handle
                .metadata()
                .map_err(|e| refused(&shown, unreadable(&e)))?;
            match classify(&meta) {
                Ok(Kind::Dir) => {
                    visit(SourceEntry::Dir(&child))?;
                    self.walk_dir(&handle, &child, depth + 1, visit)?;
                }
                Ok(Kind::File) if meta.nlink() > 1 => {
                    return Err(refused(shown, Refusal::HardLinked(meta.nlink())).into());
                }
                Ok(Kind::File) => {
                    let file = SourceFile {
                        handle,
                        meta,
                        path: shown,
                    };
                    visit(SourceEntry::File(&child, &file))?;
                }
                Err(why) => return Err(refused(shown, why).into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
