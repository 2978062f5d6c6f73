//! Wire format of the TCP backend: every message is one frame, a fixed 36-byte header
//! followed by `len` payload bytes.
//!
//! ```text
//! magic "HCM1" | version u8 | kind u8 | flags u16 (0) | epoch u64 | ctx u64 | tag u64 | len u32
//! ```
//! All integers little-endian. `ctx` names the communicator (context id), `tag` the operation
//! sequence number (or a point-to-point tag). The decoder trusts nothing: a frame is parsed
//! only once complete, unknown kinds, nonzero reserved flags and lengths above the configured
//! maximum are rejected before any allocation. Control payloads are read through [`Cursor`],
//! which fails cleanly on truncation. `tests::decoder_never_panics_on_random_bytes` fuzzes it.

use std::fmt;

pub const MAGIC: [u8; 4] = *b"HCM1";
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 36;
/// Default cap on one frame's payload; larger messages are split into several frames.
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;

/// Frame kinds. Handshake kinds appear only before a link is established; `Data`, `Abort`
/// and `Goodbye` only after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Hello = 1,
    Challenge = 2,
    Response = 3,
    Accept = 4,
    Reject = 5,
    Register = 6,
    Table = 7,
    Data = 8,
    Abort = 9,
    Goodbye = 10,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::Challenge,
            3 => Kind::Response,
            4 => Kind::Accept,
            5 => Kind::Reject,
            6 => Kind::Register,
            7 => Kind::Table,
            8 => Kind::Data,
            9 => Kind::Abort,
            10 => Kind::Goodbye,
            _ => return None,
        })
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub epoch: u64,
    pub ctx: u64,
    pub tag: u64,
    pub len: u32,
}

impl Header {
    pub fn new(kind: Kind, epoch: u64, ctx: u64, tag: u64, len: usize) -> Header {
        Header {
            kind,
            epoch,
            ctx,
            tag,
            len: len as u32,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.kind as u8;
        // b[6..8]: reserved flags, zero.
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.ctx.to_le_bytes());
        b[24..32].copy_from_slice(&self.tag.to_le_bytes());
        b[32..36].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses and validates a header; `max_payload` bounds `len`.
    pub fn decode(b: &[u8; HEADER_LEN], max_payload: usize) -> Result<Header, FrameError> {
        if b[0..4] != MAGIC {
            return Err(FrameError::BadMagic([b[0], b[1], b[2], b[3]]));
        }
        if b[4] != VERSION {
            return Err(FrameError::BadVersion(b[4]));
        }
        let kind = Kind::from_u8(b[5]).ok_or(FrameError::UnknownKind(b[5]))?;
        if b[6] != 0 || b[7] != 0 {
            return Err(FrameError::ReservedFlags);
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let len = u32::from_le_bytes([b[32], b[33], b[34], b[35]]);
        if len as usize > max_payload {
            return Err(FrameError::TooLarge {
                len: len as usize,
                max: max_payload,
            });
        }
        Ok(Header {
            kind,
            epoch: u64_at(8),
            ctx: u64_at(16),
            tag: u64_at(24),
            len,
        })
    }
}

/// A decoded frame: header, payload, bytes consumed.
pub type Decoded<'a> = (Header, &'a [u8], usize);

/// Decodes one complete frame from the front of `buf`: `Ok(None)` if more bytes are needed,
/// else the header, the payload and the number of bytes consumed.
pub fn decode_frame(buf: &[u8], max_payload: usize) -> Result<Option<Decoded<'_>>, FrameError> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let h = Header::decode(head, max_payload)?;
    let end = HEADER_LEN + h.len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some((h, &buf[HEADER_LEN..end], end)))
}

/// Why a frame or payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("bad magic {0:02x?} (not an hcomm peer?)")]
    BadMagic([u8; 4]),
    #[error("unsupported protocol version {0}")]
    BadVersion(u8),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("reserved header flags set")]
    ReservedFlags,
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("payload truncated: needed {needed} more bytes for {field}")]
    Truncated { field: &'static str, needed: usize },
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("{0} trailing payload bytes")]
    Trailing(usize),
}

/// Bounds-checked reader over a control payload.
pub struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf }
    }

    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], FrameError> {
        if self.buf.len() < n {
            return Err(FrameError::Truncated {
                field,
                needed: n - self.buf.len(),
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FrameError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, field)?);
        Ok(out)
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub fn u64(&mut self, field: &'static str) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A u16-length-prefixed UTF-8 string.
    pub fn string(&mut self, field: &'static str) -> Result<String, FrameError> {
        let n = u16::from_le_bytes(self.array(field)?) as usize;
        let b = self.bytes(n, field)?;
        String::from_utf8(b.to_vec()).map_err(|_| FrameError::Invalid {
            field,
            reason: "not UTF-8".into(),
        })
    }

    pub fn finish(self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Trailing(self.buf.len()))
        }
    }
}

/// Builder for control payloads, the mirror of [`Cursor`].
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(mut self, v: u8) -> Self {
        self.buf.push(v);
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// u16 length prefix; longer strings are cut at a char boundary (they are messages).
    pub fn string(mut self, s: &str) -> Self {
        let mut end = s.len().min(u16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.buf.extend_from_slice(&(end as u16).to_le_bytes());
        self.buf.extend_from_slice(&s.as_bytes()[..end]);
        self
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::XorShift;

    #[test]
    fn header_round_trips() {
        let h = Header::new(Kind::Data, 7, 0xdead_beef, 42, 1234);
        let b = h.encode();
        assert_eq!(Header::decode(&b, 1 << 20).unwrap(), h);
        let whole = [&b[..], &[0u8; 1234][..]].concat();
        let (h2, payload, used) = decode_frame(&whole, 1 << 20).unwrap().unwrap();
        assert_eq!((h2, payload.len(), used), (h, 1234, HEADER_LEN + 1234));
    }

    #[test]
    fn incomplete_frames_are_not_parsed() {
        let h = Header::new(Kind::Data, 1, 2, 3, 10).encode();
        assert_eq!(decode_frame(&h[..20], 100).unwrap(), None);
        assert_eq!(decode_frame(&h, 100).unwrap(), None);
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let good = Header::new(Kind::Hello, 1, 2, 3, 10).encode();
        let mut b = good;
        b[0] = b'X';
        assert!(matches!(
            Header::decode(&b, 100),
            Err(FrameError::BadMagic(_))
        ));
        let mut b = good;
        b[4] = 9;
        assert_eq!(Header::decode(&b, 100), Err(FrameError::BadVersion(9)));
        let mut b = good;
        b[5] = 200;
        assert_eq!(Header::decode(&b, 100), Err(FrameError::UnknownKind(200)));
        let mut b = good;
        b[7] = 1;
        assert_eq!(Header::decode(&b, 100), Err(FrameError::ReservedFlags));
        assert!(matches!(
            Header::decode(&good, 5),
            Err(FrameError::TooLarge { len: 10, max: 5 })
        ));
    }

    #[test]
    fn cursor_reports_truncation_instead_of_panicking() {
        let w = Writer::default().u32(5).string("héllo").u64(9);
        let mut c = Cursor::new(&w.buf);
        assert_eq!(c.u32("a").unwrap(), 5);
        assert_eq!(c.string("s").unwrap(), "héllo");
        assert_eq!(c.u64("b").unwrap(), 9);
        c.finish().unwrap();
        let mut c = Cursor::new(&w.buf[..7]);
        c.u32("a").unwrap();
        assert!(matches!(c.string("s"), Err(FrameError::Truncated { .. })));
    }

    /// Property: random and mutated byte streams never panic the decoder or the control
    /// payload parsers; every accepted frame respects the size cap. Fixed seed, bounded.
    #[test]
    fn decoder_never_panics_on_random_bytes() {
        let mut rng = XorShift::new(0x5eed_1234);
        let valid = Header::new(Kind::Register, 3, 4, 5, 40).encode();
        for i in 0..20_000 {
            let len = rng.below(120);
            let mut buf: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if i % 2 == 0 && buf.len() >= HEADER_LEN {
                // Mostly-valid header with a few flipped bytes reaches the deeper paths.
                buf[..HEADER_LEN].copy_from_slice(&valid);
                for _ in 0..rng.below(3) {
                    let at = rng.below(buf.len());
                    buf[at] = rng.next_u64() as u8;
                }
            }
            if let Ok(Some((h, payload, used))) = decode_frame(&buf, 64) {
                assert!(h.len as usize <= 64 && used <= buf.len());
                assert_eq!(payload.len(), h.len as usize);
                let _ = crate::auth::Hello::decode(payload);
                let _ = crate::auth::Challenge::decode(payload);
                let _ = crate::auth::Reject::decode(payload);
                let _ = crate::bootstrap::Register::decode(payload);
                let _ = crate::bootstrap::Table::decode(payload);
            }
            let _ = crate::auth::Hello::decode(&buf);
            let _ = crate::bootstrap::Table::decode(&buf);
            let _ = crate::bootstrap::RootInfo::from_bytes(&buf);
        }
    }
}
