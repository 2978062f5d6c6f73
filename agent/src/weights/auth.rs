//! Group-secret authentication of a weights connection: HMAC-SHA256 challenge–response in
//! both directions; the secret itself never crosses the wire.
//!
//! ```text
//! server -> client  Challenge {magic, nonce_s}
//! client -> server  Proof     {nonce_c, mac_c = HMAC(secret, "hcomm-weights client" | nonce_s | nonce_c)}
//! server -> client  Accept    {mac_s = HMAC(secret, "hcomm-weights server" | nonce_s | nonce_c)}
//!                 | Reject    {message}   (then the server closes)
//! ```
//! Fresh nonces on both sides defeat replay; distinct labels defeat reflection. The server
//! speaks first, so a client that connected to something else fails fast on the magic.
//! Handshake frames are capped at [`MAX_HANDSHAKE_FRAME`] bytes, so an unauthenticated peer
//! cannot make either side allocate much. Deadlines are the caller's (`timeout` around
//! these calls).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::error::WeightsError;
use super::protocol::{FrameError, frame, read_frame};

const MAGIC: &[u8; 16] = b"hcomm-weights/1\0";
const NONCE_LEN: usize = 32;
const MAC_LEN: usize = 32;
/// Largest handshake frame either side accepts.
pub const MAX_HANDSHAKE_FRAME: usize = 256;

const CHALLENGE: u8 = 0x10;
const PROOF: u8 = 0x11;
const ACCEPT: u8 = 0x12;
const REJECT: u8 = 0x13;

/// The group's shared secret. Its `Debug` form never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct GroupSecret(Arc<Vec<u8>>);

impl GroupSecret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> GroupSecret {
        GroupSecret(Arc::new(bytes.into()))
    }
}

impl fmt::Debug for GroupSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupSecret(<{} bytes redacted>)", self.0.len())
    }
}

fn mac(secret: &GroupSecret, label: &[u8], nonce_s: &[u8], nonce_c: &[u8]) -> [u8; MAC_LEN] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes any key");
    m.update(label);
    m.update(nonce_s);
    m.update(nonce_c);
    m.finalize().into_bytes().into()
}

fn verify(secret: &GroupSecret, label: &[u8], nonce_s: &[u8], nonce_c: &[u8], got: &[u8]) -> bool {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes any key");
    m.update(label);
    m.update(nonce_s);
    m.update(nonce_c);
    m.verify_slice(got).is_ok() // constant time
}

const CLIENT_LABEL: &[u8] = b"hcomm-weights client";
const SERVER_LABEL: &[u8] = b"hcomm-weights server";

fn auth(peer: SocketAddr, reason: impl Into<String>) -> WeightsError {
    WeightsError::Auth {
        peer,
        reason: reason.into(),
    }
}

fn framing(peer: SocketAddr, e: FrameError) -> WeightsError {
    match e {
        FrameError::Io(e) => WeightsError::io(format!("handshake with {peer}"), None, e),
        e => auth(peer, format!("not an hcomm weights peer: {e}")),
    }
}

/// Server side: proves nothing until the client has proven it knows the secret.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &GroupSecret,
    peer: SocketAddr,
) -> Result<(), WeightsError> {
    let nonce_s: [u8; NONCE_LEN] = rand::random();
    let io = |e| WeightsError::io(format!("handshake with {peer}"), None, e);
    s.write_all(&frame(CHALLENGE, &[&MAGIC[..], &nonce_s].concat()))
        .await
        .map_err(io)?;
    let (k, p) = read_frame(s, MAX_HANDSHAKE_FRAME)
        .await
        .map_err(|e| framing(peer, e))?;
    if k != PROOF || p.len() != NONCE_LEN + MAC_LEN {
        return Err(auth(peer, "malformed proof"));
    }
    let (nonce_c, mac_c) = p.split_at(NONCE_LEN);
    if !verify(secret, CLIENT_LABEL, &nonce_s, nonce_c, mac_c) {
        let _ = s
            .write_all(&frame(REJECT, b"authentication failed: wrong group secret"))
            .await;
        return Err(auth(peer, "client proof does not match the group secret"));
    }
    let mac_s = mac(secret, SERVER_LABEL, &nonce_s, nonce_c);
    s.write_all(&frame(ACCEPT, &mac_s)).await.map_err(io)?;
    Ok(())
}

/// Client side: answers the challenge and checks the server's proof.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &GroupSecret,
    peer: SocketAddr,
) -> Result<(), WeightsError> {
    let io = |e| WeightsError::io(format!("handshake with {peer}"), None, e);
    let (k, p) = read_frame(s, MAX_HANDSHAKE_FRAME)
        .await
        .map_err(|e| framing(peer, e))?;
    if k != CHALLENGE || p.len() != MAGIC.len() + NONCE_LEN || &p[..MAGIC.len()] != MAGIC {
        return Err(auth(peer, "not an hcomm weights server (bad challenge)"));
    }
    let nonce_s = &p[MAGIC.len()..];
    let nonce_c: [u8; NONCE_LEN] = rand::random();
    let mac_c = mac(secret, CLIENT_LABEL, nonce_s, &nonce_c);
    s.write_all(&frame(PROOF, &[&nonce_c[..], &mac_c].concat()))
        .await
        .map_err(io)?;
    let (k, p) = read_frame(s, MAX_HANDSHAKE_FRAME)
        .await
        .map_err(|e| match e {
            FrameError::Closed => auth(peer, "server closed the connection during authentication"),
            e => framing(peer, e),
        })?;
    match k {
        ACCEPT if verify(secret, SERVER_LABEL, nonce_s, &nonce_c, &p) => Ok(()),
        ACCEPT => Err(auth(peer, "server proof does not match the group secret")),
        REJECT => Err(auth(
            peer,
            format!("refused by server: {}", String::from_utf8_lossy(&p)),
        )),
        other => Err(auth(
            peer,
            format!("unexpected handshake message {other:#04x}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[tokio::test]
    async fn the_same_secret_authenticates_both_sides() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let s = GroupSecret::new("k");
        let (x, y) = tokio::join!(accept(&mut a, &s, addr()), connect(&mut b, &s, addr()));
        x.unwrap();
        y.unwrap();
    }

    #[tokio::test]
    async fn a_wrong_secret_is_refused_on_both_sides() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let (right, wrong) = (GroupSecret::new("k"), GroupSecret::new("other"));
        let (x, y) = tokio::join!(
            accept(&mut a, &right, addr()),
            connect(&mut b, &wrong, addr())
        );
        assert_eq!(x.unwrap_err().category(), "auth");
        let e = y.unwrap_err();
        assert_eq!(e.category(), "auth");
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(!format!("{:?}", GroupSecret::new("k")).contains('k'));
    }
}
