//! Fuzzing the weights chunk protocol the way the comm frame decoder is fuzzed
//! (`agent/comm/src/frame.rs`, `decoder_never_panics_on_random_bytes`): random and mutated
//! frames with a fixed seed and a bounded number of rounds (a failure replays exactly),
//! plus structured round trips. The chunk server decodes what any peer that passed the
//! handshake sends, and joiners decode what any source answers: neither may panic, read
//! past a frame, or accept a frame over its limit.

use super::*;

use hcomm_comm::testutil::XorShift as Rng;

/// Chunk-protocol values drawn from the shared PRNG.
trait Draw {
    fn digest(&mut self) -> Digest;
    fn request(&mut self) -> Request;
    fn response(&mut self) -> Response;
}

impl Draw for Rng {
    fn digest(&mut self) -> Digest {
        let mut d = [0u8; 32];
        d.iter_mut().for_each(|b| *b = self.next_u64() as u8);
        Digest(d)
    }
    fn request(&mut self) -> Request {
        match self.below(3) {
            0 => Request::GetManifest(self.digest()),
            1 => Request::GetChunk(self.digest()),
            _ => Request::Have(self.digest()),
        }
    }
    fn response(&mut self) -> Response {
        match self.below(5) {
            0 => Response::Manifest {
                set: self.digest(),
                bytes: self.bytes(300),
            },
            1 => Response::Chunk {
                chunk: self.digest(),
                data: self.bytes(300),
            },
            2 => Response::Missing(self.digest()),
            3 => {
                let chunks = self.below(100) as u32;
                let half = (chunks as usize).div_ceil(8);
                Response::HaveBits {
                    set: self.digest(),
                    chunks,
                    bits: (0..half).map(|_| self.next_u64() as u8).collect(),
                    coming: (0..half).map(|_| self.next_u64() as u8).collect(),
                }
            }
            _ => Response::Error(String::from_utf8_lossy(&self.bytes(40)).into_owned()),
        }
    }
}

const MAX: usize = 512;
const KINDS: [u8; 9] = [
    kind::GET_MANIFEST,
    kind::GET_CHUNK,
    kind::HAVE,
    kind::MANIFEST,
    kind::CHUNK,
    kind::MISSING,
    kind::HAVE_BITS,
    kind::ERROR,
    0x00,
];

/// Reads every frame of `wire` and decodes each both ways; checks what must hold for any
/// input: no frame over `MAX`, no byte read past the input, a decoded message re-encodes
/// to the very frame it came from (one meaning per frame), and the joiners' direct
/// [`read_response`] means what [`read_frame`] then [`Response::decode`] mean.
async fn read_all(wire: &[u8]) {
    let mut r = wire;
    loop {
        let before = r.len();
        let mut direct_r = r;
        let direct = read_response(&mut direct_r, MAX).await;
        match read_frame(&mut r, MAX).await {
            Ok((k, payload)) => {
                match (Response::decode(k, payload.clone()), &direct) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(&a, b);
                        assert_eq!(direct_r.len(), r.len(), "read the same frame");
                    }
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("read_response and decode disagree: {a:?} / {b:?}"),
                }
                assert!(payload.len() < MAX, "a frame over the limit was accepted");
                assert_eq!(
                    before - r.len(),
                    5 + payload.len(),
                    "read exactly one frame"
                );
                if let Ok(req) = Request::decode(k, &payload) {
                    assert_eq!(req.encode(), frame(k, &payload));
                }
                if let Ok(resp) = Response::decode(k, payload.clone())
                    && !matches!(resp, Response::Error(_))
                {
                    assert_eq!(resp.encode(), frame(k, &payload));
                }
            }
            Err(_) => {
                assert!(
                    direct.is_err(),
                    "read_response took a frame read_frame refused"
                );
                return;
            }
        }
    }
}

#[tokio::test]
async fn the_decoders_never_panic_on_random_bytes() {
    let mut rng = Rng::new(0x5eed_c4a2);
    for _ in 0..20_000 {
        let mut wire = rng.bytes(120);
        // Half the time a plausible length prefix, so the payload paths are reached.
        if rng.below(2) == 0 && wire.len() >= 5 {
            let len = (wire.len() - 4) as u32;
            wire[..4].copy_from_slice(&len.to_be_bytes());
            wire[4] = KINDS[rng.below(KINDS.len())];
        }
        read_all(&wire).await;
        // The payload decoders on their own, whatever the kind byte.
        let k = rng.next_u64() as u8;
        let p = rng.bytes(80);
        let _ = Request::decode(k, &p);
        let _ = Response::decode(k, p);
    }
}

#[tokio::test]
async fn mutated_valid_frames_never_panic_and_what_decodes_means_one_thing() {
    let mut rng = Rng::new(0x000f_22ed);
    let mut decoded = 0;
    for _ in 0..20_000 {
        let mut wire = if rng.below(2) == 0 {
            rng.request().encode()
        } else {
            rng.response().encode()
        };
        for _ in 0..=rng.below(3) {
            if wire.is_empty() {
                break;
            }
            let at = rng.below(wire.len());
            match rng.below(3) {
                0 => wire[at] = rng.next_u64() as u8,
                1 => {
                    wire.remove(at);
                }
                _ => wire.truncate(at),
            }
        }
        let mut r = &wire[..];
        if let Ok((k, p)) = read_frame(&mut r, MAX).await
            && (Request::decode(k, &p).is_ok() || Response::decode(k, p).is_ok())
        {
            decoded += 1;
        }
        read_all(&wire).await;
    }
    assert!(
        decoded > 0,
        "some mutations stay valid, so the deep paths are reached"
    );
}

#[tokio::test]
async fn every_message_round_trips_through_its_frame() {
    let mut rng = Rng::new(0x2071);
    for _ in 0..5_000 {
        let req = rng.request();
        let wire = req.encode();
        let (k, p) = read_frame(&mut &wire[..], MAX).await.unwrap();
        assert_eq!(Request::decode(k, &p).unwrap(), req);

        let resp = rng.response();
        let wire = resp.encode();
        let (k, p) = read_frame(&mut &wire[..], 4096).await.unwrap();
        assert_eq!(Response::decode(k, p).unwrap(), resp);
    }
}

#[tokio::test]
async fn a_chunk_written_without_a_frame_buffer_reads_back_as_the_same_chunk() {
    let mut rng = Rng::new(0xc0de);
    for _ in 0..500 {
        let chunk = rng.digest();
        let data = rng.bytes(2000);
        let mut wire = Vec::new();
        write_chunk(&mut wire, &chunk, &data).await.unwrap();
        assert_eq!(
            wire,
            Response::Chunk {
                chunk,
                data: data.clone()
            }
            .encode()
        );
    }
}

#[tokio::test]
async fn a_length_over_the_limit_is_refused_before_its_payload_is_read() {
    let mut rng = Rng::new(0x1e4);
    for _ in 0..200 {
        let len = (MAX + 1 + rng.below(1 << 20)) as u32;
        let mut wire = len.to_be_bytes().to_vec();
        wire.push(kind::CHUNK);
        let mut r = &wire[..];
        assert!(matches!(
            read_frame(&mut r, MAX).await,
            Err(FrameError::TooLarge { .. })
        ));
        assert_eq!(r.len(), 1, "only the length was read");
    }
}
