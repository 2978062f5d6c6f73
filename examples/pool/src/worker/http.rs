//! The worker's HTTP API: `POST /generate`, `GET /stats`, `GET /healthz`, `GET /metrics`.
//!
//! `/generate` sleeps one `step` per token — the time decode steps would take — so load
//! behaves like inference load (requests overlap, drains have something to wait for),
//! and the token clock feeds the load signals of [`super::metrics`].
//! Rejections say why, because a harness reads them: `not ready` means a router sent
//! traffic before the member's readiness gate allowed it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::metrics::{Outcome, WorkerMetrics};
use super::state::{Admit, WorkerState};

/// A generation request.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct GenerateRequest {
    #[serde(default)]
    pub prompt: String,
    pub tokens: u32,
}

/// The answer to a served generation request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct GenerateResponse {
    pub pod: String,
    pub group: String,
    pub rank: u32,
    pub epoch: u64,
    pub weights_digest: String,
    pub tokens: u32,
    pub role: String,
    /// The data path the member serves on (`tcp`, `hccl`).
    #[serde(default)]
    pub comm: String,
}

/// Handler state.
#[derive(Clone)]
pub struct Api {
    pub state: Arc<WorkerState>,
    /// Time per generated token.
    pub step: Duration,
    /// Largest `tokens` accepted (bounds the time one request may hold the worker).
    pub max_tokens: u32,
    /// The load signals served on `/metrics`.
    pub metrics: Arc<WorkerMetrics>,
}

/// The worker's routes.
pub fn router(api: Api) -> Router {
    Router::new()
        .route("/generate", post(generate))
        .route("/stats", get(stats))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(api)
}

fn unavailable(reason: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "error": reason })),
    )
        .into_response()
}

async fn generate(State(api): State<Api>, Json(req): Json<GenerateRequest>) -> Response {
    if req.tokens > api.max_tokens {
        api.metrics.count(Outcome::Invalid);
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": format!("tokens must be at most {}", api.max_tokens) })),
        )
            .into_response();
    }
    let guard = match api.state.admit() {
        Admit::Accepted(g) => g,
        Admit::NotReady => {
            api.metrics.count(Outcome::RejectedNotReady);
            return unavailable("not ready");
        }
        Admit::Draining => {
            api.metrics.count(Outcome::RejectedDraining);
            return unavailable("draining");
        }
    };
    // One sleep per token on a deadline clock: the token gaps are real (what the
    // inter-token histogram sees) and the total stays `tokens × step` however late a
    // wake-up comes.
    let mut generation = api.metrics.generation();
    let start = tokio::time::Instant::now();
    for n in 1..=req.tokens {
        tokio::time::sleep_until(start + api.step * n).await;
        generation.token();
    }
    drop(generation);
    // Identity is read after the decode steps: the epoch is the one the answer was
    // produced in. Admission guaranteed readiness, and readiness never goes back.
    let Some(id) = api.state.identity() else {
        return unavailable("not ready");
    };
    api.state.count_served();
    api.metrics.count(Outcome::Served);
    drop(guard);
    Json(GenerateResponse {
        pod: api.state.pod.clone(),
        group: id.group,
        rank: id.rank,
        epoch: id.epoch,
        weights_digest: id.weights_digest,
        tokens: req.tokens,
        role: api.state.role.clone(),
        comm: id.comm.to_owned(),
    })
    .into_response()
}

async fn stats(State(api): State<Api>) -> Response {
    let mut v = serde_json::to_value(api.state.stats()).unwrap_or_default();
    if let Some(e) = api.state.load_error() {
        v["weights_error"] = json!(e);
    }
    Json(v).into_response()
}

async fn metrics(State(api): State<Api>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        api.metrics.render(),
    )
        .into_response()
}
