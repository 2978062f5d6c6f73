//! A stored chunk sent to a joiner straight from the page cache with `sendfile(2)`.
//!
//! Why: serving is the sources' share of a scale-out's CPU. Reading a chunk into a buffer
//! and writing it to the socket copies every byte twice through user space (and zeroes the
//! buffer first); `sendfile` hands the file's cached pages to the socket instead. The chunk
//! was verified when it was written or imported, and every joiner verifies it again as it
//! arrives, so nothing here needs to touch the bytes (`--weights-verify-on-serve` re-hashes
//! them first for operators who want a source to catch its own disk corruption).
//!
//! `sendfile` does not honour non-blocking mode on its input file: a chunk that is not in
//! the page cache would block the async thread on the disk. [`ChunkFile::open`] therefore
//! runs on a blocking thread and reads the range ahead (`readahead(2)`) before the async
//! side sends it.
//!
//! The agent crate denies `unsafe_code`; this module alone opts in, for two system calls
//! on descriptors it holds.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::store::{ChunkLocation, open_chunk};

/// An open stored chunk: the file and the chunk's range in it.
#[derive(Debug)]
pub struct ChunkFile {
    file: File,
    offset: u64,
    len: u64,
}

impl ChunkFile {
    /// Opens the chunk ([`open_chunk`]'s checks: no symlink, a regular file long enough)
    /// and reads its range into the page cache. Blocking.
    pub fn open(loc: &ChunkLocation) -> io::Result<ChunkFile> {
        let file = open_chunk(loc)?;
        // Best effort: a failed readahead only means `sendfile` reads the disk itself.
        // SAFETY: `readahead` takes a file descriptor we own for the duration of the call
        // and plain integers; it touches no memory of ours.
        let _ = unsafe {
            libc::readahead(
                file.as_raw_fd(),
                loc.offset as libc::off64_t,
                loc.len as usize,
            )
        };
        Ok(ChunkFile {
            file,
            offset: loc.offset,
            len: loc.len,
        })
    }

    /// The chunk's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Sends the whole range to `sock`, waiting for the socket to drain as needed.
    /// A file that ends before the range does is an `UnexpectedEof` error: the
    /// connection is then unusable (the frame's length was already sent) and must end.
    pub async fn send(&self, sock: &TcpStream) -> io::Result<()> {
        let mut offset = self.offset as libc::off64_t;
        let mut left = self.len as usize;
        while left > 0 {
            sock.writable().await?;
            let sent = sock.try_io(Interest::WRITABLE, || {
                // SAFETY: both descriptors are open for the call (the socket is borrowed,
                // the file owned by `self`), and `offset` is a valid, exclusively borrowed
                // `off64_t` the kernel advances by the bytes it sent.
                let n = unsafe {
                    libc::sendfile64(sock.as_raw_fd(), self.file.as_raw_fd(), &mut offset, left)
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match sent {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the chunk's file ended before the chunk did",
                    ));
                }
                Ok(n) => left -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;
    use crate::weights::Digest;

    fn location(path: std::path::PathBuf, offset: u64, len: u64) -> ChunkLocation {
        ChunkLocation {
            path,
            offset,
            len,
            set: Digest::of(b"set"),
            index: 0,
            hash: Default::default(),
        }
    }

    /// More than a socket buffer's worth, so the send waits for the reader at least once.
    #[tokio::test]
    async fn a_range_arrives_whole_and_in_order_through_a_slow_reader() {
        let dir = crate::weights::test_dirs::fresh("sendfile", "range");
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..(12u32 << 20)).map(|i| (i % 253) as u8).collect();
        let path = dir.join("w.bin");
        std::fs::write(&path, &data).unwrap();
        let (offset, len) = (1 << 20, 10 << 20);
        let chunk = ChunkFile::open(&location(path, offset, len)).unwrap();
        assert_eq!(chunk.len(), len);

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                tokio::time::sleep(Duration::from_micros(200)).await;
                match s.read(&mut buf).await.unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        let sock = TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), chunk.send(&sock))
            .await
            .expect("sent within 20 s")
            .unwrap();
        drop(sock);
        let got = tokio::time::timeout(Duration::from_secs(20), reader)
            .await
            .expect("read within 20 s")
            .unwrap();
        assert!(got == data[offset as usize..(offset + len) as usize]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_shorter_than_its_chunk_or_a_symlink_is_not_opened() {
        let dir = crate::weights::test_dirs::fresh("sendfile", "short");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.bin");
        std::fs::write(&path, vec![1u8; 4096]).unwrap();
        let e = ChunkFile::open(&location(path.clone(), 2048, 4096)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        let link = dir.join("link.bin");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(ChunkFile::open(&location(link, 0, 4096)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
