//! The worker's side of the agent's local API (`agent/README.md`, "Local worker API"):
//! one JSON object per line each way over the Unix socket. Written from the documented
//! protocol, not from the agent's types, because that is what a third-party engine has.
//!
//! Every exchange is bounded ([`AgentClient::timeout`]): a connect, a request and its
//! answer, the `ok` of a `watch`. Only waiting for the next event of a watch stream is
//! unbounded by nature; [`WatchStream::next_event`] returns when the agent closes the
//! stream, and the caller bounds idleness with a liveness probe.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::error::{Error, Result};

/// Longest line read from the agent (a line longer than this is a protocol error).
pub const MAX_LINE: u64 = 64 << 10;

/// The member's assignment as the agent gives it. Unknown fields are ignored and missing
/// ones default, so a newer agent does not break this worker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Assignment {
    pub group: String,
    pub rank: u32,
    pub world: u32,
    pub local_ranks: u32,
    pub rank_table_path: Option<String>,
    pub interface: Option<String>,
    pub devices: Vec<i32>,
    pub weights_path: Option<String>,
    pub epoch: u64,
}

/// An event on a `watch` stream.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The weights are in place at `path` (`None`: the group has no weights).
    WeightsReady { path: Option<String> },
    /// Stop taking new work; `deadline` is the RFC 3339 request time.
    DrainRequested { deadline: Option<String> },
    /// The member's communicator moved to a new epoch.
    EpochChanged { epoch: u64 },
    /// An event this worker does not know (a newer agent); ignored.
    #[serde(other)]
    Unknown,
}

/// The answer to `weights_ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsState {
    pub ready: bool,
    pub path: Option<String>,
}

#[derive(Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Op<'a> {
    Assignment {
        pod: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
    },
    ReportInflight {
        pod: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
        n: u64,
    },
    WeightsReady {
        pod: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
    },
    Watch {
        pod: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
    },
    Serving {
        pod: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
    },
}

impl Op<'_> {
    fn name(&self) -> &'static str {
        match self {
            Op::Assignment { .. } => "assignment",
            Op::ReportInflight { .. } => "report_inflight",
            Op::WeightsReady { .. } => "weights_ready",
            Op::Watch { .. } => "watch",
            Op::Serving { .. } => "serving",
        }
    }
}

/// Where the agent is and who this worker is: everything needed to open connections.
#[derive(Debug, Clone)]
pub struct AgentClient {
    pub socket: PathBuf,
    /// This worker's Pod name (downward API).
    pub pod: String,
    /// The Pod's namespace; sent when known so a name reused across namespaces on one node
    /// is unambiguous.
    pub namespace: Option<String>,
    /// Bound of one exchange (connect, or request + answer).
    pub timeout: Duration,
}

impl AgentClient {
    /// Opens a request/response connection.
    pub async fn connect(&self) -> Result<AgentConn> {
        let stream = tokio::time::timeout(self.timeout, UnixStream::connect(&self.socket))
            .await
            .map_err(|_| Error::AgentTimeout {
                op: "connect",
                after: self.timeout,
            })?
            .map_err(|source| Error::AgentIo {
                path: self.socket.clone(),
                source,
            })?;
        let (r, w) = stream.into_split();
        Ok(AgentConn {
            client: self.clone(),
            reader: BufReader::new(r),
            writer: w,
        })
    }

    /// `assignment` on a fresh connection.
    pub async fn assignment(&self) -> Result<Assignment> {
        self.connect().await?.assignment().await
    }

    /// `weights_ready` on a fresh connection.
    pub async fn weights_ready(&self) -> Result<WeightsState> {
        self.connect().await?.weights_ready().await
    }

    /// `{"op":"serving"}` on a fresh connection: the weights are loaded and the worker takes
    /// traffic (the agent holds the readiness gate until then when the Pod asks it to).
    pub async fn serving(&self) -> Result<()> {
        let mut conn = self.connect().await?;
        let op = Op::Serving {
            pod: &self.pod,
            namespace: self.namespace.as_deref(),
        };
        conn.call(&op).await.map(|_| ())
    }

    /// Opens a `watch` stream (connect and the agent's `ok`, both bounded).
    pub async fn watch(&self) -> Result<WatchStream> {
        let mut conn = self.connect().await?;
        let op = Op::Watch {
            pod: &self.pod,
            namespace: self.namespace.as_deref(),
        };
        conn.call(&op).await?;
        Ok(WatchStream { conn })
    }
}

/// A kept connection to the agent for request/response exchanges.
pub struct AgentConn {
    client: AgentClient,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl AgentConn {
    /// `{"op":"assignment"}` → the assignment (an error until the member is verified).
    pub async fn assignment(&mut self) -> Result<Assignment> {
        let (pod, namespace) = (self.client.pod.clone(), self.client.namespace.clone());
        let v = self
            .call(&Op::Assignment {
                pod: &pod,
                namespace: namespace.as_deref(),
            })
            .await?;
        let a = v
            .get("assignment")
            .ok_or_else(|| Error::AgentProtocol(format!("assignment answer without it: {v}")))?;
        serde_json::from_value(a.clone())
            .map_err(|e| Error::AgentProtocol(format!("bad assignment {a}: {e}")))
    }

    /// `{"op":"report_inflight","n":n}`.
    pub async fn report_inflight(&mut self, n: u64) -> Result<()> {
        let (pod, namespace) = (self.client.pod.clone(), self.client.namespace.clone());
        self.call(&Op::ReportInflight {
            pod: &pod,
            namespace: namespace.as_deref(),
            n,
        })
        .await
        .map(|_| ())
    }

    /// `{"op":"weights_ready"}`.
    pub async fn weights_ready(&mut self) -> Result<WeightsState> {
        let (pod, namespace) = (self.client.pod.clone(), self.client.namespace.clone());
        let v = self
            .call(&Op::WeightsReady {
                pod: &pod,
                namespace: namespace.as_deref(),
            })
            .await?;
        Ok(WeightsState {
            ready: v.get("ready").and_then(|r| r.as_bool()).unwrap_or(false),
            path: v.get("path").and_then(|p| p.as_str()).map(str::to_owned),
        })
    }

    /// Writes one request line and reads one answer line, both within the timeout; an
    /// answer with `ok: false` is [`Error::AgentRefused`].
    async fn call(&mut self, op: &Op<'_>) -> Result<serde_json::Value> {
        let name = op.name();
        let after = self.client.timeout;
        let exchange = async {
            let mut line = serde_json::to_string(op).expect("requests always serialise");
            line.push('\n');
            self.writer
                .write_all(line.as_bytes())
                .await
                .map_err(|source| Error::AgentIo {
                    path: self.client.socket.clone(),
                    source,
                })?;
            read_json_line(&mut self.reader, &self.client.socket).await
        };
        let v = tokio::time::timeout(after, exchange)
            .await
            .map_err(|_| Error::AgentTimeout { op: name, after })??
            .ok_or(Error::AgentClosed)?;
        match v.get("ok").and_then(|ok| ok.as_bool()) {
            Some(true) => Ok(v),
            Some(false) => Err(Error::AgentRefused {
                op: name,
                error: v
                    .get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("(no message)")
                    .to_owned(),
            }),
            None => Err(Error::AgentProtocol(format!("answer without \"ok\": {v}"))),
        }
    }
}

/// A `watch` stream: the state already reached is replayed first, then live events.
pub struct WatchStream {
    conn: AgentConn,
}

impl WatchStream {
    /// The next event; `Ok(None)` when the agent closed the stream. Not bounded in time:
    /// events come when the member's state changes.
    pub async fn next_event(&mut self) -> Result<Option<AgentEvent>> {
        let socket = self.conn.client.socket.clone();
        let Some(v) = read_json_line(&mut self.conn.reader, &socket).await? else {
            return Ok(None);
        };
        if v.get("ok").and_then(|o| o.as_bool()) == Some(false) {
            return Err(Error::AgentRefused {
                op: "watch",
                error: v.to_string(),
            });
        }
        serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| Error::AgentProtocol(format!("bad event {v}: {e}")))
    }
}

/// Reads one line (bounded to [`MAX_LINE`]) and parses it; `None` at end of stream.
async fn read_json_line(
    reader: &mut BufReader<OwnedReadHalf>,
    socket: &std::path::Path,
) -> Result<Option<serde_json::Value>> {
    let mut line = String::new();
    let n = (&mut *reader)
        .take(MAX_LINE + 1)
        .read_line(&mut line)
        .await
        .map_err(|source| Error::AgentIo {
            path: socket.to_owned(),
            source,
        })?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') {
        return Err(Error::AgentProtocol(if n as u64 > MAX_LINE {
            format!("line longer than {MAX_LINE} bytes")
        } else {
            "connection closed mid-line".into()
        }));
    }
    serde_json::from_str(line.trim())
        .map(Some)
        .map_err(|e| Error::AgentProtocol(format!("not JSON ({e}): {}", line.trim())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_documented_lines() {
        let op = Op::ReportInflight {
            pod: "w-0",
            namespace: None,
            n: 3,
        };
        assert_eq!(
            serde_json::to_string(&op).unwrap(),
            r#"{"op":"report_inflight","pod":"w-0","n":3}"#
        );
        let op = Op::Watch {
            pod: "w-0",
            namespace: Some("ns"),
        };
        assert_eq!(
            serde_json::to_string(&op).unwrap(),
            r#"{"op":"watch","pod":"w-0","namespace":"ns"}"#
        );
    }

    #[test]
    fn events_parse_and_unknown_ones_are_tolerated() {
        let e: AgentEvent =
            serde_json::from_str(r#"{"event":"weights_ready","path":"/w/current"}"#).unwrap();
        assert_eq!(
            e,
            AgentEvent::WeightsReady {
                path: Some("/w/current".into())
            }
        );
        let e: AgentEvent =
            serde_json::from_str(r#"{"event":"drain_requested","deadline":null}"#).unwrap();
        assert_eq!(e, AgentEvent::DrainRequested { deadline: None });
        let e: AgentEvent = serde_json::from_str(r#"{"event":"resized","n":1}"#).unwrap();
        assert_eq!(e, AgentEvent::Unknown);
        let a: Assignment =
            serde_json::from_str(r#"{"group":"g","rank":2,"world":4,"epoch":7,"new":1}"#).unwrap();
        assert_eq!((a.rank, a.epoch, a.weights_path), (2, 7, None));
    }
}
