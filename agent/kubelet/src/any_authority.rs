//! A Unix-socket connection whose requests reach the HTTP/2 server with an `:authority`
//! it accepts, whatever the client put there.
//!
//! Why: on a Unix socket the authority names nothing, and clients fill it in as they
//! please. The kubelet's plugin watcher dials the registration socket without
//! `WithAuthority`, so grpc-go sends the URL-escaped socket path
//! (`%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2F…`; kubernetes/kubernetes#109081 fixed
//! only the CSI and device-plugin clients); grpc-java and Python send the raw path. The
//! HTTP/2 server under tonic (h2) parses `:authority` as a URI authority and resets the
//! stream with `PROTOCOL_ERROR` when it is not one (hyperium/h2#487, open), so such a
//! client is never answered: the agent's CSI driver was never registered with a real
//! kubelet and no member Pod could mount its volume.
//!
//! [`AnyAuthority`] sits between the socket and h2. It reads the client's frames, decodes
//! each request header block (HPACK, with the client's dynamic table), replaces an
//! authority h2 would refuse with `localhost` (what grpc-go sends on Unix sockets), and
//! hands h2 the block re-encoded as plain literals, so h2's own table stays empty and the
//! two never disagree. Every other frame passes through as it came; what the server
//! writes goes to the client untouched. Input that is not HTTP/2 a server would accept
//! (a header block over [`MAX_HEADER_BLOCK`], an interleaved frame inside a block, bad
//! HPACK) ends the connection with an error instead of being guessed at.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types and flags this reader looks at (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

const FRAME_HEADER_LEN: usize = 9;

/// The largest frame payload written to the server: the protocol's minimum
/// `SETTINGS_MAX_FRAME_SIZE`, which every server accepts.
const MAX_FRAME_OUT: usize = 16_384;

/// The largest header block, encoded or decoded, a request may carry. A request to these
/// servers carries a method path and a few gRPC headers, well under 1 KiB.
pub(crate) const MAX_HEADER_BLOCK: usize = 64 * 1024;

/// The HPACK dynamic table size the server lets the client use: h2's default, since the
/// servers here advertise no `SETTINGS_HEADER_TABLE_SIZE` of their own.
const SERVER_HEADER_TABLE_SIZE: usize = 4096;

/// The authority handed to the server in place of one it would refuse.
const LOCALHOST: &[u8] = b"localhost";

/// Why a client's bytes were not passed on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum RewriteError {
    /// The connection did not start with the HTTP/2 client preface.
    #[error("not an HTTP/2 connection: the client preface is missing")]
    NoPreface,
    /// A header block grew past [`MAX_HEADER_BLOCK`].
    #[error("a request header block is larger than {MAX_HEADER_BLOCK} bytes")]
    HeaderBlockTooLarge,
    /// A frame other than CONTINUATION on the same stream came inside a header block.
    #[error("frame type {frame_type} on stream {stream} inside the header block of stream {open}")]
    Interleaved {
        /// The frame's type.
        frame_type: u8,
        /// The frame's stream.
        stream: u32,
        /// The stream whose header block is open.
        open: u32,
    },
    /// A CONTINUATION frame with no header block open.
    #[error("a CONTINUATION frame on stream {0} follows no HEADERS frame")]
    StrayContinuation(u32),
    /// Padding or priority fields longer than the frame.
    #[error("a HEADERS frame on stream {0} is shorter than its padding and priority fields")]
    MalformedHeaders(u32),
    /// The header block is not valid HPACK.
    #[error("a request header block is not valid HPACK: {0}")]
    Hpack(String),
}

/// The client-to-server byte stream of one connection, rewritten frame by frame. Pure: it
/// takes bytes and gives bytes, so it is tested without sockets.
pub(crate) struct HeaderRewriter {
    stage: Stage,
    /// Input not yet consumed: a partial frame header or a partial header-frame payload.
    pending: Vec<u8>,
    /// The header block being collected, between HEADERS and END_HEADERS.
    block: Option<Block>,
    decoder: fluke_hpack::Decoder<'static>,
}

enum Stage {
    /// Expecting the client preface; the count of its bytes seen so far.
    Preface(usize),
    /// Between frames, or inside a header frame still being buffered.
    Frames,
    /// Inside a frame that passes through untouched; the count of its payload bytes left.
    Passing(usize),
}

/// One request's header block while its frames arrive.
struct Block {
    stream: u32,
    end_stream: bool,
    fragment: Vec<u8>,
}

impl Default for HeaderRewriter {
    fn default() -> Self {
        let mut decoder = fluke_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(SERVER_HEADER_TABLE_SIZE);
        Self {
            stage: Stage::Preface(0),
            pending: Vec::new(),
            block: None,
            decoder,
        }
    }
}

impl HeaderRewriter {
    /// Consumes `input`, appending what the server should read to `out`. Bytes that end
    /// mid-frame are kept until the rest arrives.
    pub(crate) fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
        while !input.is_empty() {
            match self.stage {
                Stage::Preface(seen) => {
                    let n = input.len().min(PREFACE.len() - seen);
                    if input[..n] != PREFACE[seen..seen + n] {
                        return Err(RewriteError::NoPreface);
                    }
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.stage = if seen + n == PREFACE.len() {
                        Stage::Frames
                    } else {
                        Stage::Preface(seen + n)
                    };
                }
                Stage::Passing(left) => {
                    let n = input.len().min(left);
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.stage = if n == left {
                        Stage::Frames
                    } else {
                        Stage::Passing(left - n)
                    };
                }
                Stage::Frames => input = self.frame(input, out)?,
            }
        }
        Ok(())
    }

    /// Takes what it can of one frame from `input` and returns the rest.
    fn frame<'i>(&mut self, input: &'i [u8], out: &mut Vec<u8>) -> Result<&'i [u8], RewriteError> {
        // Complete the frame header first.
        if self.pending.len() < FRAME_HEADER_LEN {
            let n = input.len().min(FRAME_HEADER_LEN - self.pending.len());
            self.pending.extend_from_slice(&input[..n]);
            if self.pending.len() < FRAME_HEADER_LEN {
                return Ok(&input[n..]);
            }
            let header = FrameHeader::parse(&self.pending);
            self.check_order(&header)?;
            if !header.is_header_block() {
                // Passed through as it comes, header first, payload streamed.
                out.extend_from_slice(&self.pending);
                self.pending.clear();
                if header.length > 0 {
                    self.stage = Stage::Passing(header.length);
                }
                return Ok(&input[n..]);
            }
            let collected = self.block.as_ref().map_or(0, |b| b.fragment.len());
            if collected + header.length > MAX_HEADER_BLOCK {
                return Err(RewriteError::HeaderBlockTooLarge);
            }
            return self.header_payload(&input[n..], out);
        }
        self.header_payload(input, out)
    }

    /// Buffers a HEADERS or CONTINUATION payload; once whole, adds it to the block and,
    /// at END_HEADERS, writes the rewritten block.
    fn header_payload<'i>(
        &mut self,
        input: &'i [u8],
        out: &mut Vec<u8>,
    ) -> Result<&'i [u8], RewriteError> {
        let header = FrameHeader::parse(&self.pending);
        let have = self.pending.len() - FRAME_HEADER_LEN;
        let n = input.len().min(header.length - have);
        self.pending.extend_from_slice(&input[..n]);
        if self.pending.len() < FRAME_HEADER_LEN + header.length {
            return Ok(&input[n..]);
        }
        let payload = std::mem::take(&mut self.pending);
        let payload = &payload[FRAME_HEADER_LEN..];
        if header.frame_type == HEADERS {
            self.block = Some(Block {
                stream: header.stream,
                end_stream: header.flags & END_STREAM != 0,
                fragment: header_fragment(&header, payload)?.to_vec(),
            });
        } else if let Some(block) = self.block.as_mut() {
            block.fragment.extend_from_slice(payload);
        }
        if header.flags & END_HEADERS != 0
            && let Some(block) = self.block.take()
        {
            self.write_block(block, out)?;
        }
        Ok(&input[n..])
    }

    /// A header block admits only CONTINUATION frames of its own stream until it ends.
    fn check_order(&self, header: &FrameHeader) -> Result<(), RewriteError> {
        match (&self.block, header.frame_type) {
            (Some(open), CONTINUATION) if open.stream == header.stream => Ok(()),
            (Some(open), frame_type) => Err(RewriteError::Interleaved {
                frame_type,
                stream: header.stream,
                open: open.stream,
            }),
            (None, CONTINUATION) => Err(RewriteError::StrayContinuation(header.stream)),
            (None, _) => Ok(()),
        }
    }

    /// Decodes `block`, re-encodes it with an acceptable authority, and writes it as one
    /// HEADERS frame (with CONTINUATION frames when it outgrows one).
    fn write_block(&mut self, block: Block, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let mut encoded = Vec::with_capacity(block.fragment.len() + LOCALHOST.len());
        let mut decoded_len = 0usize;
        self.decoder
            .decode_with_cb(&block.fragment, |name, value| {
                // RFC 7541 §4.1's entry size: what a header costs whatever its encoding.
                // Past the bound nothing more is written: a small block of references to
                // a large table entry would otherwise expand without limit.
                decoded_len = decoded_len.saturating_add(name.len() + value.len() + 32);
                if decoded_len > MAX_HEADER_BLOCK {
                    return;
                }
                let value = if &*name == b":authority" && !acceptable_authority(&value) {
                    Cow::Borrowed(LOCALHOST)
                } else {
                    value
                };
                encode_literal(&name, &value, &mut encoded);
            })
            .map_err(|e| RewriteError::Hpack(format!("{e:?}")))?;
        if decoded_len > MAX_HEADER_BLOCK {
            return Err(RewriteError::HeaderBlockTooLarge);
        }
        let mut chunks = encoded.chunks(MAX_FRAME_OUT).peekable();
        let mut first = true;
        // An empty block still needs its HEADERS frame.
        let empty: &[u8] = &[];
        let mut next = chunks.next().or(Some(empty));
        while let Some(chunk) = next {
            let last = chunks.peek().is_none();
            let mut flags = if last { END_HEADERS } else { 0 };
            let frame_type = if first {
                if block.end_stream {
                    flags |= END_STREAM;
                }
                HEADERS
            } else {
                CONTINUATION
            };
            FrameHeader {
                length: chunk.len(),
                frame_type,
                flags,
                stream: block.stream,
            }
            .write(out);
            out.extend_from_slice(chunk);
            first = false;
            next = chunks.next();
        }
        Ok(())
    }
}

/// Whether h2 takes `value` as an authority (the check it resets the stream on).
fn acceptable_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// The HEADERS payload without its padding and priority fields.
fn header_fragment<'p>(header: &FrameHeader, payload: &'p [u8]) -> Result<&'p [u8], RewriteError> {
    let malformed = || RewriteError::MalformedHeaders(header.stream);
    let mut fragment = payload;
    let mut padding = 0;
    if header.flags & PADDED != 0 {
        let (&pad, rest) = fragment.split_first().ok_or_else(malformed)?;
        padding = usize::from(pad);
        fragment = rest;
    }
    if header.flags & PRIORITY != 0 {
        fragment = fragment.get(5..).ok_or_else(malformed)?;
    }
    let end = fragment.len().checked_sub(padding).ok_or_else(malformed)?;
    Ok(&fragment[..end])
}

/// A header field as "literal without indexing, new name", no Huffman (RFC 7541 §6.2.2).
fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    for string in [name, value] {
        // H = 0 and a 7-bit length prefix; writing to a Vec cannot fail.
        let _ = fluke_hpack::encoder::encode_integer_into(string.len(), 7, 0, out);
        out.extend_from_slice(string);
    }
}

/// The 9-byte header of an HTTP/2 frame.
struct FrameHeader {
    length: usize,
    frame_type: u8,
    flags: u8,
    stream: u32,
}

impl FrameHeader {
    fn parse(bytes: &[u8]) -> Self {
        Self {
            length: usize::from(bytes[0]) << 16
                | usize::from(bytes[1]) << 8
                | usize::from(bytes[2]),
            frame_type: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }

    fn is_header_block(&self) -> bool {
        matches!(self.frame_type, HEADERS | CONTINUATION)
    }

    fn write(&self, out: &mut Vec<u8>) {
        let length = u32::try_from(self.length).unwrap_or(u32::MAX).to_be_bytes();
        out.extend_from_slice(&length[1..]);
        out.push(self.frame_type);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
    }
}

/// A server-side connection whose reads go through a [`HeaderRewriter`]; writes go to
/// the client untouched.
pub(crate) struct AnyAuthority<S> {
    inner: S,
    rewriter: HeaderRewriter,
    /// Rewritten bytes the server has not read yet, from `sent` on.
    out: Vec<u8>,
    sent: usize,
}

impl<S> AnyAuthority<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            rewriter: HeaderRewriter::default(),
            out: Vec::new(),
            sent: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AnyAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.sent < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.sent);
                buf.put_slice(&this.out[this.sent..this.sent + n]);
                this.sent += n;
                if this.sent == this.out.len() {
                    this.out.clear();
                    this.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut raw = [0u8; 8192];
            let mut read = ReadBuf::new(&mut raw);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                return Poll::Ready(Ok(())); // the client closed
            }
            this.rewriter
                .feed(read.filled(), &mut this.out)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AnyAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AnyAuthority<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
#[path = "any_authority_tests.rs"]
mod tests;
