//! The wire protocol between a joiner and a source, after the handshake (`auth`).
//!
//! Every message is one frame: `u32 length (big-endian) | u8 kind | payload`, where
//! `length` counts kind and payload. A frame is read completely (its length checked
//! against a maximum BEFORE anything is allocated) and only then parsed; a payload that
//! does not parse exactly is a protocol error. Requests are answered in order, so a client
//! may pipeline several.
//!
//! ```text
//! GetManifest {set}     -> Manifest {set, canonical bytes} | Missing {set}
//! GetChunk    {chunk}   -> Chunk {chunk, data}             | Missing {chunk}
//! Have        {set}     -> HaveBits {set, n, held, coming} | Missing {set}
//!                       -> Error {message}  (then the server closes)
//! ```
//! A chunk response carries its digest; the receiver hashes the data and compares with
//! the digest it asked for (the one in the manifest), never with the one sent.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::digest::Digest;
use super::manifest::{MAX_CHUNK_SIZE, MAX_MANIFEST_BYTES};

/// Largest frame after the handshake: a maximal chunk or manifest plus headers.
pub const MAX_FRAME: usize = {
    let m = MAX_CHUNK_SIZE as usize;
    (if m > MAX_MANIFEST_BYTES {
        m
    } else {
        MAX_MANIFEST_BYTES
    }) + 64
};
/// Largest request a server accepts (requests are tiny).
pub const MAX_REQUEST_FRAME: usize = 64;

pub(crate) mod kind {
    pub const GET_MANIFEST: u8 = 0x01;
    pub const GET_CHUNK: u8 = 0x02;
    pub const HAVE: u8 = 0x03;
    pub const MANIFEST: u8 = 0x81;
    pub const CHUNK: u8 = 0x82;
    pub const MISSING: u8 = 0x83;
    pub const HAVE_BITS: u8 = 0x84;
    pub const ERROR: u8 = 0x85;
}

/// Why bytes on the wire are not a valid frame or message.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {len} bytes exceeds the maximum {max}")]
    TooLarge { len: usize, max: usize },
    #[error("empty frame")]
    Empty,
    #[error("unexpected message kind {0:#04x}")]
    UnexpectedKind(u8),
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A joiner's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    GetManifest(Digest),
    GetChunk(Digest),
    Have(Digest),
}

/// A source's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Manifest {
        set: Digest,
        bytes: Vec<u8>,
    },
    Chunk {
        chunk: Digest,
        data: Vec<u8>,
    },
    Missing(Digest),
    /// Which of the set's `chunks` chunks the source holds verified, and which it is
    /// fetching right now (so other joiners do not fetch the same ones from members).
    HaveBits {
        set: Digest,
        chunks: u32,
        bits: Vec<u8>,
        coming: Vec<u8>,
    },
    Error(String),
}

/// Encodes one frame.
pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&(payload.len() as u32 + 1).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

/// Reads one complete frame of at most `max` bytes: `(kind, payload)`.
/// A clean end of stream before the first byte is [`FrameError::Closed`].
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<(u8, Vec<u8>), FrameError> {
    let (kind, len) = read_head(r, max).await?;
    Ok((kind, read_payload(r, len).await?))
}

/// Reads one response frame of at most `max` bytes. Same as [`read_frame`] then
/// [`Response::decode`], except that a chunk's data is read straight into its own buffer:
/// no zeroed buffer first, no move of megabytes to drop the digest in front of it.
pub async fn read_response<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Response, FrameError> {
    let (k, len) = read_head(r, max).await?;
    if k == kind::CHUNK && len >= 32 {
        let mut chunk = [0u8; 32];
        r.read_exact(&mut chunk).await?;
        let data = read_payload(r, len - 32).await?;
        return Ok(Response::Chunk {
            chunk: Digest(chunk),
            data,
        });
    }
    Response::decode(k, read_payload(r, len).await?)
}

/// A frame's length and kind: `(kind, payload length)`.
async fn read_head<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> Result<(u8, usize), FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 {
        return Err(FrameError::Empty);
    }
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut kind = [0u8; 1];
    r.read_exact(&mut kind).await?;
    Ok((kind[0], len - 1))
}

/// Exactly `len` bytes, read into spare capacity (never zeroed first).
async fn read_payload<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> Result<Vec<u8>, FrameError> {
    let mut buf = Vec::with_capacity(len);
    let got = r.take(len as u64).read_to_end(&mut buf).await?;
    if got < len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(buf)
}

fn digest_at(p: &[u8], what: &'static str) -> Result<Digest, FrameError> {
    p.get(..32)
        .and_then(|d| <[u8; 32]>::try_from(d).ok())
        .map(Digest)
        .ok_or_else(|| FrameError::Malformed {
            what,
            reason: format!("{} bytes, need a 32-byte digest", p.len()),
        })
}

fn exactly_digest(p: &[u8], what: &'static str) -> Result<Digest, FrameError> {
    if p.len() != 32 {
        return Err(FrameError::Malformed {
            what,
            reason: format!("{} bytes, expected 32", p.len()),
        });
    }
    digest_at(p, what)
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let (k, d) = match self {
            Request::GetManifest(d) => (kind::GET_MANIFEST, d),
            Request::GetChunk(d) => (kind::GET_CHUNK, d),
            Request::Have(d) => (kind::HAVE, d),
        };
        frame(k, &d.0)
    }

    pub fn decode(k: u8, p: &[u8]) -> Result<Request, FrameError> {
        Ok(match k {
            kind::GET_MANIFEST => Request::GetManifest(exactly_digest(p, "GetManifest")?),
            kind::GET_CHUNK => Request::GetChunk(exactly_digest(p, "GetChunk")?),
            kind::HAVE => Request::Have(exactly_digest(p, "Have")?),
            other => return Err(FrameError::UnexpectedKind(other)),
        })
    }
}

impl Response {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Response::Manifest { set, bytes } => {
                frame(kind::MANIFEST, &[&set.0[..], bytes].concat())
            }
            Response::Chunk { chunk, data } => frame(kind::CHUNK, &[&chunk.0[..], data].concat()),
            Response::Missing(d) => frame(kind::MISSING, &d.0),
            Response::HaveBits {
                set,
                chunks,
                bits,
                coming,
            } => frame(
                kind::HAVE_BITS,
                &[&set.0[..], &chunks.to_be_bytes(), bits, coming].concat(),
            ),
            Response::Error(m) => frame(kind::ERROR, m.as_bytes()),
        }
    }

    /// Decodes a response payload (taking ownership to avoid copying chunk data).
    pub fn decode(k: u8, mut p: Vec<u8>) -> Result<Response, FrameError> {
        Ok(match k {
            kind::MANIFEST => {
                let set = digest_at(&p, "Manifest")?;
                p.drain(..32);
                Response::Manifest { set, bytes: p }
            }
            kind::CHUNK => {
                let chunk = digest_at(&p, "Chunk")?;
                p.drain(..32);
                Response::Chunk { chunk, data: p }
            }
            kind::MISSING => Response::Missing(exactly_digest(&p, "Missing")?),
            kind::HAVE_BITS => {
                let set = digest_at(&p, "HaveBits")?;
                let n = p.get(32..36).ok_or(FrameError::Malformed {
                    what: "HaveBits",
                    reason: "no chunk count".into(),
                })?;
                let chunks = u32::from_be_bytes(n.try_into().expect("4 bytes"));
                let half = (chunks as usize).div_ceil(8);
                if p.len() != 36 + 2 * half {
                    return Err(FrameError::Malformed {
                        what: "HaveBits",
                        reason: format!("{} bitmap bytes for {chunks} chunks", p.len() - 36),
                    });
                }
                Response::HaveBits {
                    set,
                    chunks,
                    bits: p[36..36 + half].to_vec(),
                    coming: p[36 + half..].to_vec(),
                }
            }
            kind::ERROR => Response::Error(String::from_utf8_lossy(&p).into_owned()),
            other => return Err(FrameError::UnexpectedKind(other)),
        })
    }
}

/// The head of a chunk response carrying `len` bytes of data: the frame's length, its
/// kind and the chunk's digest. The data follows it on the wire.
pub fn chunk_head(chunk: &Digest, len: u64) -> [u8; 37] {
    let mut head = [0u8; 37];
    head[..4].copy_from_slice(&(len as u32 + 33).to_be_bytes());
    head[4] = kind::CHUNK;
    head[5..].copy_from_slice(&chunk.0);
    head
}

/// Writes a chunk response without first copying the data into a frame buffer.
pub async fn write_chunk<W: AsyncWrite + Unpin>(
    w: &mut W,
    chunk: &Digest,
    data: &[u8],
) -> std::io::Result<()> {
    w.write_all(&chunk_head(chunk, data.len() as u64)).await?;
    w.write_all(data).await?;
    w.flush().await
}

#[cfg(test)]
#[path = "protocol_fuzz.rs"]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(bytes: Vec<u8>, max: usize) -> Result<(u8, Vec<u8>), FrameError> {
        read_frame(&mut bytes.as_slice(), max).await
    }

    #[tokio::test]
    async fn requests_and_responses_round_trip_through_frames() {
        let d = Digest::of(b"x");
        for r in [
            Request::GetManifest(d),
            Request::GetChunk(d),
            Request::Have(d),
        ] {
            let (k, p) = round_trip(r.encode(), MAX_REQUEST_FRAME).await.unwrap();
            assert_eq!(Request::decode(k, &p).unwrap(), r);
        }
        let responses = [
            Response::Manifest {
                set: d,
                bytes: b"{}".to_vec(),
            },
            Response::Chunk {
                chunk: d,
                data: vec![7; 100],
            },
            Response::Missing(d),
            Response::HaveBits {
                set: d,
                chunks: 9,
                bits: vec![1, 1],
                coming: vec![2, 0],
            },
            Response::Error("no".into()),
        ];
        for r in responses {
            let (k, p) = round_trip(r.encode(), MAX_FRAME).await.unwrap();
            assert_eq!(Response::decode(k, p).unwrap(), r);
        }
        let mut buf = Vec::new();
        write_chunk(&mut buf, &d, &[1, 2, 3]).await.unwrap();
        assert_eq!(
            buf,
            Response::Chunk {
                chunk: d,
                data: vec![1, 2, 3]
            }
            .encode()
        );
    }

    #[tokio::test]
    async fn oversized_truncated_and_malformed_frames_are_refused() {
        let big = frame(kind::GET_CHUNK, &[0; 100]);
        assert!(matches!(
            round_trip(big, MAX_REQUEST_FRAME).await,
            Err(FrameError::TooLarge { len: 101, .. })
        ));
        let mut cut = Request::GetChunk(Digest::of(b"x")).encode();
        cut.truncate(10);
        assert!(matches!(round_trip(cut, 64).await, Err(FrameError::Io(_))));
        assert!(matches!(
            round_trip(Vec::new(), 64).await,
            Err(FrameError::Closed)
        ));
        assert!(Request::decode(kind::GET_CHUNK, &[0; 31]).is_err());
        assert!(Request::decode(0x7f, &[0; 32]).is_err());
    }
}
