//! Connections to a source: connect (from the data address, retrying until the connect
//! deadline, since a fellow joiner may start its server a moment later), authenticate,
//! and read one response under a deadline.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

use super::auth;
use super::error::{Result, WeightsError};
use super::lowat::FramePaced;
use super::protocol::{self, FrameError, MAX_FRAME, Response};
use super::request::FetchRequest;

/// Connects (retrying until the connect deadline) and authenticates.
pub(crate) async fn open(req: &FetchRequest, src: SocketAddr) -> Result<TcpStream> {
    let deadline = Instant::now() + req.timeouts.connect;
    let mut backoff = Duration::from_millis(20);
    let mut stream = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = async {
            let sock = if src.is_ipv4() {
                TcpSocket::new_v4()
            } else {
                TcpSocket::new_v6()
            }?;
            if let Some(ip) = req.bind {
                sock.bind(SocketAddr::new(ip, 0))?;
            }
            sock.connect(src).await
        };
        match timeout(left, attempt).await {
            Ok(Ok(s)) => break s,
            Ok(Err(e)) if Instant::now() + backoff < deadline => {
                tracing::debug!(source = %src, error = %e, "connect failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            Ok(Err(e)) => return Err(WeightsError::io(format!("connect to {src}"), None, e)),
            Err(_) => {
                return Err(WeightsError::Timeout {
                    what: "connect".into(),
                    peer: Some(src),
                    after: req.timeouts.connect,
                });
            }
        }
    };
    let _ = stream.set_nodelay(true);
    timeout(
        req.timeouts.handshake,
        auth::connect(&mut stream, &req.secret, &req.group, src),
    )
    .await
    .map_err(|_| WeightsError::Timeout {
        what: "handshake".into(),
        peer: Some(src),
        after: req.timeouts.handshake,
    })??;
    Ok(stream)
}

pub(crate) async fn read_response(
    s: &mut TcpStream,
    src: SocketAddr,
    after: Duration,
    what: &str,
) -> Result<Response> {
    // Woken per frame rather than per packet (`lowat`).
    let mut paced = FramePaced::new(s);
    timeout(after, protocol::read_response(&mut paced, MAX_FRAME))
        .await
        .map_err(|_| WeightsError::Timeout {
            what: what.into(),
            peer: Some(src),
            after,
        })?
        .map_err(|e| match e {
            FrameError::Io(e) => WeightsError::io(format!("read from {src}"), None, e),
            e => WeightsError::protocol(Some(src), e.to_string()),
        })
}

pub(crate) fn unexpected(src: SocketAddr, r: &Response) -> WeightsError {
    match r {
        Response::Error(m) => WeightsError::protocol(Some(src), format!("source reported: {m}")),
        _ => WeightsError::protocol(Some(src), "unexpected response"),
    }
}

/// Writes `bytes` to `src` within `within` (a source that stops reading fails the write
/// as a named timeout instead of holding the caller).
pub(crate) async fn send(
    s: &mut TcpStream,
    bytes: &[u8],
    src: SocketAddr,
    within: Duration,
    what: &str,
) -> Result<()> {
    timeout(within, s.write_all(bytes))
        .await
        .map_err(|_| WeightsError::Timeout {
            what: what.into(),
            peer: Some(src),
            after: within,
        })?
        .map_err(|e| WeightsError::io(format!("write to {src}"), None, e))
}
