//! The rewriter byte by byte: what a server decodes from its output, for the inputs real
//! clients send and the ones no server would accept.

use super::*;

fn frame(frame_type: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    FrameHeader {
        length: payload.len(),
        frame_type,
        flags,
        stream,
    }
    .write(&mut out);
    out.extend_from_slice(payload);
    out
}

fn request(authority: &[u8]) -> Vec<(&'static [u8], Vec<u8>)> {
    vec![
        (b":method", b"POST".to_vec()),
        (b":scheme", b"http".to_vec()),
        (
            b":path",
            b"/pluginregistration.Registration/GetInfo".to_vec(),
        ),
        (b":authority", authority.to_vec()),
        (b"content-type", b"application/grpc".to_vec()),
        (b"te", b"trailers".to_vec()),
    ]
}

/// Encodes as grpc-go does a first request: every field a literal with incremental
/// indexing (RFC 7541 §6.2.1), so it enters the dynamic table.
fn encode_indexing(headers: &[(&'static [u8], Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x40);
        for string in [*name, value.as_slice()] {
            fluke_hpack::encoder::encode_integer_into(string.len(), 7, 0, &mut out).unwrap();
            out.extend_from_slice(string);
        }
    }
    out
}

/// The same fields again as references to the entries [`encode_indexing`] added (the
/// newest entry is index 62).
fn encode_references(count: usize) -> Vec<u8> {
    (0..count)
        .map(|i| 0x80 | u8::try_from(62 + count - 1 - i).unwrap())
        .collect()
}

/// Encodes as hpack-rs does: no dynamic table entries.
fn encode(encoder: &mut fluke_hpack::Encoder<'_>, headers: &[(&'static [u8], Vec<u8>)]) -> Vec<u8> {
    encoder.encode(headers.iter().map(|(n, v)| (*n, v.as_slice())))
}

/// One frame as the server reads it: a header block's fields decoded (on the frame
/// that ends it), any other frame's payload as sent.
struct ReadFrame {
    kind: u8,
    flags: u8,
    stream: u32,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    payload: Vec<u8>,
}

/// What the server would decode from the rewritten bytes, frame by frame.
struct Server {
    decoder: fluke_hpack::Decoder<'static>,
}

impl Server {
    fn new() -> Self {
        Self {
            decoder: fluke_hpack::Decoder::new(),
        }
    }

    /// Every frame of `bytes` after the preface.
    fn read(&mut self, bytes: &[u8]) -> Vec<ReadFrame> {
        assert!(bytes.starts_with(PREFACE));
        let mut rest = &bytes[PREFACE.len()..];
        let mut frames = Vec::new();
        let mut block = Vec::new();
        while !rest.is_empty() {
            let h = FrameHeader::parse(rest);
            let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.length];
            rest = &rest[FRAME_HEADER_LEN + h.length..];
            let mut frame = ReadFrame {
                kind: h.frame_type,
                flags: h.flags,
                stream: h.stream,
                headers: Vec::new(),
                payload: Vec::new(),
            };
            if h.is_header_block() {
                assert_eq!(
                    h.flags & (PADDED | PRIORITY),
                    0,
                    "no padding or priority is written"
                );
                block.extend_from_slice(payload);
                if h.flags & END_HEADERS != 0 {
                    frame.headers = self.decoder.decode(&block).expect("valid HPACK");
                    block.clear();
                }
            } else {
                frame.payload = payload.to_vec();
            }
            frames.push(frame);
        }
        frames
    }
}

fn authority_of(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    headers
        .iter()
        .find(|(n, _)| n == b":authority")
        .map(|(_, v)| v.clone())
        .expect(":authority present")
}

/// What the kubelet's plugin watcher sends (kubernetes/kubernetes#109081).
const KUBELET_AUTHORITY: &[u8] =
    b"%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Flocal-api.hcomm.io-reg.sock";

#[test]
fn the_kubelets_escaped_socket_path_becomes_localhost_and_the_rest_is_kept() {
    let mut encoder = fluke_hpack::Encoder::new();
    let block = encode(&mut encoder, &request(KUBELET_AUTHORITY));
    let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
    let data = frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(settings.clone());
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    input.extend(data.clone());

    let mut out = Vec::new();
    HeaderRewriter::default().feed(&input, &mut out).unwrap();
    let frames = Server::new().read(&out);
    assert_eq!(frames.len(), 3);
    assert_eq!(
        (frames[0].kind, frames[0].payload.as_slice()),
        (0x4, &settings[9..])
    );
    let ReadFrame {
        kind,
        flags,
        stream,
        headers,
        ..
    } = &frames[1];
    assert_eq!((*kind, *flags, *stream), (HEADERS, END_HEADERS, 1));
    assert_eq!(authority_of(headers), b"localhost");
    let mut expected = request(b"localhost");
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        expected.drain(..).map(|(n, v)| (n.to_vec(), v)).collect();
    assert_eq!(headers, &expected, "every other header kept, in order");
    assert_eq!(
        (
            frames[2].kind,
            frames[2].flags,
            frames[2].payload.as_slice()
        ),
        (0x0, END_STREAM, &data[9..])
    );
}

#[test]
fn a_valid_authority_is_kept_and_a_raw_socket_path_replaced() {
    let mut encoder = fluke_hpack::Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        HEADERS,
        END_HEADERS,
        1,
        &encode(&mut encoder, &request(b"localhost")),
    ));
    input.extend(frame(
        HEADERS,
        END_HEADERS,
        3,
        &encode(&mut encoder, &request(b"/run/x.sock")),
    ));
    let mut out = Vec::new();
    HeaderRewriter::default().feed(&input, &mut out).unwrap();
    let frames = Server::new().read(&out);
    assert_eq!(authority_of(&frames[0].headers), b"localhost");
    assert_eq!(authority_of(&frames[1].headers), b"localhost");
}

#[test]
fn a_second_request_that_refers_to_the_clients_dynamic_table_decodes_the_same() {
    // The encoder indexes every header of the first request, so the second is made of
    // dynamic-table references the rewriter must resolve with the client's table.
    let first = encode_indexing(&request(KUBELET_AUTHORITY));
    let second = encode_references(request(KUBELET_AUTHORITY).len());
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &first));
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
    let mut out = Vec::new();
    HeaderRewriter::default().feed(&input, &mut out).unwrap();
    let frames = Server::new().read(&out);
    assert_eq!(frames[0].headers, frames[1].headers);
    assert_eq!(frames[1].flags, END_HEADERS | END_STREAM);
    assert_eq!(authority_of(&frames[1].headers), b"localhost");
}

#[test]
fn huffman_coded_padded_prioritised_and_continued_blocks_arrive_byte_by_byte() {
    // RFC 7541 C.4.1: ":method GET, :scheme http, :path /, :authority www.example.com",
    // the authority Huffman-coded; here after padding and priority fields, and split
    // into a HEADERS and a CONTINUATION frame.
    let block: &[u8] = &[
        0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90,
        0xf4, 0xff,
    ];
    let (a, b) = block.split_at(5);
    let mut headers_payload = vec![3]; // pad length
    headers_payload.extend([0x80, 0, 0, 0, 7]); // exclusive dependency, weight
    headers_payload.extend(a);
    headers_payload.extend([0, 0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        HEADERS,
        PADDED | PRIORITY | END_STREAM,
        5,
        &headers_payload,
    ));
    input.extend(frame(CONTINUATION, END_HEADERS, 5, b));

    let mut rewriter = HeaderRewriter::default();
    let mut out = Vec::new();
    for byte in &input {
        rewriter.feed(std::slice::from_ref(byte), &mut out).unwrap();
    }
    let frames = Server::new().read(&out);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].flags, END_HEADERS | END_STREAM);
    assert_eq!(authority_of(&frames[0].headers), b"www.example.com");
}

#[test]
fn a_large_block_is_split_into_continuation_frames() {
    let mut headers = request(b"localhost");
    headers.push((b"x-big", vec![b'a'; 40_000]));
    let mut encoder = fluke_hpack::Encoder::new();
    let block = encode(&mut encoder, &headers);
    let mut input = PREFACE.to_vec();
    for (i, chunk) in block.chunks(16_000).enumerate() {
        let last = (i + 1) * 16_000 >= block.len();
        let kind = if i == 0 { HEADERS } else { CONTINUATION };
        input.extend(frame(kind, if last { END_HEADERS } else { 0 }, 1, chunk));
    }
    let mut out = Vec::new();
    HeaderRewriter::default().feed(&input, &mut out).unwrap();
    let frames = Server::new().read(&out);
    assert_eq!(
        frames.len(),
        3,
        "a HEADERS frame and two CONTINUATION frames"
    );
    assert_eq!(
        (frames[0].flags, frames[1].flags, frames[2].flags),
        (0, 0, END_HEADERS)
    );
    assert_eq!(frames[2].headers.last().unwrap().1.len(), 40_000);
}

#[test]
fn input_no_server_would_accept_is_refused_by_name() {
    let refuse = |input: Vec<u8>| {
        let mut out = Vec::new();
        HeaderRewriter::default()
            .feed(&input, &mut out)
            .unwrap_err()
    };
    assert_eq!(
        refuse(b"GET / HTTP/1.1\r\n".to_vec()),
        RewriteError::NoPreface
    );

    let mut big = PREFACE.to_vec();
    big.extend(frame(HEADERS, 0, 1, &vec![0; 40_000]));
    big.extend(frame(CONTINUATION, 0, 1, &vec![0; 40_000]));
    assert_eq!(refuse(big), RewriteError::HeaderBlockTooLarge);

    let mut interleaved = PREFACE.to_vec();
    interleaved.extend(frame(HEADERS, 0, 1, &[0x82]));
    interleaved.extend(frame(0x0, 0, 3, b"x"));
    assert_eq!(
        refuse(interleaved),
        RewriteError::Interleaved {
            frame_type: 0,
            stream: 3,
            open: 1
        }
    );

    let mut stray = PREFACE.to_vec();
    stray.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
    assert_eq!(refuse(stray), RewriteError::StrayContinuation(1));

    let mut short = PREFACE.to_vec();
    short.extend(frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 0x82]));
    assert_eq!(refuse(short), RewriteError::MalformedHeaders(1));

    let mut bad_index = PREFACE.to_vec();
    bad_index.extend(frame(HEADERS, END_HEADERS, 1, &[0xff, 0x7f]));
    assert!(matches!(refuse(bad_index), RewriteError::Hpack(_)));

    // One 4,000-byte entry in the table, then referred to 100 times: 400 KB decoded
    // from a 4 KB block.
    let mut bomb_block = encode_indexing(&[(b"x-pad", vec![b'a'; 4000])]);
    bomb_block.extend([0xbe; 100]);
    let mut bomb = PREFACE.to_vec();
    bomb.extend(frame(HEADERS, END_HEADERS, 1, &bomb_block));
    assert_eq!(refuse(bomb), RewriteError::HeaderBlockTooLarge);

    let mut table_too_big = PREFACE.to_vec();
    // A dynamic table size update to 8192, above the 4096 the server allows.
    let mut update = vec![0x3f];
    update.extend([0xe1, 0x3f]);
    update.push(0x82);
    table_too_big.extend(frame(HEADERS, END_HEADERS, 1, &update));
    assert!(matches!(refuse(table_too_big), RewriteError::Hpack(_)));
}
