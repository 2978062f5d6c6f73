//! Sending one request with the gateway's retry rule: a 503 or a connection failure from
//! one endpoint is retried on another ready endpoint (Envoy's `retry_on: 503,reset,
//! connect-failure`), up to `max_attempts`, all within the request's deadline. Any other
//! answer is final. Every attempt is recorded, so a harness can see which member refused
//! and why.

use std::time::Duration;

use hyper::body::Bytes;
use serde::Serialize;
use tokio::time::Instant;

use super::balance::Balancer;
use super::client::{AttemptError, HttpClient, Reply};
use super::endpoints::Endpoint;

/// One attempt of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attempt {
    pub pod: Option<String>,
    pub address: String,
    /// HTTP status, when an answer came.
    pub status: Option<u16>,
    /// Why it did not succeed: the worker's `error` field of a 503 (`not ready`,
    /// `draining`), or the transport failure.
    pub error: Option<String>,
    pub latency_ms: f64,
}

/// The final answer of a request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub endpoint: Endpoint,
    pub status: u16,
    pub body: Bytes,
}

/// What happened to one request.
#[derive(Debug, Clone)]
pub struct Dispatch {
    pub attempts: Vec<Attempt>,
    /// The final answer: the first non-503 answer, else the last 503 when attempts ran
    /// out. `None` when no endpoint answered at all.
    pub answer: Option<Answer>,
    /// Why there is no 200, when there is none and no answer explains it.
    pub error: Option<String>,
}

impl Dispatch {
    /// True when the request got a 200.
    pub fn ok(&self) -> bool {
        self.answer.as_ref().is_some_and(|a| a.status == 200)
    }
}

/// The retry policy and the means to send.
#[derive(Clone)]
pub struct Dispatcher {
    balancer: Balancer,
    client: HttpClient,
    /// Attempts per request (first try included).
    pub max_attempts: u32,
    /// Pause before retry `k` is `k × retry_backoff` (bounded by the deadline), so a
    /// pool that refuses everywhere is not hammered.
    pub retry_backoff: Duration,
    /// Path requests are sent to.
    pub path: String,
    /// Longest one attempt may take (as Envoy's per-try timeout): a member whose host
    /// vanished mid-request never answers, and the request should move on to another
    /// member rather than spend its whole deadline there. `None`: the deadline only.
    pub attempt_timeout: Option<Duration>,
}

impl Dispatcher {
    pub fn new(balancer: Balancer, client: HttpClient, max_attempts: u32) -> Dispatcher {
        Dispatcher {
            balancer,
            client,
            max_attempts: max_attempts.max(1),
            retry_backoff: Duration::from_millis(10),
            path: "/generate".into(),
            attempt_timeout: None,
        }
    }

    pub fn balancer(&self) -> &Balancer {
        &self.balancer
    }

    /// Sends `body`, retrying as described, until `deadline`.
    pub async fn send(&self, body: Bytes, deadline: Instant) -> Dispatch {
        let mut attempts = Vec::new();
        let mut tried: Vec<Endpoint> = Vec::new();
        let mut last_refusal: Option<Answer> = None;
        let mut error = None;
        while attempts.len() < self.max_attempts as usize {
            if !attempts.is_empty() {
                let pause = self.retry_backoff * attempts.len() as u32;
                tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
            }
            let now = Instant::now();
            if now >= deadline {
                error = Some("deadline exceeded".to_owned());
                break;
            }
            let Some(pick) = self.balancer.pick(&tried) else {
                // Nothing ready: wait for an endpoint (not an attempt), within the deadline.
                let waited = tokio::time::timeout_at(deadline, self.balancer.wait_ready()).await;
                if !matches!(waited, Ok(true)) {
                    error = Some("no ready endpoints".to_owned());
                    break;
                }
                continue;
            };
            let ep = pick.endpoint.clone();
            let left = deadline - now;
            let budget = self.attempt_timeout.map_or(left, |t| t.min(left));
            let result = self
                .client
                .post_json(&ep, &self.path, body.clone(), budget)
                .await;
            drop(pick);
            let latency_ms = now.elapsed().as_secs_f64() * 1000.0;
            let mut attempt = Attempt {
                pod: ep.pod.clone(),
                address: ep.authority(),
                status: None,
                error: None,
                latency_ms,
            };
            match result {
                Ok(Reply {
                    status: 503, body, ..
                }) => {
                    attempt.status = Some(503);
                    attempt.error = Some(refusal_reason(&body));
                    attempts.push(attempt);
                    tried.push(ep.clone());
                    last_refusal = Some(Answer {
                        endpoint: ep,
                        status: 503,
                        body,
                    });
                }
                Ok(Reply { status, body, .. }) => {
                    attempt.status = Some(status);
                    if status != 200 {
                        attempt.error = Some(refusal_reason(&body));
                    }
                    attempts.push(attempt);
                    return Dispatch {
                        attempts,
                        answer: Some(Answer {
                            endpoint: ep,
                            status,
                            body,
                        }),
                        error: None,
                    };
                }
                Err(e @ AttemptError::Timeout(_)) if budget >= left => {
                    attempt.error = Some(e.to_string());
                    attempts.push(attempt);
                    error = Some("deadline exceeded".to_owned());
                    break;
                }
                Err(e) => {
                    attempt.error = Some(e.to_string());
                    attempts.push(attempt);
                    tried.push(ep);
                }
            }
        }
        let error = error.or_else(|| {
            attempts
                .last()
                .and_then(|a| a.error.clone())
                .map(|e| format!("{} attempts failed; last: {e}", attempts.len()))
        });
        Dispatch {
            attempts,
            answer: last_refusal,
            error,
        }
    }
}

/// The `error` field of a JSON answer, else the body's start.
fn refusal_reason(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_read_from_the_error_field() {
        assert_eq!(refusal_reason(br#"{"error":"draining"}"#), "draining");
        assert_eq!(refusal_reason(b"upstream down"), "upstream down");
    }
}
