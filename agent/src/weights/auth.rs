//! Group-secret authentication of a weights connection: HMAC-SHA256 challenge–response in
//! both directions; the secret itself never crosses the wire. The client names the group
//! it syncs for; the server asks its [`Authority`] for that group's secret and what the
//! group may fetch ([`Grant`]), so a member of one group proves nothing about another.
//!
//! ```text
//! server -> client  Challenge {magic, nonce_s}
//! client -> server  Proof     {nonce_c, mac_c = HMAC(secret, "hcomm-weights client" | nonce_s | nonce_c | group), group}
//! server -> client  Accept    {mac_s = HMAC(secret, "hcomm-weights server" | nonce_s | nonce_c | group)}
//!                 | Reject    {message}   (then the server closes)
//! ```
//! `group` is `namespace/name/uid`: the UID binds the proof to one incarnation of the group
//! (a group deleted and re-created has a new UID and a new secret). Fresh nonces on both
//! sides defeat replay; distinct labels defeat reflection. The server speaks first, so a
//! client that connected to something else fails fast on the magic. Handshake frames are
//! capped at [`MAX_HANDSHAKE_FRAME`] bytes, so an unauthenticated peer cannot make either
//! side allocate much. Deadlines are the caller's (`timeout` around these calls; the
//! server's authority lookup runs inside it).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::digest::Digest;
use super::error::WeightsError;
use super::protocol::{FrameError, frame, read_frame};

const MAGIC: &[u8; 16] = b"hcomm-weights/2\0";
const NONCE_LEN: usize = 32;
const MAC_LEN: usize = 32;
/// Largest handshake frame either side accepts: a proof with the longest group identity
/// (namespace 63, name 253, UID 36 bytes, two separators) fits.
pub const MAX_HANDSHAKE_FRAME: usize = 512;
/// Longest group identity on the wire.
const MAX_GROUP_ID: usize = 63 + 253 + 36 + 2;

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

    /// The bytes (for the comm engine, which keys its own handshake with them).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for GroupSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupSecret(<{} bytes redacted>)", self.0.len())
    }
}

/// The group a weights client syncs for: namespace, name and UID of its `HcommGroup`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl GroupId {
    pub fn new(namespace: &str, name: &str, uid: &str) -> GroupId {
        GroupId {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        }
    }

    /// Whether no group is named (the default: only a [`SharedSecret`] server accepts it).
    pub fn is_anonymous(&self) -> bool {
        self.namespace.is_empty() && self.name.is_empty() && self.uid.is_empty()
    }

    /// `namespace/name/uid` (none of them may contain `/`: Kubernetes names cannot).
    fn encode(&self) -> Vec<u8> {
        format!("{}/{}/{}", self.namespace, self.name, self.uid).into_bytes()
    }

    fn decode(b: &[u8]) -> Option<GroupId> {
        if b.len() > MAX_GROUP_ID {
            return None;
        }
        let s = std::str::from_utf8(b).ok()?;
        let mut it = s.split('/');
        let (ns, name, uid) = (it.next()?, it.next()?, it.next()?);
        let parts = [ns, name, uid];
        // All three, or none: the anonymous client of a `SharedSecret` server (tests).
        let whole = parts.iter().all(|p| !p.is_empty()) || parts.iter().all(|p| p.is_empty());
        (it.next().is_none() && whole).then(|| GroupId::new(ns, name, uid))
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// What a server grants a client that proved it knows its group's secret.
#[derive(Debug, Clone)]
pub struct Grant {
    pub group: GroupId,
    pub secret: GroupSecret,
    /// The weights sets the group may fetch (its `spec.weights.digest`); None: any set
    /// (a [`SharedSecret`] server: tests, benchmarks).
    pub sets: Option<Vec<Digest>>,
}

impl Grant {
    /// Whether the group may fetch `set`.
    pub fn allows(&self, set: &Digest) -> bool {
        self.sets.as_ref().is_none_or(|s| s.contains(set))
    }
}

/// Looks up a group's secret and what it may fetch; `Err(reason)` refuses the group
/// (unknown, re-created under a new UID, no secret, ...).
pub trait Authority: Send + Sync + fmt::Debug {
    fn grant<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<Grant, String>>;
}

/// One secret for every group and every set: a store-wide secret, for tests and
/// benchmarks. The agent's chunk server uses the groups' own secrets instead.
#[derive(Debug, Clone)]
pub struct SharedSecret(pub GroupSecret);

impl Authority for SharedSecret {
    fn grant<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<Grant, String>> {
        Box::pin(async move {
            Ok(Grant {
                group: group.clone(),
                secret: self.0.clone(),
                sets: None,
            })
        })
    }
}

fn hmac_of(secret: &GroupSecret, label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes any key");
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m
}

fn mac(secret: &GroupSecret, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    hmac_of(secret, label, parts).finalize().into_bytes().into()
}

fn verify(secret: &GroupSecret, label: &[u8], parts: &[&[u8]], got: &[u8]) -> bool {
    hmac_of(secret, label, parts).verify_slice(got).is_ok() // constant time
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

/// Server side: proves nothing until the client has proven it knows the secret of the
/// group it names; returns what that group may fetch.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    authority: &dyn Authority,
    peer: SocketAddr,
) -> Result<Grant, WeightsError> {
    let nonce_s: [u8; NONCE_LEN] = rand::random();
    let io = |e| WeightsError::io(format!("handshake with {peer}"), None, e);
    s.write_all(&frame(CHALLENGE, &[&MAGIC[..], &nonce_s].concat()))
        .await
        .map_err(io)?;
    let (k, p) = read_frame(s, MAX_HANDSHAKE_FRAME)
        .await
        .map_err(|e| framing(peer, e))?;
    if k != PROOF || p.len() <= NONCE_LEN + MAC_LEN {
        return Err(auth(peer, "malformed proof"));
    }
    let (nonce_c, rest) = p.split_at(NONCE_LEN);
    let (mac_c, group_bytes) = rest.split_at(MAC_LEN);
    let Some(group) = GroupId::decode(group_bytes) else {
        return Err(auth(peer, "malformed proof: no well-formed group named"));
    };
    let grant = match authority.grant(&group).await {
        Ok(g) => g,
        Err(reason) => {
            let _ = s
                .write_all(&frame(
                    REJECT,
                    format!("authentication failed: group {group} refused").as_bytes(),
                ))
                .await;
            return Err(auth(peer, format!("group {group} refused: {reason}")));
        }
    };
    let parts: [&[u8]; 3] = [&nonce_s, nonce_c, group_bytes];
    if !verify(&grant.secret, CLIENT_LABEL, &parts, mac_c) {
        let _ = s
            .write_all(&frame(REJECT, b"authentication failed: wrong group secret"))
            .await;
        return Err(auth(
            peer,
            format!("client proof does not match the secret of group {group}"),
        ));
    }
    let mac_s = mac(&grant.secret, SERVER_LABEL, &parts);
    s.write_all(&frame(ACCEPT, &mac_s)).await.map_err(io)?;
    Ok(grant)
}

/// Client side: names its group, answers the challenge with the group's secret and checks
/// the server's proof.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &GroupSecret,
    group: &GroupId,
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
    let group_bytes = group.encode();
    let parts: [&[u8]; 3] = [nonce_s, &nonce_c, &group_bytes];
    let mac_c = mac(secret, CLIENT_LABEL, &parts);
    s.write_all(&frame(
        PROOF,
        &[&nonce_c[..], &mac_c, &group_bytes].concat(),
    ))
    .await
    .map_err(io)?;
    let (k, p) = read_frame(s, MAX_HANDSHAKE_FRAME)
        .await
        .map_err(|e| match e {
            FrameError::Closed => auth(peer, "server closed the connection during authentication"),
            e => framing(peer, e),
        })?;
    match k {
        ACCEPT if verify(secret, SERVER_LABEL, &parts, &p) => Ok(()),
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
#[path = "auth_fuzz.rs"]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    fn g(name: &str) -> GroupId {
        GroupId::new("ns", name, &format!("uid-{name}"))
    }

    /// Groups "a" (secret "ka", set A) and "b" (secret "kb", set B).
    #[derive(Debug)]
    struct TwoGroups;

    impl Authority for TwoGroups {
        fn grant<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<Grant, String>> {
            Box::pin(async move {
                let (secret, set) = match (group.name.as_str(), group.uid.as_str()) {
                    ("a", "uid-a") => ("ka", b"A"),
                    ("b", "uid-b") => ("kb", b"B"),
                    _ => return Err("no such group".to_owned()),
                };
                Ok(Grant {
                    group: group.clone(),
                    secret: GroupSecret::new(secret),
                    sets: Some(vec![Digest::of(set)]),
                })
            })
        }
    }

    #[tokio::test]
    async fn the_same_secret_authenticates_both_sides() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let s = GroupSecret::new("k");
        let (shared, id) = (SharedSecret(s.clone()), g("a"));
        let (x, y) = tokio::join!(
            accept(&mut a, &shared, addr()),
            connect(&mut b, &s, &id, addr())
        );
        assert_eq!(x.unwrap().group, g("a"));
        y.unwrap();
    }

    #[tokio::test]
    async fn a_wrong_secret_is_refused_on_both_sides() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let (right, wrong) = (GroupSecret::new("k"), GroupSecret::new("other"));
        let (shared, id) = (SharedSecret(right), g("a"));
        let (x, y) = tokio::join!(
            accept(&mut a, &shared, addr()),
            connect(&mut b, &wrong, &id, addr())
        );
        assert_eq!(x.unwrap_err().category(), "auth");
        let e = y.unwrap_err();
        assert_eq!(e.category(), "auth");
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(!format!("{:?}", GroupSecret::new("k")).contains('k'));
    }

    #[tokio::test]
    async fn each_group_proves_its_own_secret_and_is_granted_its_own_set() {
        for (name, secret, ok) in [("a", "ka", true), ("b", "kb", true), ("a", "kb", false)] {
            let (mut x, mut y) = tokio::io::duplex(1024);
            let (key, id) = (GroupSecret::new(secret), g(name));
            let (srv, cli) = tokio::join!(
                accept(&mut x, &TwoGroups, addr()),
                connect(&mut y, &key, &id, addr())
            );
            assert_eq!(srv.is_ok(), ok, "{name} with {secret}");
            assert_eq!(cli.is_ok(), ok, "{name} with {secret}");
            if let Ok(grant) = srv {
                let own = Digest::of(name.to_uppercase().as_bytes());
                assert!(grant.allows(&own));
                assert!(!grant.allows(&Digest::of(b"A")) || name == "a");
                assert!(!grant.allows(&Digest::of(b"B")) || name == "b");
            }
        }
    }

    #[tokio::test]
    async fn an_unknown_group_or_a_stale_uid_is_refused_and_named() {
        for group in [
            GroupId::new("ns", "c", "uid-c"),
            GroupId::new("ns", "a", "old"),
        ] {
            let (mut x, mut y) = tokio::io::duplex(1024);
            let key = GroupSecret::new("ka");
            let (srv, cli) = tokio::join!(
                accept(&mut x, &TwoGroups, addr()),
                connect(&mut y, &key, &group, addr())
            );
            let e = srv.unwrap_err();
            assert!(e.to_string().contains(&group.to_string()), "{e}");
            let e = cli.unwrap_err();
            assert!(e.to_string().contains("refused"), "{e}");
        }
    }

    #[test]
    fn group_ids_round_trip_and_malformed_ones_are_refused() {
        let id = GroupId::new("team-a", "decode", "0b6e1c2a-7f3d-4a51-9d7e-2b1f0c9e8a77");
        assert_eq!(GroupId::decode(&id.encode()), Some(id));
        let anonymous = GroupId::default();
        assert_eq!(GroupId::decode(&anonymous.encode()), Some(anonymous));
        for bad in [&b""[..], b"a/b", b"a/b/c/d", b"/b/c", b"a//c", b"\xff/b/c"] {
            assert_eq!(GroupId::decode(bad), None, "{bad:?}");
        }
        assert_eq!(GroupId::decode(&vec![b'a'; MAX_GROUP_ID + 1]), None);
    }
}
