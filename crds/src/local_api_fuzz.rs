//! Fuzzing the local-API line protocol the way the comm frame decoder is fuzzed
//! (`agent/comm/src/frame.rs`, `decoder_never_panics_on_random_bytes`): random and mutated
//! lines with a fixed seed and a bounded number of rounds, so a failure replays exactly;
//! plus structured round trips. The agent parses every line a worker writes with
//! [`parse_request`], so it must never panic, and what it accepts must mean one thing.

use super::*;

use hcomm_comm::testutil::XorShift as Rng;

/// Local-API values drawn from the shared PRNG.
trait Draw {
    fn text(&mut self, max: usize) -> String;
    fn request(&mut self) -> Request;
}

impl Draw for Rng {
    /// A string mixing ASCII, JSON's special characters, control characters and
    /// multi-byte characters.
    fn text(&mut self, max: usize) -> String {
        const PIECES: &[&str] = &[
            "a",
            "w-0",
            "\"",
            "\\",
            "\n",
            "\r",
            "\t",
            "\u{0}",
            "/",
            "é",
            "日",
            "😀",
            "{",
            "}",
            ":",
            ",",
            " ",
            "op",
            "pod",
            "namespace",
            "..",
        ];
        (0..self.below(max + 1))
            .map(|_| PIECES[self.below(PIECES.len())])
            .collect()
    }
    fn request(&mut self) -> Request {
        let pod = self.text(12);
        let namespace = (self.below(2) == 0).then(|| self.text(8));
        match self.below(5) {
            0 => Request::Assignment { pod, namespace },
            1 => Request::ReportInflight {
                pod,
                namespace,
                n: match self.below(3) {
                    0 => 0,
                    1 => u64::MAX,
                    _ => self.next_u64(),
                },
            },
            2 => Request::WeightsReady { pod, namespace },
            3 => Request::Watch { pod, namespace },
            _ => Request::Serving { pod, namespace },
        }
    }
}

/// What must hold for any line the parser accepts: it re-encodes to one line that parses
/// back to the same request, and names the pod it was given.
fn accepted_means_one_thing(req: &Request) {
    let line = serde_json::to_string(req).expect("a request serialises");
    assert!(!line.contains('\n'), "one request is one line: {line:?}");
    assert_eq!(&parse_request(&line).expect("re-parses"), req);
}

const VALID: &[&str] = &[
    r#"{"op":"assignment","pod":"w-0"}"#,
    r#"{"op":"report_inflight","pod":"w-0","namespace":"ns","n":3}"#,
    r#"{"op":"weights_ready","pod":"w-0"}"#,
    r#"{"op":"watch","pod":"w-0","namespace":"ns"}"#,
    r#"{"op":"serving","pod":"w-0"}"#,
];

#[test]
fn the_request_parser_never_panics_on_random_bytes() {
    let mut rng = Rng::new(0x5eed_10ca_1a91);
    for _ in 0..20_000 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let line = String::from_utf8_lossy(&bytes);
        if let Ok(req) = parse_request(&line) {
            accepted_means_one_thing(&req);
        }
    }
}

#[test]
fn mutated_valid_requests_never_panic_and_what_parses_round_trips() {
    let mut rng = Rng::new(0xf022_5eed);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut bytes = VALID[rng.below(VALID.len())].as_bytes().to_vec();
        for _ in 0..=rng.below(4) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(4) {
                0 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
                1 if at < bytes.len() => {
                    bytes.remove(at);
                }
                2 => {
                    let piece = rng.text(2);
                    bytes.splice(at..at, piece.bytes());
                }
                _ => bytes.truncate(at),
            }
        }
        let line = String::from_utf8_lossy(&bytes);
        if let Ok(req) = parse_request(&line) {
            accepted += 1;
            accepted_means_one_thing(&req);
        }
    }
    assert!(
        accepted > 0,
        "some mutations stay valid, so the deep paths are reached"
    );
}

#[test]
fn every_request_round_trips_through_one_line() {
    let mut rng = Rng::new(0x0007_12a3);
    for _ in 0..5_000 {
        let req = rng.request();
        accepted_means_one_thing(&req);
        // The agent reads lines with the newline still attached, and may see CRLF.
        let line = serde_json::to_string(&req).unwrap();
        assert_eq!(parse_request(&format!("{line}\n")).unwrap(), req);
        assert_eq!(parse_request(&format!("{line}\r\n")).unwrap(), req);
    }
}

#[test]
fn lines_over_the_limit_are_refused_before_parsing_whatever_they_hold() {
    let mut rng = Rng::new(0x10_4e);
    for _ in 0..20 {
        let pad = MAX_LINE + 1 + rng.below(64);
        let line = format!(r#"{{"op":"assignment","pod":"{}"}}"#, "a".repeat(pad));
        assert!(parse_request(&line).unwrap_err().contains("longer than"));
    }
    let fits = format!(
        r#"{{"op":"assignment","pod":"{}"}}"#,
        "a".repeat(MAX_LINE - 40)
    );
    assert!(parse_request(&fits).is_ok());
}

#[test]
fn responses_and_notices_round_trip_and_unknown_events_stay_unknown() {
    let mut rng = Rng::new(0xe7e7);
    for _ in 0..5_000 {
        let text = rng.text(10);
        let notice = match rng.below(3) {
            0 => Notice::WeightsReady {
                path: (rng.below(2) == 0).then(|| text.clone()),
            },
            1 => Notice::DrainRequested {
                deadline: (rng.below(2) == 0).then(|| text.clone()),
            },
            _ => Notice::EpochChanged {
                epoch: rng.next_u64(),
            },
        };
        let line = serde_json::to_string(&notice).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Notice>(&line).unwrap(), notice);
        let response = Response::error(text.clone());
        let line = serde_json::to_string(&response).unwrap();
        assert_eq!(serde_json::from_str::<Response>(&line).unwrap(), response);
        // An event name this reader does not know is tolerated, never mistaken.
        let unknown = format!(r#"{{"event":"x{}","n":1}}"#, rng.next_u64());
        assert_eq!(
            serde_json::from_str::<Notice>(&unknown).unwrap(),
            Notice::Unknown
        );
    }
}
