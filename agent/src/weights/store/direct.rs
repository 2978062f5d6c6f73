//! Fetched chunks written past the page cache (`O_DIRECT`).
//!
//! A joiner's buffered `pwrite` copies every received byte into freshly allocated
//! page-cache pages; on the VM of docs/benchmarks.md that copy was the joiner's largest CPU
//! cost, ten times its BLAKE3 hash (`copy_folio_from_iter_atomic` under
//! `WeightSet::write_chunk`). With `O_DIRECT` the block layer takes the bytes from our
//! buffer. The price: written chunks are not in the page cache, so serving them on to a
//! fellow joiner reads the disk (after `readahead`, see `server`), and so does the engine
//! that loads them — for a model of hundreds of GiB the page cache would not have held it.
//!
//! `O_DIRECT` needs the buffer, the file offset and the length aligned to the device's
//! logical block size: [`ALIGN`] (4096) covers 512- and 4096-byte devices. The aligned part
//! of a chunk goes through the direct handle from a per-thread aligned buffer (one copy
//! between warm user buffers, far cheaper than the kernel's into new pages); a short tail
//! (a file's last chunk), an unaligned offset, a filesystem that refuses `O_DIRECT` at open
//! (tmpfs before Linux 6.6) or a write it refuses (`EINVAL`) goes through the buffered
//! handle. Both handles are the same file: the early flush's and the final `fsync` cover
//! both.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use crate::weights::manifest::Manifest;

/// Alignment of the direct writes' buffer, offset and length.
pub(super) const ALIGN: usize = 4096;

/// Opens each file of `manifest` under `dir` again with `O_DIRECT` (write only, never
/// following a symlink), or `None` where that is refused. Blocking; the files exist
/// (opened by `open_staging_files` first).
pub(super) fn open_all(dir: &Path, manifest: &Manifest) -> Vec<Option<Arc<File>>> {
    manifest
        .files
        .iter()
        .map(|entry| {
            let path = dir.join(&entry.path);
            match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "no O_DIRECT handle; chunks written through the page cache");
                    None
                }
            }
        })
        .collect()
}

thread_local! {
    /// The aligned staging buffer of this (blocking) thread, reused: a fresh one per chunk
    /// would fault in new pages, the cost this module exists to avoid.
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Writes `data` at `offset`: the aligned part through `direct` when there is one, the
/// rest (or all of it) through `buffered`. Returns whether `direct` refused the write
/// (`EINVAL`; the bytes then went through `buffered`): the caller stops using it, rather
/// than fail the same syscall on every chunk. Blocking.
pub(super) fn write_at(
    buffered: &File,
    direct: Option<&File>,
    data: &[u8],
    offset: u64,
) -> std::io::Result<bool> {
    let aligned = match direct {
        Some(_) if offset.is_multiple_of(ALIGN as u64) => data.len() / ALIGN * ALIGN,
        _ => 0,
    };
    let mut refused = false;
    if let (Some(direct), true) = (direct, aligned > 0) {
        let head = &data[..aligned];
        match BUFFER.with(|b| write_aligned(direct, &mut b.borrow_mut(), head, offset)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // A device with blocks larger than ALIGN, or a filesystem that took the
                // open but not the write: the page cache it is.
                buffered.write_all_at(head, offset)?;
                refused = true;
            }
            Err(e) => return Err(e),
        }
    }
    buffered.write_all_at(&data[aligned..], offset + aligned as u64)?;
    Ok(refused)
}

/// Copies `data` (a multiple of [`ALIGN`] long) to an [`ALIGN`]-aligned place in `buffer`
/// and writes it from there.
fn write_aligned(
    direct: &File,
    buffer: &mut Vec<u8>,
    data: &[u8],
    offset: u64,
) -> std::io::Result<()> {
    if buffer.len() < data.len() + ALIGN {
        *buffer = vec![0u8; data.len() + ALIGN];
    }
    let start = buffer.as_ptr().align_offset(ALIGN);
    let place = &mut buffer[start..start + data.len()];
    place.copy_from_slice(data);
    direct.write_all_at(place, offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the filesystem under the test directory does with `O_DIRECT`, every byte
    /// lands where it belongs: aligned heads, short tails, unaligned offsets.
    #[test]
    fn chunks_land_whole_whether_written_direct_or_buffered() {
        let dir = crate::weights::test_dirs::fresh("direct", "write");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let size = 3 * ALIGN + 700;
        let buffered = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        buffered.set_len(size as u64).unwrap();
        let m: Manifest = serde_json::from_value(serde_json::json!({
            "format": "hcomm-weights/v1", "chunk_size": 4096,
            "files": [{"path": "f", "size": size, "mode": 420, "chunks": []}]
        }))
        .unwrap();
        let direct = open_all(&dir, &m).pop().unwrap();
        if let Some(f) = &direct {
            // The handle really is O_DIRECT (`flags:` in fdinfo is octal).
            use std::os::fd::AsRawFd;
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{}", f.as_raw_fd())).unwrap();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .map(|v| i64::from_str_radix(v.trim(), 8).unwrap())
                .unwrap();
            assert_ne!(flags & libc::O_DIRECT as i64, 0, "{info}");
        }
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        // Two aligned chunks (the second with a short tail), then a piece at an
        // unaligned offset, each with and without the direct handle.
        for handle in [direct.as_deref(), None] {
            std::fs::write(&path, vec![0u8; size]).unwrap();
            // A handle the filesystem gave takes aligned writes: never reported refused.
            let refused = [
                write_at(&buffered, handle, &data[..2 * ALIGN], 0).unwrap(),
                write_at(
                    &buffered,
                    handle,
                    &data[2 * ALIGN..size - 100],
                    2 * ALIGN as u64,
                )
                .unwrap(),
                write_at(&buffered, handle, &data[size - 100..], (size - 100) as u64).unwrap(),
            ];
            assert_eq!(refused, [false; 3]);
            assert_eq!(
                std::fs::read(&path).unwrap(),
                data,
                "direct: {}",
                handle.is_some()
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
