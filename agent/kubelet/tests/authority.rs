//! The servers answer whatever a client puts in `:authority`, as real clients fill it in:
//! the kubelet's plugin watcher sends the URL-escaped registration socket path
//! (kubernetes/kubernetes#109081), grpc-java and Python the raw path. tonic's own client
//! cannot send such an authority (its URI type refuses it), so these calls are written
//! frame by frame over the real socket, against the real servers.

use hcomm_kubelet::csi::registration::{PluginInfo, path};
use hcomm_kubelet::{NodePlugin, Status, serve_node_plugin};
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const DEADLINE: Duration = Duration::from_secs(5);

struct Plugin;

impl NodePlugin for Plugin {
    fn driver_name(&self) -> &str {
        "local-api.hcomm.io"
    }
    fn vendor_version(&self) -> &str {
        "0.1.0"
    }
    fn node_id(&self) -> &str {
        "node-a"
    }
    fn publish(
        &self,
        _: hcomm_kubelet::csi::proto::NodePublishVolumeRequest,
    ) -> Result<(), Status> {
        Ok(())
    }
    fn unpublish(
        &self,
        _: hcomm_kubelet::csi::proto::NodeUnpublishVolumeRequest,
    ) -> Result<(), Status> {
        Ok(())
    }
    fn registration_status(&self, _: bool, _: &str) {}
}

fn dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hcomm-authority-{}-{test}", std::process::id()))
}

/// How one raw call ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The gRPC status the trailers carried, and the message before them.
    Answered {
        grpc_status: String,
        message: Vec<u8>,
    },
    /// The server reset the stream, with this HTTP/2 error code (1 = PROTOCOL_ERROR).
    Reset(u32),
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = len[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// Calls `method` with an empty message on `socket`, twice on one connection (the second
/// request made of references to the client's HPACK table), with `authority` among the
/// fields grpc-go indexes.
async fn call_twice(socket: &Path, method: &str, authority: &str) -> Vec<Outcome> {
    let mut conn = UnixStream::connect(socket).await.unwrap();
    let headers: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", method.as_bytes()),
        (b":authority", authority.as_bytes()),
        (b"content-type", b"application/grpc"),
        (b"user-agent", b"grpc-go/1.72.0"),
        (b"te", b"trailers"),
    ];
    // The first block: literals with incremental indexing; the second: references to
    // the entries the first added (the newest is index 62).
    let mut first = Vec::new();
    for (name, value) in &headers {
        first.push(0x40);
        for string in [*name, *value] {
            fluke_hpack::encoder::encode_integer_into(string.len(), 7, 0, &mut first).unwrap();
            first.extend_from_slice(string);
        }
    }
    let second: Vec<u8> = (0..headers.len())
        .map(|i| 0x80 | u8::try_from(62 + headers.len() - 1 - i).unwrap())
        .collect();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    for (stream, block) in [(1, first), (3, second)] {
        out.extend(frame(0x1, 0x4, stream, &block));
        out.extend(frame(0x0, 0x1, stream, &[0, 0, 0, 0, 0]));
    }
    conn.write_all(&out).await.unwrap();

    let mut decoder = fluke_hpack::Decoder::new();
    let mut outcomes: [Option<Outcome>; 2] = [None, None];
    let mut messages: [Vec<u8>; 2] = Default::default();
    while outcomes.iter().any(Option::is_none) {
        let mut header = [0u8; 9];
        conn.read_exact(&mut header).await.unwrap();
        let len =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let stream = u32::from_be_bytes(header[5..9].try_into().unwrap());
        let mut payload = vec![0; len];
        conn.read_exact(&mut payload).await.unwrap();
        let slot = match stream {
            1 => 0,
            3 => 1,
            _ => {
                if kind == 0x4 && flags & 0x1 == 0 {
                    conn.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap();
                }
                continue;
            }
        };
        match kind {
            0x0 => messages[slot].extend(payload),
            0x1 => {
                let fields = decoder.decode(&payload).unwrap();
                if let Some((_, status)) = fields.iter().find(|(n, _)| n == b"grpc-status") {
                    outcomes[slot] = Some(Outcome::Answered {
                        grpc_status: String::from_utf8(status.clone()).unwrap(),
                        message: std::mem::take(&mut messages[slot]),
                    });
                }
            }
            0x3 => {
                outcomes[slot] = Some(Outcome::Reset(u32::from_be_bytes(
                    payload[..4].try_into().unwrap(),
                )))
            }
            _ => {}
        }
    }
    outcomes.into_iter().map(Option::unwrap).collect()
}

fn plugin_info(outcome: &Outcome) -> PluginInfo {
    let Outcome::Answered {
        grpc_status,
        message,
    } = outcome
    else {
        panic!("no answer: {outcome:?}");
    };
    assert_eq!(grpc_status, "0");
    // gRPC's length-prefixed message: a compression flag and a 4-byte length.
    PluginInfo::decode(&message[5..]).unwrap()
}

#[tokio::test]
async fn the_plugin_watchers_escaped_socket_path_as_authority_is_answered() {
    let d = dir("watcher");
    let (csi, reg) = (d.join("csi.sock"), d.join("registry").join("reg.sock"));
    let _server = serve_node_plugin(&csi, Some(&reg), Arc::new(Plugin))
        .await
        .unwrap();
    // What kubelet v1.35's plugin watcher sends, byte for byte (url.PathEscape of the path).
    let escaped = reg.to_str().unwrap().replace('/', "%2F");
    let outcomes = tokio::time::timeout(DEADLINE, call_twice(&reg, path::GET_INFO, &escaped))
        .await
        .expect("answered within the deadline");
    for outcome in &outcomes {
        let info = plugin_info(outcome);
        assert_eq!(info.name, "local-api.hcomm.io");
        assert_eq!(info.endpoint, csi.to_str().unwrap());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test]
async fn a_raw_path_or_localhost_authority_is_answered_on_both_sockets() {
    let d = dir("raw");
    let (csi, reg) = (d.join("csi.sock"), d.join("registry").join("reg.sock"));
    let _server = serve_node_plugin(&csi, Some(&reg), Arc::new(Plugin))
        .await
        .unwrap();
    for authority in [reg.to_str().unwrap(), "localhost"] {
        let outcomes = tokio::time::timeout(DEADLINE, call_twice(&reg, path::GET_INFO, authority))
            .await
            .expect("answered within the deadline");
        assert_eq!(plugin_info(&outcomes[1]).name, "local-api.hcomm.io");
    }
    // The CSI socket too (the kubelet's CSI client sends `localhost`; others may not).
    let outcomes = tokio::time::timeout(
        DEADLINE,
        call_twice(&csi, "/csi.v1.Identity/Probe", csi.to_str().unwrap()),
    )
    .await
    .expect("answered within the deadline");
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Answered { grpc_status, .. } if grpc_status == "0")),
        "{outcomes:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
