//! The router's HTTP/1 client (hyper 1 + hyper-util's pooled client): one POST to one
//! endpoint, bounded in time and in answer size, with transport failures kept apart from
//! answers so the dispatcher can decide what to retry.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request, header};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::endpoints::Endpoint;

/// Largest answer body read (the worker's answers are a few hundred bytes).
pub const MAX_BODY: usize = 1 << 20;

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why an attempt got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    /// Could not connect (refused, unreachable, connect timeout).
    #[error("connect: {0}")]
    Connect(String),
    /// The connection failed after it was made (reset, closed mid-answer).
    #[error("transport: {0}")]
    Transport(String),
    /// No answer within the time left.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

/// A pooled HTTP/1 client.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

impl HttpClient {
    /// `connect_timeout` bounds a connect on its own, so an endpoint that drops SYNs costs
    /// one short wait and the request moves on to another endpoint.
    pub fn new(connect_timeout: Duration) -> HttpClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let inner = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        HttpClient { inner }
    }

    /// POSTs a JSON `body` to `http://<endpoint><path>`, answer read within `timeout`.
    pub async fn post_json(
        &self,
        endpoint: &Endpoint,
        path: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Reply, AttemptError> {
        self.request(Method::POST, endpoint, path, body, timeout)
            .await
    }

    /// GETs `http://<endpoint><path>` (e.g. a worker's `/stats`), within `timeout`.
    pub async fn get(
        &self,
        endpoint: &Endpoint,
        path: &str,
        timeout: Duration,
    ) -> Result<Reply, AttemptError> {
        self.request(Method::GET, endpoint, path, Bytes::new(), timeout)
            .await
    }

    async fn request(
        &self,
        method: Method,
        endpoint: &Endpoint,
        path: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Reply, AttemptError> {
        let uri = format!("http://{}{path}", endpoint.authority());
        let mut req = Request::builder().method(method).uri(&uri);
        if !body.is_empty() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| AttemptError::Connect(format!("bad request for {uri}: {e}")))?;
        let exchange = async {
            let resp = self.inner.request(req).await.map_err(|e| {
                if e.is_connect() {
                    AttemptError::Connect(error_chain(&e))
                } else {
                    AttemptError::Transport(error_chain(&e))
                }
            })?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| AttemptError::Transport(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok(Reply {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| AttemptError::Timeout(timeout))?
    }
}

/// The error and its causes on one line (hyper's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
