//! Fuzzing the weights handshake as the chunk protocol is fuzzed (`protocol_fuzz.rs`):
//! a fixed seed and a bounded number of rounds, so a failure replays exactly. Anyone who
//! reaches a node's chunk port speaks to [`accept`] before proving anything, and a joiner
//! runs [`connect`] against whatever answers at a source's address: random bytes, a
//! mutated genuine proof or a mutated challenge must end in an error, promptly, never a
//! panic and never an accepted handshake.

use std::time::Duration;

use hcomm_comm::testutil::XorShift as Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

use super::*;

const ROUNDS: usize = 600;
/// Each side of a round is bounded: the peer under test closes its end, so a read that
/// waited longer would be a hang.
const ROUND_DEADLINE: Duration = Duration::from_secs(5);

fn peer() -> SocketAddr {
    "127.0.0.1:1".parse().unwrap()
}

/// Knows group `ns/a` (UID `uid-a`) only.
#[derive(Debug)]
struct OneGroup;

impl Authority for OneGroup {
    fn grant<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<Grant, String>> {
        Box::pin(async move {
            if *group != GroupId::new("ns", "a", "uid-a") {
                return Err("no such group".to_owned());
            }
            Ok(Grant {
                group: group.clone(),
                secret: GroupSecret::new("ka"),
                sets: None,
            })
        })
    }
}

/// `bytes` with one to three bytes changed (never equal to `bytes`).
fn mutate(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    while out == bytes {
        for _ in 0..=rng.below(3) {
            let i = rng.below(out.len());
            out[i] ^= (rng.next_u64() as u8) | 1;
        }
    }
    out
}

#[test]
fn group_id_decode_never_panics_and_accepts_only_what_it_would_encode() {
    let mut rng = Rng::new(0x6a09_e667);
    let alphabet = b"ab-/.0\xff";
    for _ in 0..20_000 {
        let b: Vec<u8> = if rng.below(2) == 0 {
            rng.bytes(MAX_GROUP_ID + 8)
        } else {
            (0..rng.below(24))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect()
        };
        if let Some(id) = GroupId::decode(&b) {
            assert_eq!(id.encode(), b, "{b:?} decoded to {id:?}");
        }
    }
}

/// Random bytes or a mutated genuine proof from the client: [`accept`] errs, within the
/// deadline.
#[tokio::test]
async fn the_server_refuses_random_and_mutated_proofs() {
    let mut rng = Rng::new(0xbb67_ae85);
    for round in 0..ROUNDS {
        let (mut server_end, mut client_end) = duplex(4096);
        let genuine = rng.below(2) == 0;
        let noise = rng.bytes(600);
        let seed = rng.next_u64();
        let client = async move {
            let mut rng = Rng::new(seed);
            let Ok((_, challenge)) = read_frame(&mut client_end, MAX_HANDSHAKE_FRAME).await else {
                return;
            };
            let sent = if genuine && challenge.len() == MAGIC.len() + NONCE_LEN {
                let nonce_s = &challenge[MAGIC.len()..];
                let nonce_c = [7u8; NONCE_LEN];
                let group = GroupId::new("ns", "a", "uid-a").encode();
                let parts: [&[u8]; 3] = [nonce_s, &nonce_c, &group];
                let mac_c = mac(&GroupSecret::new("ka"), CLIENT_LABEL, &parts);
                let proof = frame(PROOF, &[&nonce_c[..], &mac_c, &group].concat());
                mutate(&mut rng, &proof)
            } else {
                noise
            };
            let _ = client_end.write_all(&sent).await;
            let _ = client_end.shutdown().await;
            // Read whatever the server answers until it closes, so it never blocks.
            let mut sink = Vec::new();
            let _ = client_end.read_to_end(&mut sink).await;
        };
        // Each side drops its end when done, so the other's reads end.
        let server = async move { accept(&mut server_end, &OneGroup, peer()).await };
        let (served, ()) =
            tokio::time::timeout(ROUND_DEADLINE, async { tokio::join!(server, client) })
                .await
                .unwrap_or_else(|_| panic!("round {round}: the handshake hung"));
        assert!(
            served.is_err(),
            "round {round} (genuine proof mutated: {genuine}): accepted {:?}",
            served.map(|g| g.group)
        );
    }
}

/// Random bytes or a mutated challenge, then random bytes, from the server: [`connect`]
/// errs, within the deadline.
#[tokio::test]
async fn the_client_refuses_random_and_mutated_servers() {
    let mut rng = Rng::new(0x3c6e_f372);
    for round in 0..ROUNDS {
        let (mut server_end, mut client_end) = duplex(4096);
        let mut challenge = frame(CHALLENGE, &[&MAGIC[..], &[9u8; NONCE_LEN]].concat());
        if rng.below(2) == 0 {
            challenge = mutate(&mut rng, &challenge);
        } else {
            challenge = rng.bytes(600);
        }
        let answer = rng.bytes(80);
        let server = async move {
            let _ = server_end.write_all(&challenge).await;
            // A challenge whose length was mutated upwards leaves the client waiting for
            // the rest (in the agent, until its caller's deadline): a short wait for the
            // proof here, then the answer and the end of the stream, which ends that wait.
            let proof = read_frame(&mut server_end, MAX_HANDSHAKE_FRAME);
            let _ = tokio::time::timeout(Duration::from_millis(50), proof).await;
            let _ = server_end.write_all(&answer).await;
            let _ = server_end.shutdown().await;
            let mut sink = Vec::new();
            let _ = server_end.read_to_end(&mut sink).await;
        };
        let secret = GroupSecret::new("ka");
        let group = GroupId::new("ns", "a", "uid-a");
        // Each side drops its end when done, so the other's reads end.
        let client = async move { connect(&mut client_end, &secret, &group, peer()).await };
        let (connected, ()) =
            tokio::time::timeout(ROUND_DEADLINE, async { tokio::join!(client, server) })
                .await
                .unwrap_or_else(|_| panic!("round {round}: the handshake hung"));
        assert!(
            connected.is_err(),
            "round {round}: a random server was accepted"
        );
    }
}
