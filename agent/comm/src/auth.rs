//! Challenge–response authentication of TCP links with the group secret (pure: messages and
//! MACs; the socket side is in `transport::handshake`).
//!
//! ```text
//! connector -> acceptor  Hello     {purpose, endpoint id, listen addr, nonce_c}   (header: epoch_c)
//! acceptor  -> connector Challenge {endpoint id, nonce_a, mac_a}                  (header: epoch_a)
//! connector -> acceptor  Response  {mac_c}
//! acceptor  -> connector Accept | Reject {code, message}
//! ```
//! `mac_x = HMAC-SHA256(secret, label_x | transcript)` where the transcript binds both nonces,
//! both endpoint ids, both epochs and the purpose; the labels differ per direction so a MAC
//! cannot be reflected. The secret is never sent. Each side proves itself before the other
//! accepts: the connector checks `mac_a` before answering, the acceptor checks `mac_c`, and only
//! then compares epochs (an older epoch than the acceptor's is refused as stale).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::frame::{Cursor, FrameError, Writer};

pub const NONCE_LEN: usize = 32;
pub const MAC_LEN: usize = 32;

/// Why a connection is being opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A data link between two ranks' endpoints.
    Peer = 1,
    /// A rank registering with the rendezvous root.
    Rendezvous = 2,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub purpose: Purpose,
    pub endpoint: u64,
    pub listen: String,
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        Writer::default()
            .u8(self.purpose as u8)
            .u64(self.endpoint)
            .string(&self.listen)
            .bytes(&self.nonce)
            .buf
    }

    pub fn decode(b: &[u8]) -> Result<Hello, FrameError> {
        let mut c = Cursor::new(b);
        let purpose = match c.u8("purpose")? {
            1 => Purpose::Peer,
            2 => Purpose::Rendezvous,
            v => {
                return Err(FrameError::Invalid {
                    field: "purpose",
                    reason: format!("unknown purpose {v}"),
                });
            }
        };
        let endpoint = c.u64("endpoint id")?;
        let listen = c.string("listen address")?;
        let nonce = c.array("nonce")?;
        c.finish()?;
        Ok(Hello {
            purpose,
            endpoint,
            listen,
            nonce,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub endpoint: u64,
    pub nonce: [u8; NONCE_LEN],
    pub mac: [u8; MAC_LEN],
}

impl Challenge {
    pub fn encode(&self) -> Vec<u8> {
        Writer::default()
            .u64(self.endpoint)
            .bytes(&self.nonce)
            .bytes(&self.mac)
            .buf
    }

    pub fn decode(b: &[u8]) -> Result<Challenge, FrameError> {
        let mut c = Cursor::new(b);
        let out = Challenge {
            endpoint: c.u64("endpoint id")?,
            nonce: c.array("nonce")?,
            mac: c.array("mac")?,
        };
        c.finish()?;
        Ok(out)
    }
}

/// Reason codes of a `Reject` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectCode {
    Auth = 1,
    StaleEpoch = 2,
    Protocol = 3,
    Rendezvous = 4,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub code: RejectCode,
    pub message: String,
}

impl Reject {
    pub fn encode(&self) -> Vec<u8> {
        Writer::default()
            .u8(self.code as u8)
            .string(&self.message)
            .buf
    }

    pub fn decode(b: &[u8]) -> Result<Reject, FrameError> {
        let mut c = Cursor::new(b);
        let code = match c.u8("reject code")? {
            1 => RejectCode::Auth,
            2 => RejectCode::StaleEpoch,
            3 => RejectCode::Protocol,
            4 => RejectCode::Rendezvous,
            v => {
                return Err(FrameError::Invalid {
                    field: "reject code",
                    reason: format!("unknown code {v}"),
                });
            }
        };
        let message = c.string("message")?;
        c.finish()?;
        Ok(Reject { code, message })
    }
}

/// The facts both MACs bind.
#[derive(Debug, Clone, Copy)]
pub struct Transcript<'a> {
    pub purpose: Purpose,
    pub nonce_c: &'a [u8; NONCE_LEN],
    pub nonce_a: &'a [u8; NONCE_LEN],
    pub endpoint_c: u64,
    pub endpoint_a: u64,
    pub epoch_c: u64,
    pub epoch_a: u64,
}

/// Which side computes the MAC (distinct labels defeat reflection).
#[derive(Debug, Clone, Copy)]
pub enum Side {
    Acceptor,
    Connector,
}

pub fn mac(secret: &[u8], side: Side, t: &Transcript<'_>) -> [u8; MAC_LEN] {
    let mut m =
        <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(match side {
        Side::Acceptor => b"hcomm-v1 acceptor ",
        Side::Connector => b"hcomm-v1 connector",
    });
    m.update(&[t.purpose as u8]);
    m.update(t.nonce_c);
    m.update(t.nonce_a);
    for v in [t.endpoint_c, t.endpoint_a, t.epoch_c, t.epoch_a] {
        m.update(&v.to_le_bytes());
    }
    m.finalize().into_bytes().into()
}

/// Constant-time check of a received MAC.
pub fn verify(secret: &[u8], side: Side, t: &Transcript<'_>, got: &[u8; MAC_LEN]) -> bool {
    let want = mac(secret, side, t);
    want.iter().zip(got).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Fresh random bytes (nonces, ids).
pub fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // getrandom fails only without any OS entropy source; a fixed nonce would silently weaken
    // authentication, so fall back to hashing time and address entropy rather than zeros.
    if getrandom::fill(&mut b).is_err() {
        let seed = format!("{:?}{:p}", std::time::SystemTime::now(), &b);
        let h = Sha256::digest(seed.as_bytes());
        for (i, x) in b.iter_mut().enumerate() {
            *x = h[i % h.len()];
        }
    }
    b
}

pub fn random_u64() -> u64 {
    u64::from_le_bytes(random())
}

/// Stable 64-bit hash of some labelled parts, for deriving communicator ids.
pub fn hash64(parts: &[&[u8]]) -> u64 {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript<'a>(nc: &'a [u8; 32], na: &'a [u8; 32]) -> Transcript<'a> {
        Transcript {
            purpose: Purpose::Peer,
            nonce_c: nc,
            nonce_a: na,
            endpoint_c: 1,
            endpoint_a: 2,
            epoch_c: 3,
            epoch_a: 3,
        }
    }

    #[test]
    fn the_right_secret_verifies_and_a_wrong_one_does_not() {
        let (nc, na) = (random::<32>(), random::<32>());
        let t = transcript(&nc, &na);
        let m = mac(b"group-secret", Side::Connector, &t);
        assert!(verify(b"group-secret", Side::Connector, &t, &m));
        assert!(!verify(b"other-secret", Side::Connector, &t, &m));
    }

    #[test]
    fn a_mac_cannot_be_reflected_to_the_other_side() {
        let (nc, na) = (random::<32>(), random::<32>());
        let t = transcript(&nc, &na);
        let m = mac(b"s", Side::Acceptor, &t);
        assert!(!verify(b"s", Side::Connector, &t, &m));
    }

    #[test]
    fn the_mac_binds_the_epochs() {
        let (nc, na) = (random::<32>(), random::<32>());
        let t = transcript(&nc, &na);
        let m = mac(b"s", Side::Connector, &t);
        let t2 = Transcript { epoch_c: 2, ..t };
        assert!(!verify(b"s", Side::Connector, &t2, &m));
    }

    #[test]
    fn handshake_messages_round_trip() {
        let h = Hello {
            purpose: Purpose::Rendezvous,
            endpoint: 9,
            listen: "127.0.0.1:5".into(),
            nonce: random(),
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let c = Challenge {
            endpoint: 1,
            nonce: random(),
            mac: random(),
        };
        assert_eq!(Challenge::decode(&c.encode()).unwrap(), c);
        let r = Reject {
            code: RejectCode::StaleEpoch,
            message: "old".into(),
        };
        assert_eq!(Reject::decode(&r.encode()).unwrap(), r);
    }
}
