//! Fewer wake-ups per received chunk: `SO_RCVLOWAT` follows the frame being read.
//!
//! A joiner reading a 4 MiB chunk at the kernel's pace woke for every ~70 KB that arrived
//! (7,600 `recvfrom` and 7,900 `epoll_wait` calls for 512 MiB: issue 20, point 3). With the
//! socket's receive low-water mark set to what is left of the current frame (capped at
//! [`LOWAT_CAP`]), the kernel signals readable only once that much is queued, so a chunk
//! takes a handful of reads. The mark never exceeds what is left of the frame — a mark
//! above the bytes still coming would wait for bytes that never come — so the reader
//! parses the frame boundaries (the 4-byte big-endian length prefix of
//! `protocol::frame`) as the bytes pass through.
//!
//! Lowering the mark must itself signal data already queued above the new mark; Linux does
//! so from 4.18 on (`tcp_set_rcvlowat` calls `tcp_data_ready`). On an older kernel, or if
//! the option is refused, the reader leaves the mark at 1: correct, only busier.

// `setsockopt(SO_RCVLOWAT)`: neither std, tokio nor socket2 offers it.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;

/// The highest mark set: large enough that a 4 MiB chunk is a few reads, small enough to
/// stay well inside the receive buffer the kernel grants (it caps the mark at half of
/// `tcp_rmem`'s maximum).
pub const LOWAT_CAP: usize = 1 << 20;

/// Where the reader is in the stream of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    /// Reading the length prefix: `have` of its 4 bytes so far, big-endian.
    Prefix { have: usize, len: u32 },
    /// Reading a frame body: `left` bytes to go.
    Body { left: usize },
}

impl Cursor {
    const START: Cursor = Cursor::Prefix { have: 0, len: 0 };

    /// Bytes certainly still coming before the stream may pause (the rest of this frame).
    fn coming(self) -> usize {
        match self {
            Cursor::Prefix { have, .. } => 4 - have,
            Cursor::Body { left } => left,
        }
    }

    /// Moves past `bytes` (pure).
    fn advance(mut self, mut bytes: &[u8]) -> Cursor {
        while !bytes.is_empty() {
            self = match self {
                Cursor::Prefix { have, len } => {
                    let len = len << 8 | u32::from(bytes[0]);
                    bytes = &bytes[1..];
                    if have + 1 == 4 {
                        if len == 0 {
                            Cursor::START
                        } else {
                            Cursor::Body { left: len as usize }
                        }
                    } else {
                        Cursor::Prefix {
                            have: have + 1,
                            len,
                        }
                    }
                }
                Cursor::Body { left } => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    if take == left {
                        Cursor::START
                    } else {
                        Cursor::Body { left: left - take }
                    }
                }
            };
        }
        self
    }
}

/// The mark for a reader at `cursor` (pure).
fn mark(cursor: Cursor) -> usize {
    cursor.coming().clamp(1, LOWAT_CAP)
}

/// Whether this kernel signals data already queued when the mark is lowered (4.18+).
fn kernel_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .and_then(|r| release_at_least(&r, (4, 18)))
            .unwrap_or(false)
    })
}

/// Whether a kernel release string (`6.8.0-45-generic`) is `want` or newer (pure).
fn release_at_least(release: &str, want: (u32, u32)) -> Option<bool> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor) >= want)
}

/// A connection's read half that keeps `SO_RCVLOWAT` at [`mark`] of the frame being read.
/// Start it at a frame boundary; it may be dropped at a frame boundary and a new one made
/// (the mark it left is reset by the next one's first read).
pub struct FramePaced<'a> {
    stream: &'a mut TcpStream,
    cursor: Cursor,
    /// The mark set on the socket (0: none set by this reader yet); `None` when the
    /// option is not used.
    set: Option<usize>,
}

impl<'a> FramePaced<'a> {
    pub fn new(stream: &'a mut TcpStream) -> Self {
        let set = kernel_supported().then_some(0);
        FramePaced {
            stream,
            cursor: Cursor::START,
            set,
        }
    }

    fn pace(&mut self) {
        self.set_mark(mark(self.cursor));
    }

    fn set_mark(&mut self, want: usize) {
        let Some(set) = self.set else { return };
        if want == set {
            return;
        }
        let value = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
        // SAFETY: a valid socket descriptor (borrowed for `'a`), and a c_int option value
        // whose size is passed with it.
        let rc = unsafe {
            libc::setsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        self.set = (rc == 0).then_some(want);
        if rc != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "SO_RCVLOWAT refused; reading at the kernel's pace");
        }
    }
}

impl Drop for FramePaced<'_> {
    /// Leaves the socket as it found it: other readers of the stream (the handshake, a
    /// plain `read_frame`) know nothing of the mark.
    fn drop(&mut self) {
        if self.set.is_some_and(|m| m > 1) {
            self.set_mark(1);
        }
    }
}

impl AsyncRead for FramePaced<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.pace();
        let before = buf.filled().len();
        let polled = Pin::new(&mut *this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.cursor = this.cursor.advance(&buf.filled()[before..]);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn the_cursor_follows_frame_boundaries_whatever_the_split() {
        let stream = [frame(&[7; 10]), frame(&[]), frame(&[1; 3 << 20])].concat();
        for step in [1, 3, 4, 5, 13, 4096, 1 << 20, stream.len()] {
            let mut c = Cursor::START;
            let mut marks = Vec::new();
            for piece in stream.chunks(step) {
                marks.push(mark(c));
                c = c.advance(piece);
            }
            assert_eq!(c, Cursor::START, "step {step}");
            assert!(
                marks.iter().all(|m| (1..=LOWAT_CAP).contains(m)),
                "step {step}"
            );
        }
        let c = Cursor::START.advance(&frame(&[0; 10])[..6]);
        assert_eq!(c, Cursor::Body { left: 8 });
        assert_eq!(mark(c), 8, "never more than the frame still holds");
        let c = Cursor::START.advance(&frame(&[0; 3 << 20])[..4]);
        assert_eq!(mark(c), LOWAT_CAP);
        assert_eq!(mark(Cursor::START.advance(&[0, 0])), 2, "the prefix's rest");
    }

    #[test]
    fn kernel_releases_are_compared_by_major_and_minor() {
        assert_eq!(release_at_least("6.8.0-45-generic\n", (4, 18)), Some(true));
        assert_eq!(
            release_at_least("4.19.90-2102.2.0.0062.oe1.aarch64", (4, 18)),
            Some(true)
        );
        assert_eq!(
            release_at_least("4.14.0-115.el7a.aarch64", (4, 18)),
            Some(false)
        );
        assert_eq!(
            release_at_least("3.10.0-1160.el7.x86_64", (4, 18)),
            Some(false)
        );
        assert_eq!(release_at_least("garbage", (4, 18)), None);
    }

    /// Frames of every size, written in pieces with pauses between them, all arrive whole
    /// through a paced reader on a real socket: a mark above the bytes still coming would
    /// hang here (each read has a deadline).
    #[tokio::test]
    async fn frames_written_in_pieces_with_pauses_all_arrive_through_a_paced_reader() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies: Vec<Vec<u8>> = [0usize, 1, 37, 70_000, LOWAT_CAP - 1, LOWAT_CAP + 5, 4 << 20]
            .iter()
            .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
            .collect();
        let sent = bodies.clone();
        let writer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for body in sent {
                let f = frame(&body);
                let cut = f.len() / 2;
                s.write_all(&f[..cut]).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                s.write_all(&f[cut..]).await.unwrap();
                s.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            }
            // Keep the connection open: a reader waiting past the last frame must not be
            // rescued by the end of the stream.
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        });
        let mut s = TcpStream::connect(addr).await.unwrap();
        for body in &bodies {
            let mut paced = FramePaced::new(&mut s);
            let read = async {
                let mut len = [0u8; 4];
                paced.read_exact(&mut len).await?;
                let mut got = vec![0u8; u32::from_be_bytes(len) as usize];
                paced.read_exact(&mut got).await?;
                io::Result::Ok(got)
            };
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), read)
                .await
                .expect("a frame within its deadline")
                .unwrap();
            assert_eq!(&got, body);
        }
        writer.abort();
    }
}
