//! The worker's side of the agent's local API (`agent/README.md`, "Local worker API"):
//! one JSON object per line each way over the Unix socket, in the wire types of
//! `hcomm_crds::local_api` (the ones the agent serves). Every engine speaks through this
//! one client: the reference worker directly, C and Python engines through [`crate::ffi`].
//!
//! Every exchange is bounded ([`AgentClient::timeout`]): a connect, a request and its
//! answer, the `ok` of a `watch`. Only waiting for the next event of a watch stream is
//! unbounded by nature; [`WatchStream::next_event`] returns when the agent closes the
//! stream, and the caller bounds idleness with a liveness probe.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::error::{Error, Result};

/// Longest line read from the agent (a line longer than this is a protocol error).
pub const MAX_LINE: u64 = 64 << 10;

use hcomm_crds::local_api::Request;
pub use hcomm_crds::local_api::{Assignment, Notice as AgentEvent, WorkerLoad};

/// The answer to `weights_ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsState {
    pub ready: bool,
    pub path: Option<String>,
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

    /// `report_load` on a fresh connection (engines that report rarely; a reporter loop
    /// keeps one [`AgentConn`] instead).
    pub async fn report_load(&self, load: WorkerLoad) -> Result<()> {
        self.connect().await?.report_load(load).await
    }

    /// `weights_ready` on a fresh connection.
    pub async fn weights_ready(&self) -> Result<WeightsState> {
        self.connect().await?.weights_ready().await
    }

    /// `{"op":"serving"}` on a fresh connection: the weights are loaded and the worker takes
    /// traffic (the agent holds the readiness gate until then when the Pod asks it to).
    pub async fn serving(&self) -> Result<()> {
        let mut conn = self.connect().await?;
        let op = Request::Serving {
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
        };
        conn.call(&op).await.map(|_| ())
    }

    /// `{"op":"cannot_serve"}` on a fresh connection: what this worker needs before traffic
    /// failed for good; a member still joining is failed with `reason` and replaced.
    pub async fn cannot_serve(&self, reason: &str) -> Result<()> {
        let mut conn = self.connect().await?;
        let op = Request::CannotServe {
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
            reason: reason.to_owned(),
        };
        conn.call(&op).await.map(|_| ())
    }

    /// Opens a `watch` stream (connect and the agent's `ok`, both bounded).
    pub async fn watch(&self) -> Result<WatchStream> {
        let mut conn = self.connect().await?;
        let op = Request::Watch {
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
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
        let v = self.call(&Request::Assignment { pod, namespace }).await?;
        let a = v
            .get("assignment")
            .ok_or_else(|| Error::AgentProtocol(format!("assignment answer without it: {v}")))?;
        serde_json::from_value(a.clone())
            .map_err(|e| Error::AgentProtocol(format!("bad assignment {a}: {e}")))
    }

    /// `{"op":"report_inflight","n":n}`.
    pub async fn report_inflight(&mut self, n: u64) -> Result<()> {
        let (pod, namespace) = (self.client.pod.clone(), self.client.namespace.clone());
        self.call(&Request::ReportInflight { pod, namespace, n })
            .await
            .map(|_| ())
    }

    /// `{"op":"report_load",...}`: in flight, queued, draining.
    pub async fn report_load(&mut self, load: WorkerLoad) -> Result<()> {
        let (pod, namespace) = (self.client.pod.clone(), self.client.namespace.clone());
        self.call(&Request::ReportLoad {
            pod,
            namespace,
            load,
        })
        .await
        .map(|_| ())
    }

    /// `{"op":"weights_ready"}`.
    pub async fn weights_ready(&mut self) -> Result<WeightsState> {
        let (pod, namespace) = (self.client.pod.clone(), self.client.namespace.clone());
        let v = self.call(&Request::WeightsReady { pod, namespace }).await?;
        Ok(WeightsState {
            ready: v.get("ready").and_then(|r| r.as_bool()).unwrap_or(false),
            path: v.get("path").and_then(|p| p.as_str()).map(str::to_owned),
        })
    }

    /// Writes one request line and reads one answer line, both within the timeout; an
    /// answer with `ok: false` is [`Error::AgentRefused`].
    async fn call(&mut self, op: &Request) -> Result<serde_json::Value> {
        let name = op.op_name();
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

    // The request lines themselves are tested with the types in `hcomm_crds::local_api`;
    // what the client adds is tolerance of events a newer agent may send.
    #[test]
    fn an_event_this_client_does_not_know_is_read_as_unknown() {
        let e: AgentEvent = serde_json::from_str(r#"{"event":"resized","n":1}"#).unwrap();
        assert_eq!(e, AgentEvent::Unknown);
    }
}
