//! Health probes and deadline-bounded waits.
//!
//! A wait polls a probe until it succeeds, failing early when the component's
//! process exits and at the deadline with the last probe error and the tail
//! of the component's log. etcd and kwok are probed over plain HTTP, the
//! Kubernetes components over HTTPS trusting the harness CA.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::{Error, Result};
use super::process::{Supervised, log_tail};

/// Time between two probes.
const INTERVAL: Duration = Duration::from_millis(100);
/// Time one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Polls `probe` until it returns Ok, `process` exits, or `timeout` passes.
pub(crate) async fn wait_healthy<F, Fut>(
    process: &mut Supervised,
    timeout: Duration,
    mut probe: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), String>>,
{
    let started = Instant::now();
    loop {
        process.check_running()?;
        let last_error = match tokio::time::timeout(PROBE_TIMEOUT, probe()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => error,
            Err(_) => format!("probe took over {PROBE_TIMEOUT:?}"),
        };
        if started.elapsed() >= timeout {
            return Err(Error::Unhealthy {
                component: process.component(),
                waited: started.elapsed(),
                last_error,
                log: process.log().to_owned(),
                log_tail: log_tail(process.log()),
            });
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

/// `GET path` over plain HTTP/1.0; Ok with the body when the status is 200.
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> std::result::Result<String, String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(body.to_owned())
    } else {
        Err(format!("GET {path}: {status} {}", body.trim()))
    }
}

/// `GET path` with a client; Ok when the server answers 200.
pub(crate) async fn kube_get(
    client: &kube::Client,
    path: &str,
) -> std::result::Result<String, String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| format!("GET {path}: {e}"))?;
    client
        .request_text(request)
        .await
        .map_err(|e| format!("GET {path}: {e}"))
}

/// A client without credentials for a component's secure port, trusting `ca`.
pub(crate) fn anonymous_client(url: &str, ca: &Path) -> Result<kube::Client> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| Error::Kubeconfig {
            path: ca.to_owned(),
            message: format!("bad url {url}: {e}"),
        })?;
    let mut config = kube::Config::new(uri);
    config.root_cert_file = Some(ca.to_owned());
    config.connect_timeout = Some(PROBE_TIMEOUT);
    config.read_timeout = Some(PROBE_TIMEOUT);
    config.default_retry = false;
    kube::Client::try_from(config).map_err(Error::kube(format!("client for {url}")))
}
