//! What travels between simulated ranks: the root-info blob, and length-prefixed frames over
//! TCP read with a deadline and an abort flag (so a blocked collective can be stopped by
//! `HcclCommDestroy` and every wait ends).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::codes::HCCL_ROOT_INFO_BYTES;

/// Magic at the start of a simulator root info ("HCSIMRI1").
const ROOT_MAGIC: &[u8; 8] = b"HCSIMRI1";
/// Largest frame accepted (1 GiB): a corrupt length is an error, not an allocation.
const MAX_FRAME: usize = 1 << 30;
/// How often a blocked read looks at its abort flag.
const POLL: Duration = Duration::from_millis(20);

/// What a root info says: where rank 0 listens and which rendezvous this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootInfo {
    pub uid: u64,
    pub addr: SocketAddrV4,
}

impl RootInfo {
    /// The 4108-byte blob.
    pub fn encode(&self) -> [u8; HCCL_ROOT_INFO_BYTES] {
        let mut out = [0u8; HCCL_ROOT_INFO_BYTES];
        out[..8].copy_from_slice(ROOT_MAGIC);
        out[8..16].copy_from_slice(&self.uid.to_le_bytes());
        out[16..20].copy_from_slice(&self.addr.ip().octets());
        out[20..22].copy_from_slice(&self.addr.port().to_le_bytes());
        out
    }

    /// Parses a blob; `None` when it is not one `HcclGetRootInfo` made.
    pub fn decode(blob: &[u8]) -> Option<Self> {
        if blob.len() != HCCL_ROOT_INFO_BYTES || &blob[..8] != ROOT_MAGIC {
            return None;
        }
        let ip: [u8; 4] = blob[16..20].try_into().ok()?;
        Some(Self {
            uid: u64::from_le_bytes(blob[8..16].try_into().ok()?),
            addr: SocketAddrV4::new(
                Ipv4Addr::from(ip),
                u16::from_le_bytes(blob[20..22].try_into().ok()?),
            ),
        })
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The deadline passed.
    Timeout,
    /// The abort flag was raised.
    Aborted,
    /// The peer closed the connection or it broke.
    Closed,
}

/// Writes one frame (the socket's write timeout bounds it).
pub fn send(stream: &mut TcpStream, body: &[u8]) -> Result<(), WireError> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame).map_err(|_| WireError::Closed)
}

fn read_exact(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
    abort: &AtomicBool,
) -> Result<(), WireError> {
    stream
        .set_read_timeout(Some(POLL))
        .map_err(|_| WireError::Closed)?;
    let mut got = 0;
    while got < buf.len() {
        if abort.load(Ordering::SeqCst) {
            return Err(WireError::Aborted);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(WireError::Timeout);
        }
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(WireError::Closed),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(WireError::Closed),
        }
    }
    Ok(())
}

/// Reads one frame before `deadline` (`None`: no deadline) unless `abort` is raised.
pub fn recv(
    stream: &mut TcpStream,
    deadline: Option<Instant>,
    abort: &AtomicBool,
) -> Result<Vec<u8>, WireError> {
    let mut len = [0u8; 4];
    read_exact(stream, &mut len, deadline, abort)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(WireError::Closed);
    }
    let mut body = vec![0u8; len];
    read_exact(stream, &mut body, deadline, abort)?;
    Ok(body)
}

/// A little-endian reader over a frame body.
pub struct Cursor<'a>(pub &'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    pub fn i32(&mut self) -> Option<i32> {
        self.take::<4>().map(i32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    pub fn rest(self) -> Vec<u8> {
        self.0.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_info_round_trips_and_foreign_blobs_are_refused() {
        let ri = RootInfo {
            uid: 42,
            addr: "10.0.0.7:60001".parse().unwrap(),
        };
        assert_eq!(RootInfo::decode(&ri.encode()), Some(ri));
        assert_eq!(RootInfo::decode(&[0u8; HCCL_ROOT_INFO_BYTES]), None);
        assert_eq!(RootInfo::decode(&ri.encode()[..100]), None);
    }
}
