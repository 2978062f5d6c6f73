//! The client half every API of this crate shares: one unary gRPC call on a fresh
//! connection to a Unix socket, the connect included, under one deadline.
//!
//! Why a fresh connection per call: the kubelet and CSI plugins recreate their sockets
//! when they restart, and every caller here asks rarely, so a connection costs nothing and
//! never talks to a socket that is gone. Each API's client turns a [`Failure`] into its own
//! named error ([`crate::PodResourcesError`], [`crate::CsiError`]).

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;
use tonic::transport::{Endpoint, Uri};
use tonic_prost::ProstCodec;

/// Why a call gave no answer, before an API names it.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No file at the socket path.
    SocketMissing,
    /// The socket exists but nothing answers (refused, reset, or the server said
    /// UNAVAILABLE); the detail says which.
    Unavailable(String),
    /// No answer within the deadline (ours, or the server's DEADLINE_EXCEEDED).
    Deadline,
    /// The server answered with any other gRPC status.
    Status(tonic::Status),
}

/// Calls `method` (a `/<package>.<service>/<method>` path) with `req` on the socket at
/// `socket`, everything (the existence check, connect, HTTP/2 handshake, answer) within
/// `deadline`.
pub(crate) async fn unary<Req, Resp>(
    socket: &Path,
    deadline: Duration,
    method: &'static str,
    req: Req,
) -> Result<Resp, Failure>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    tokio::time::timeout(deadline, unbounded(socket.to_path_buf(), method, req))
        .await
        .map_err(|_| Failure::Deadline)?
}

async fn unbounded<Req, Resp>(
    socket: PathBuf,
    method: &'static str,
    req: Req,
) -> Result<Resp, Failure>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    match tokio::fs::try_exists(&socket).await {
        Ok(true) => {}
        Ok(false) => return Err(Failure::SocketMissing),
        Err(e) => return Err(Failure::Unavailable(e.to_string())),
    }
    let connector = tower::service_fn(move |_: Uri| {
        let socket = socket.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(socket).await?;
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    });
    // `localhost`, as the kubelet's own CSI and device-plugin clients send on Unix sockets:
    // the one authority every server takes (a path is refused by h2-based servers; ours
    // take any, see `any_authority`).
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(connector)
        .await
        .map_err(|e| Failure::Unavailable(error_chain(&e)))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Failure::Unavailable(error_chain(&e)))?;
    let codec: ProstCodec<Req, Resp> = ProstCodec::default();
    let answer = grpc
        .unary(
            tonic::Request::new(req),
            PathAndQuery::from_static(method),
            codec,
        )
        .await;
    answer
        .map(tonic::Response::into_inner)
        .map_err(|status| match status.code() {
            Code::Unavailable => Failure::Unavailable(status.message().to_string()),
            Code::DeadlineExceeded => Failure::Deadline,
            _ => Failure::Status(status),
        })
}

/// An error and its sources on one line (tonic's transport errors say little at the top).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
