//! `hcomm-router serve`: an HTTP front that forwards `POST /generate` to a ready endpoint
//! with the dispatcher's retry rule, as a gateway in front of the pool would.
//!
//! Answers: the endpoint's final answer as is (status and body), with `x-hcomm-pod` and
//! `x-hcomm-attempts` headers; 503 `{"error":"no ready endpoints"}` when nothing is
//! ready within the deadline; 502 `{"error":...}` when every attempt failed without an
//! answer; 504 when the deadline passed. `GET /endpoints` lists the ready endpoints;
//! `GET /healthz` answers `ok`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::router::Dispatcher;

/// Proxy state.
#[derive(Clone)]
pub struct Proxy {
    pub dispatcher: Dispatcher,
    /// Deadline of one proxied request, retries included.
    pub request_timeout: Duration,
}

/// The proxy's routes.
pub fn router(proxy: Proxy) -> Router {
    Router::new()
        .route("/generate", post(generate))
        .route("/endpoints", get(endpoints))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(proxy)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listen: SocketAddr,
    proxy: Proxy,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(Error::io(format!("listen on {listen}")))?;
    tracing::info!(addr = %listener.local_addr().map_err(Error::io("listener address"))?, "router listening");
    axum::serve(listener, router(proxy))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(Error::io("router HTTP server"))
}

async fn generate(State(p): State<Proxy>, body: Bytes) -> Response {
    let d = p
        .dispatcher
        .send(body, Instant::now() + p.request_timeout)
        .await;
    let attempts = d.attempts.len();
    let mut resp = match &d.answer {
        Some(a) => {
            let status = StatusCode::from_u16(a.status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut r = (status, a.body.clone()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if let Ok(v) = HeaderValue::from_str(&a.endpoint.label()) {
                r.headers_mut().insert("x-hcomm-pod", v);
            }
            r
        }
        None => {
            let error = d.error.clone().unwrap_or_else(|| "no answer".into());
            let status = if error == "no ready endpoints" {
                StatusCode::SERVICE_UNAVAILABLE
            } else if error == "deadline exceeded" {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            (status, Json(json!({ "error": error }))).into_response()
        }
    };
    resp.headers_mut()
        .insert("x-hcomm-attempts", HeaderValue::from(attempts));
    resp
}

async fn endpoints(State(p): State<Proxy>) -> Response {
    Json(p.dispatcher.balancer().ready()).into_response()
}
