//! The worker protocol (see `agent/README.md`): one JSON object per line in each direction.
//!
//! Requests carry `op` and `pod` (the worker's Pod name, from the downward API; `namespace`
//! is optional when the name is unique on the node). Responses carry `ok` and either the
//! result or `error`. `watch` turns the connection into a stream of `{"event": ...}` lines.

use serde::{Deserialize, Serialize};

/// Longest request line accepted (bytes).
pub const MAX_LINE: usize = 16 << 10;

/// A request from the worker.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The member's assignment.
    Assignment {
        pod: String,
        #[serde(default)]
        namespace: Option<String>,
    },
    /// The worker's count of requests in flight.
    ReportInflight {
        pod: String,
        #[serde(default)]
        namespace: Option<String>,
        n: u64,
    },
    /// Whether the weights are in place (and where).
    WeightsReady {
        pod: String,
        #[serde(default)]
        namespace: Option<String>,
    },
    /// Stream of events for the member until the connection closes.
    Watch {
        pod: String,
        #[serde(default)]
        namespace: Option<String>,
    },
    /// The worker has loaded its weights and takes traffic: with the Pod annotation
    /// `hcomm.io/worker-readiness: local-api` the agent holds the readiness gate until then.
    Serving {
        pod: String,
        #[serde(default)]
        namespace: Option<String>,
    },
}

impl Request {
    /// (pod, namespace) of any request.
    pub fn target(&self) -> (&str, Option<&str>) {
        match self {
            Request::Assignment { pod, namespace }
            | Request::ReportInflight { pod, namespace, .. }
            | Request::WeightsReady { pod, namespace }
            | Request::Watch { pod, namespace }
            | Request::Serving { pod, namespace } => (pod, namespace.as_deref()),
        }
    }
}

/// A member's assignment, as the worker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
pub struct Assignment {
    pub group: String,
    /// The member's first rank.
    pub rank: u32,
    /// Ranks in the group.
    pub world: u32,
    /// Ranks of this member (devices per member).
    pub local_ranks: u32,
    /// The mounted rank table (`RANK_TABLE_FILE`), if any.
    pub rank_table_path: Option<String>,
    /// The data interface the agent resolved and verified.
    pub interface: Option<String>,
    /// Physical device ids, in local-rank order.
    pub devices: Vec<i32>,
    /// Where verified weights are (only meaningful once `weights_ready`).
    pub weights_path: Option<String>,
    pub epoch: u64,
}

/// An event on a `watch` stream.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Notice {
    WeightsReady { path: Option<String> },
    DrainRequested { deadline: Option<String> },
    EpochChanged { epoch: u64 },
}

/// A response line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Response {
    Assignment {
        ok: bool,
        assignment: Assignment,
    },
    Weights {
        ok: bool,
        ready: bool,
        path: Option<String>,
    },
    Ok {
        ok: bool,
    },
    Error {
        ok: bool,
        error: String,
    },
}

impl Response {
    pub fn error(e: impl Into<String>) -> Response {
        Response::Error {
            ok: false,
            error: e.into(),
        }
    }
}

/// Parses one request line (without the newline).
pub fn parse_request(line: &str) -> Result<Request, String> {
    if line.len() > MAX_LINE {
        return Err(format!("request longer than {MAX_LINE} bytes"));
    }
    serde_json::from_str(line.trim()).map_err(|e| {
        format!("bad request ({e}); expected e.g. {{\"op\":\"assignment\",\"pod\":\"<name>\"}}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_from_their_documented_form() {
        assert_eq!(
            parse_request(r#"{"op":"report_inflight","pod":"w-0","n":3}"#).unwrap(),
            Request::ReportInflight {
                pod: "w-0".into(),
                namespace: None,
                n: 3
            }
        );
        assert_eq!(
            parse_request(r#"{"op":"watch","pod":"w-0","namespace":"ns"}"#)
                .unwrap()
                .target(),
            ("w-0", Some("ns"))
        );
        assert!(
            parse_request(r#"{"op":"explode","pod":"w"}"#)
                .unwrap_err()
                .contains("expected")
        );
        assert!(
            parse_request(r#"{"op":"report_inflight","pod":"w"}"#).is_err(),
            "n is required"
        );
    }

    #[test]
    fn responses_and_notices_serialise_to_the_documented_lines() {
        let r = serde_json::to_string(&Response::Ok { ok: true }).unwrap();
        assert_eq!(r, r#"{"ok":true}"#);
        let n = serde_json::to_string(&Notice::EpochChanged { epoch: 4 }).unwrap();
        assert_eq!(n, r#"{"event":"epoch_changed","epoch":4}"#);
        let e = serde_json::to_string(&Response::error("no such member")).unwrap();
        assert_eq!(e, r#"{"ok":false,"error":"no such member"}"#);
    }
}
