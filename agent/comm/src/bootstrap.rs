//! Bootstrap data: the opaque [`RootInfo`] handed out of band (like `ncclUniqueId` /
//! `HcclRootInfo`) and the rendezvous messages ranks exchange with the root.
//!
//! The root info names the rendezvous address (an [`crate::tcp::Endpoint`]'s listener: the
//! endpoint that created it serves the rendezvous) and a random 16-byte session id. Every rank
//! connects there, authenticates with the group secret, sends [`Register`] (rank, world size,
//! its endpoint id and listen address) and receives the full [`Table`] once all ranks of that
//! (session id, epoch) have registered. Pure codecs here; the I/O is in `transport`.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use crate::frame::{Cursor, FrameError, Writer};

/// Opaque bootstrap handle; serialisable as a string (`to_string` / `parse`) or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RootInfo {
    pub addr: SocketAddr,
    pub id: [u8; 16],
}

const PREFIX: &str = "hcomm-root-v1";

impl RootInfo {
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_string().into_bytes()
    }

    pub fn from_bytes(b: &[u8]) -> Result<RootInfo, FrameError> {
        std::str::from_utf8(b)
            .map_err(|_| FrameError::Invalid {
                field: "root info",
                reason: "not UTF-8".into(),
            })?
            .parse()
    }

    /// Session id as hex, for logs.
    pub fn id_hex(&self) -> String {
        self.id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for RootInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}@{}@{}", self.id_hex(), self.addr)
    }
}

impl FromStr for RootInfo {
    type Err = FrameError;
    fn from_str(s: &str) -> Result<RootInfo, FrameError> {
        let bad = |reason: &str| FrameError::Invalid {
            field: "root info",
            reason: format!("{reason} in {s:?} (expected {PREFIX}@<32 hex>@<ip:port>)"),
        };
        let mut parts = s.trim().splitn(3, '@');
        if parts.next() != Some(PREFIX) {
            return Err(bad("wrong prefix"));
        }
        let hex = parts.next().ok_or_else(|| bad("missing id"))?;
        let addr = parts.next().ok_or_else(|| bad("missing address"))?;
        if hex.len() != 32 || !hex.is_ascii() {
            return Err(bad("id is not 32 hex digits"));
        }
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad("bad hex"))?;
        }
        let addr = addr.parse().map_err(|_| bad("bad address"))?;
        Ok(RootInfo { addr, id })
    }
}

/// A rank's registration with the root (header epoch = the communicator's epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Register {
    pub session: [u8; 16],
    pub world: u32,
    pub rank: u32,
    pub endpoint: u64,
    pub listen: String,
}

impl Register {
    pub fn encode(&self) -> Vec<u8> {
        Writer::default()
            .bytes(&self.session)
            .u32(self.world)
            .u32(self.rank)
            .u64(self.endpoint)
            .string(&self.listen)
            .buf
    }

    pub fn decode(b: &[u8]) -> Result<Register, FrameError> {
        let mut c = Cursor::new(b);
        let out = Register {
            session: c.array("session id")?,
            world: c.u32("world size")?,
            rank: c.u32("rank")?,
            endpoint: c.u64("endpoint id")?,
            listen: c.string("listen address")?,
        };
        c.finish()?;
        Ok(out)
    }
}

/// One rank's entry in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerEntry {
    pub endpoint: u64,
    pub addr: SocketAddr,
}

/// The rank table the root sends back, indexed by rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub peers: Vec<PeerEntry>,
}

/// Hard cap on world size accepted from the wire.
pub const MAX_WORLD: usize = 1 << 16;

impl Table {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default().u32(self.peers.len() as u32);
        for p in &self.peers {
            w = w.u64(p.endpoint).string(&p.addr.to_string());
        }
        w.buf
    }

    pub fn decode(b: &[u8]) -> Result<Table, FrameError> {
        let mut c = Cursor::new(b);
        let n = c.u32("peer count")? as usize;
        if n > MAX_WORLD {
            return Err(FrameError::Invalid {
                field: "peer count",
                reason: format!("{n} exceeds {MAX_WORLD}"),
            });
        }
        let mut peers = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let endpoint = c.u64("endpoint id")?;
            let addr = c
                .string("peer address")?
                .parse()
                .map_err(|_| FrameError::Invalid {
                    field: "peer address",
                    reason: "not ip:port".into(),
                })?;
            peers.push(PeerEntry { endpoint, addr });
        }
        c.finish()?;
        Ok(Table { peers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_info_round_trips_as_string_and_bytes() {
        let r = RootInfo {
            addr: "[::1]:4000".parse().unwrap(),
            id: *b"0123456789abcdef",
        };
        assert_eq!(r.to_string().parse::<RootInfo>().unwrap(), r);
        assert_eq!(RootInfo::from_bytes(&r.to_bytes()).unwrap(), r);
        assert!("hcomm-root-v1@zz@1.2.3.4:5".parse::<RootInfo>().is_err());
        assert!("garbage".parse::<RootInfo>().is_err());
    }

    #[test]
    fn register_and_table_round_trip() {
        let r = Register {
            session: [7; 16],
            world: 4,
            rank: 2,
            endpoint: 99,
            listen: "127.0.0.1:1".into(),
        };
        assert_eq!(Register::decode(&r.encode()).unwrap(), r);
        let t = Table {
            peers: vec![PeerEntry {
                endpoint: 1,
                addr: "127.0.0.1:9".parse().unwrap(),
            }],
        };
        assert_eq!(Table::decode(&t.encode()).unwrap(), t);
    }
}
