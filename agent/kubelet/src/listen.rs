//! The server half the PodResources stand-in and the CSI node plugin share: a Unix socket
//! only its owner may call, unary handlers with bounded requests, and a running set of
//! servers that stops and removes its sockets on shutdown or drop.

use std::convert::Infallible;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tonic::body::Body;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use crate::any_authority::AnyAuthority;

/// The largest request a handler decodes. Every request here is a few paths and names;
/// the callers are local (the kubelet, the testbed), but a socket is still an input.
pub(crate) const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// How long one call may take on the server, a slow request body included. The kubelet
/// gives its CSI calls two minutes (`csiTimeout`); nothing here should come near it.
const CALL_LIMIT: Duration = Duration::from_secs(120);

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket's directory or a stale socket could not be prepared.
    #[error("cannot prepare the socket {path}: {source}")]
    Prepare {
        /// The socket.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Binding the socket failed.
    #[error("cannot listen on the socket {path}: {source}")]
    Bind {
        /// The socket.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A symbolic link sits at the socket path; it is never followed nor replaced, since
    /// it could point a privileged server at a file of someone else's choosing.
    #[error("refusing to listen on {0}: it is a symbolic link")]
    Symlink(PathBuf),
    /// Something other than a socket sits at the socket path; only a stale socket is
    /// replaced, never a file or directory.
    #[error("refusing to listen on {0}: it exists and is not a socket")]
    NotASocket(PathBuf),
}

/// A bound socket: the listener and the inode it owns, so that stopping removes only its
/// own socket, never one a newer server has bound at the same path since.
pub(crate) struct Bound {
    listener: tokio::net::UnixListener,
    path: PathBuf,
    ino: u64,
}

/// Binds a Unix socket at `path` with mode 0600, creating its directory and replacing a
/// stale socket there.
///
/// Why the detour: a socket takes the process umask at bind, and a chmod afterwards leaves
/// a moment in which anyone may connect (and stay connected). So the socket is bound in a
/// fresh 0700 directory next to `path`, set to 0600, then renamed into place, which also
/// replaces a stale socket atomically. The directory's name starts with a dot, which the
/// kubelet's plugin watcher ignores.
pub(crate) fn bind(path: &Path) -> Result<Bound, ServeError> {
    let prepare = |source| ServeError::Prepare {
        path: path.to_path_buf(),
        source,
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(prepare(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a socket path needs a directory and a file name",
        )));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::create_dir_all(dir).map_err(prepare)?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Err(ServeError::Symlink(path.into())),
        Ok(m) if !m.file_type().is_socket() => return Err(ServeError::NotASocket(path.into())),
        Ok(_) => {} // a stale socket: the rename below replaces it
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(prepare(e)),
    }
    let mut staging_name = std::ffi::OsString::from(".");
    staging_name.push(name);
    staging_name.push(".bind");
    let staging = dir.join(staging_name);
    // Left over by a crash between mkdir and rename; it holds nothing but a socket.
    match std::fs::remove_dir_all(&staging) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(prepare(e)),
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(prepare)?;
    let bound = bind_in(&staging, path);
    let _ = std::fs::remove_dir_all(&staging);
    bound
}

fn bind_in(staging: &Path, path: &Path) -> Result<Bound, ServeError> {
    let bind_error = |source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    };
    let prepare = |source| ServeError::Prepare {
        path: path.to_path_buf(),
        source,
    };
    // Bound through the staging directory's descriptor: a socket address holds at most 107
    // bytes, and the staging path is longer than the socket's own (`/proc/self/fd/<n>/s`
    // is short whatever the directory's path).
    let dir = std::fs::File::open(staging).map_err(prepare)?;
    let tmp = PathBuf::from(format!("/proc/self/fd/{}/s", dir.as_raw_fd()));
    let listener = std::os::unix::net::UnixListener::bind(&tmp).map_err(bind_error)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(prepare)?;
    let ino = std::fs::metadata(&tmp).map_err(prepare)?.ino();
    std::fs::rename(&tmp, path).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let listener = tokio::net::UnixListener::from_std(listener).map_err(bind_error)?;
    Ok(Bound {
        listener,
        path: path.to_path_buf(),
        ino,
    })
}

/// Servers started by one call (one per socket); stopped, and their sockets removed, by
/// [`Self::shutdown`] or on drop.
#[derive(Debug)]
pub(crate) struct Serving {
    sockets: Vec<(PathBuf, u64)>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Default for Serving {
    fn default() -> Self {
        Self {
            sockets: Vec::new(),
            stop: watch::channel(false).0,
            tasks: Vec::new(),
        }
    }
}

/// One socket's service: every call goes to `answer` with the shared state, which routes
/// by method path (each server of this crate is one such function).
pub(crate) struct Route<S> {
    pub(crate) shared: Arc<S>,
    pub(crate) answer: fn(Arc<S>, http::Request<Body>) -> Answer,
}

impl<S> Clone for Route<S> {
    fn clone(&self) -> Self {
        Route {
            shared: self.shared.clone(),
            answer: self.answer,
        }
    }
}

impl<S> tower::Service<http::Request<Body>> for Route<S> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Answer {
        (self.answer)(self.shared.clone(), req)
    }
}

impl Serving {
    /// Serves `svc` on `bound` until stopped; `what` names it in the one line printed if
    /// the server fails.
    pub(crate) fn serve<S>(&mut self, what: &'static str, bound: Bound, svc: S)
    where
        S: tower::Service<
                http::Request<Body>,
                Response = http::Response<Body>,
                Error = Infallible,
                Future = Answer,
            > + Clone
            + Send
            + 'static,
    {
        let mut stopped = self.stop.subscribe();
        self.sockets.push((bound.path, bound.ino));
        // Whatever authority the client sends (the kubelet's plugin watcher sends the
        // escaped socket path, which h2 alone would reset): see `any_authority`.
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(bound.listener)
            .map(|accepted| accepted.map(AnyAuthority::new));
        self.tasks.push(tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .timeout(CALL_LIMIT)
                .serve_with_incoming_shutdown(svc, incoming, async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .await;
            if let Err(e) = result {
                eprintln!("{what} stopped: {e}");
            }
        }));
    }

    /// Stops accepting, waits (at most `grace`) for open calls, removes the sockets.
    pub(crate) async fn shutdown(mut self, grace: Duration) {
        self.stop.send_replace(true);
        let tasks = std::mem::take(&mut self.tasks);
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        let all = async {
            for task in tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(grace, all).await.is_err() {
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        self.remove_sockets();
    }

    fn remove_sockets(&mut self) {
        for (path, ino) in self.sockets.drain(..) {
            // Only our own socket: a newer server may have bound this path since.
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.ino() == ino) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

impl Drop for Serving {
    /// Stops at once (after [`Self::shutdown`] there is nothing left to stop).
    fn drop(&mut self) {
        self.stop.send_replace(true);
        self.tasks.iter().for_each(JoinHandle::abort);
        self.remove_sockets();
    }
}

/// What a service's `call` returns.
pub(crate) type Answer =
    Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

/// Answers one unary call with `handle`, decoding at most [`MAX_REQUEST_BYTES`].
///
/// `handle` runs on the runtime's thread, not `spawn_blocking`: every handler here is a few
/// map look-ups or file operations, shorter than a thread hand-off is worth.
pub(crate) async fn unary<Req, Resp, F>(req: http::Request<Body>, handle: F) -> http::Response<Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: Fn(Req) -> Result<Resp, Status> + Send + 'static,
{
    let handler = tower::service_fn(move |r: Request<Req>| {
        let answer = handle(r.into_inner()).map(Response::new);
        async move { answer }
    });
    let codec: ProstCodec<Resp, Req> = ProstCodec::default();
    tonic::server::Grpc::new(codec)
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .unary(handler, req)
        .await
}

/// Answers one server-streaming call with the messages of `stream` (a request of at
/// most [`MAX_REQUEST_BYTES`], ignored beyond its decoding: the device plugin's
/// ListAndWatch takes `Empty`). The call ends when the stream does.
#[cfg(feature = "device-plugin")]
pub(crate) async fn server_streaming<Req, Resp, St>(
    req: http::Request<Body>,
    stream: St,
) -> http::Response<Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    St: tokio_stream::Stream<Item = Result<Resp, Status>> + Send + 'static,
{
    let stream = std::sync::Mutex::new(Some(stream));
    let handler = tower::service_fn(move |_: Request<Req>| {
        let answer = stream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map(Response::new)
            .ok_or_else(|| Status::internal("one stream per call"));
        async move { answer }
    });
    let codec: ProstCodec<Resp, Req> = ProstCodec::default();
    tonic::server::Grpc::new(codec)
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .server_streaming(handler, req)
        .await
}

/// The answer to a method the service does not serve.
pub(crate) fn unimplemented(req: &http::Request<Body>) -> http::Response<Body> {
    Status::unimplemented(format!("unknown method {}", req.uri().path())).into_http()
}
