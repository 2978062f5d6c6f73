//! One authenticated TCP link between two endpoints. Writes go through a per-connection lock
//! (one frame at a time, header and payload in one vectored write, no copy of the payload);
//! reads are done by one reader task per connection that pushes data frames into the
//! endpoint's mailbox, so sending and receiving overlap and many communicators share a link.
//! The reader is buffered so that a small frame costs one `recv`, not three.

use std::io::IoSlice;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Mutex;

use super::mailbox::{Mailbox, Msg, Notice};
use crate::frame::{FrameError, HEADER_LEN, Header, Kind};

/// The socket buffer size to request: `requested` if the kernel allows it, else None (keep
/// autotuning — an explicit size above `net.core.[rw]mem_max` is silently clamped and would
/// also switch autotuning off, the worst of both).
pub fn effective_buffer(requested: Option<usize>) -> Option<usize> {
    let b = requested?;
    let cap = |f: &str| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
    };
    match (
        cap("/proc/sys/net/core/rmem_max"),
        cap("/proc/sys/net/core/wmem_max"),
    ) {
        (Some(r), Some(w)) if r >= b && w >= b => Some(b),
        (None, None) => Some(b),
        _ => None,
    }
}

/// Socket tuning shared by dialled and accepted links.
pub fn tune(stream: &tokio::net::TcpStream, buffer: Option<usize>) {
    // Best effort: a kernel cap on buffer sizes is not an error worth failing a link for.
    let _ = stream.set_nodelay(true);
    if let Some(b) = buffer {
        let s = socket2::SockRef::from(stream);
        let _ = s.set_send_buffer_size(b);
        let _ = s.set_recv_buffer_size(b);
    }
}

pub struct Connection {
    /// Endpoint-local id; a test proves survivors' links keep their ids across epochs.
    pub id: u64,
    writer: Mutex<OwnedWriteHalf>,
    /// Set while a frame is half written; if the writer is cancelled mid-frame the stream is
    /// unusable and further writes fail instead of corrupting the peer's framing.
    torn: AtomicBool,
}

/// Clears the torn flag only if the frame was written completely.
struct TornGuard<'a>(&'a AtomicBool, bool);
impl Drop for TornGuard<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(true, Ordering::Release);
        }
    }
}

impl Connection {
    pub fn new(id: u64, writer: OwnedWriteHalf) -> Connection {
        Connection {
            id,
            writer: Mutex::new(writer),
            torn: AtomicBool::new(false),
        }
    }

    /// Writes one frame; the caller bounds it with a deadline.
    pub async fn write_frame(&self, header: Header, payload: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock().await;
        if self.torn.load(Ordering::Acquire) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "link unusable after an interrupted write",
            ));
        }
        let mut guard = TornGuard(&self.torn, false);
        let head = header.encode();
        write_all_vectored(&mut w, &head, payload).await?;
        guard.1 = true;
        Ok(())
    }
}

async fn write_all_vectored(
    w: &mut OwnedWriteHalf,
    head: &[u8],
    payload: &[u8],
) -> std::io::Result<()> {
    let (mut h, mut p) = (head, payload);
    while !h.is_empty() || !p.is_empty() {
        let bufs = [IoSlice::new(h), IoSlice::new(p)];
        let n = w.write_vectored(&bufs).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_h = n.min(h.len());
        h = &h[from_h..];
        p = &p[n - from_h..];
    }
    Ok(())
}

/// Why a reader stopped.
#[derive(Debug)]
pub enum ReadEnd {
    Eof,
    Io(std::io::Error),
    Frame(FrameError),
    Unexpected(Kind),
    /// The peer sent more than the mailbox holds (see `mailbox::MailboxFull`).
    Full(super::mailbox::MailboxFull),
}

impl std::fmt::Display for ReadEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadEnd::Eof => write!(f, "connection closed by peer"),
            ReadEnd::Io(e) => write!(f, "connection failed: {e}"),
            ReadEnd::Frame(e) => write!(f, "malformed frame: {e}"),
            ReadEnd::Unexpected(k) => write!(f, "unexpected {k} frame on an established link"),
            ReadEnd::Full(e) => write!(f, "the receive mailbox is full: {e}"),
        }
    }
}

/// The reader's staging buffer. Unbuffered, a frame costs three `recv`s (header, payload,
/// and the one that finds the socket drained); through this buffer a small frame arrives
/// with its header in one `recv`, and a short read tells the runtime the socket is drained.
/// Larger payloads are read straight into their own buffer once this one is empty, so at
/// most this much of a big frame is copied twice (3 % of a default 512 KiB segment).
const READ_STAGING: usize = 16 << 10;

/// Reads frames until the link ends; data goes to the mailbox. Returns why it ended.
pub async fn read_loop(
    rd: OwnedReadHalf,
    peer_endpoint: u64,
    mail: Arc<Mailbox>,
    max_frame: usize,
) -> ReadEnd {
    let mut rd = BufReader::with_capacity(READ_STAGING, rd);
    let mut head = [0u8; HEADER_LEN];
    loop {
        match rd.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return ReadEnd::Eof,
            Err(e) => return ReadEnd::Io(e),
        }
        let h = match Header::decode(&head, max_frame) {
            Ok(h) => h,
            Err(e) => return ReadEnd::Frame(e),
        };
        let len = h.len as usize;
        let mut data = mail.buffer(len);
        while data.len() < len {
            // Bounded: a pooled buffer may have more room than this frame.
            let mut frame = (&mut rd).take((len - data.len()) as u64);
            match frame.read_buf(&mut data).await {
                Ok(0) => return ReadEnd::Eof,
                Ok(_) => {}
                Err(e) => return ReadEnd::Io(e),
            }
        }
        match h.kind {
            Kind::Data => {
                let msg = Msg {
                    epoch: h.epoch,
                    data,
                };
                if let Err(e) = mail.push((peer_endpoint, h.ctx, h.tag), msg) {
                    return ReadEnd::Full(e);
                }
            }
            Kind::Abort => {
                // Payload: blamed endpoint id (0 = none), then the reason text.
                let (blame, text) = match data.split_first_chunk::<8>() {
                    Some((b, rest)) => (u64::from_le_bytes(*b), rest),
                    None => (0, &data[..]),
                };
                let notice = Notice {
                    from: peer_endpoint,
                    blame: (blame != 0).then_some(blame),
                    reason: String::from_utf8_lossy(text).into_owned(),
                };
                if let Err(e) = mail.abort_ctx(h.ctx, notice) {
                    return ReadEnd::Full(e);
                }
            }
            Kind::Goodbye => return ReadEnd::Eof,
            k => return ReadEnd::Unexpected(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Frames of every size class around the reader's staging buffer, sent back to back in
    /// one write (so several arrive in one `recv`) and then one byte at a time, come out
    /// whole and in order.
    #[tokio::test]
    async fn the_buffered_reader_delivers_frames_of_every_size_whole_and_in_order() {
        let sizes = [
            0,
            1,
            4096,
            READ_STAGING - HEADER_LEN,
            READ_STAGING,
            READ_STAGING + 1,
            3 * READ_STAGING + 7,
            1 << 20,
            5,
        ];
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        let mut wire = Vec::new();
        for (tag, f) in frames.iter().enumerate() {
            wire.extend_from_slice(&Header::new(Kind::Data, 3, 9, tag as u64, f.len()).encode());
            wire.extend_from_slice(f);
        }
        for trickle in [false, true] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let wire = wire.clone();
            let writer = tokio::spawn(async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                if trickle {
                    for b in wire.chunks(READ_STAGING / 3 + 1) {
                        s.write_all(b).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                } else {
                    s.write_all(&wire).await.unwrap();
                }
                s.shutdown().await.unwrap();
            });
            let (stream, _) = listener.accept().await.unwrap();
            let (rd, _wr) = stream.into_split();
            let mail = Arc::new(Mailbox::default());
            let end = read_loop(rd, 7, mail.clone(), 2 << 20).await;
            assert!(matches!(end, ReadEnd::Eof), "{end}");
            writer.await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            for (tag, f) in frames.iter().enumerate() {
                let m = mail.pop((7, 9, tag as u64), deadline).await.unwrap();
                assert_eq!(m.epoch, 3);
                assert!(
                    m.data == *f,
                    "frame {tag} ({} bytes), trickle {trickle}",
                    f.len()
                );
            }
        }
    }
}
