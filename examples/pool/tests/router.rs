//! The router's retry rule and the load generator's counters, against real local HTTP
//! servers (axum on 127.0.0.1): a member refusing with 503, a dead address, members that
//! serve, one that changes its digest; and the proxy in front of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use hcomm_examples::load::{self, AllowedDigests, LoadConfig, Outcome};
use hcomm_examples::proxy::{self, Proxy};
use hcomm_examples::router::{Balancer, Dispatcher, Endpoint, HttpClient};
use serde_json::{Value, json};

const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// Serves `app` on 127.0.0.1:0; the endpoint names `pod`.
async fn spawn(app: Router, pod: &str) -> Endpoint {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(l, app).await });
    Endpoint {
        address: "127.0.0.1".into(),
        port,
        pod: Some(pod.into()),
    }
}

/// A member that always refuses with 503 and `reason`.
async fn refusing(pod: &str, reason: &'static str) -> Endpoint {
    let app = Router::new().route(
        "/generate",
        post(move || async move {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({ "error": reason })),
            )
        }),
    );
    spawn(app, pod).await
}

/// A member that serves; `digest(n)` is the digest of its n-th answer (None: omitted).
async fn serving(
    pod: &'static str,
    digest: impl Fn(u64) -> Option<&'static str> + Clone + Send + Sync + 'static,
) -> Endpoint {
    let n = Arc::new(AtomicU64::new(0));
    let app = Router::new().route(
        "/generate",
        post(move || {
            let (n, digest) = (n.clone(), digest.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let i = n.fetch_add(1, Ordering::SeqCst);
                let mut v = json!({"pod": pod, "group": "decode", "rank": 0, "epoch": 1, "tokens": 1, "role": "decode"});
                if let Some(d) = digest(i) {
                    v["weights_digest"] = json!(d);
                }
                axum::Json(v)
            }
        }),
    );
    spawn(app, pod).await
}

/// An address nothing listens on.
fn dead(pod: &str) -> Endpoint {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    Endpoint {
        address: "127.0.0.1".into(),
        port,
        pod: Some(pod.into()),
    }
}

fn dispatcher(eps: Vec<Endpoint>, attempts: u32) -> Dispatcher {
    Dispatcher::new(
        Balancer::fixed(eps),
        HttpClient::new(Duration::from_millis(500)),
        attempts,
    )
}

fn config(concurrency: usize, requests: u64) -> LoadConfig {
    LoadConfig {
        concurrency,
        max_requests: Some(requests),
        request_timeout: Duration::from_secs(5),
        ..LoadConfig::default()
    }
}

async fn finish(run: load::LoadRun) -> load::LoadReport {
    tokio::time::timeout(Duration::from_secs(30), run.finish())
        .await
        .expect("the load run ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_dead_endpoints_are_retried_on_a_serving_member() {
    // Sorted so the very first pick (all idle) is the refusing member: a retry is certain.
    let eps = vec![
        refusing("a-not-ready", "not ready").await,
        dead("c-dead"),
        serving("b", |_| Some(D1)).await,
    ];
    let run = load::start(
        dispatcher(eps, 3),
        config(4, 40),
        AllowedDigests::only([D1]),
    );
    let live = run.stats();
    assert!(live.completed <= 40, "stats are readable while running");
    let report = finish(run).await;
    let s = &report.stats;
    assert_eq!(
        (s.completed, s.served, s.failed, s.wrong_digest),
        (40, 40, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.by_pod["b"].served, 40);
    assert!(s.retried > 0 && s.refused_not_ready > 0, "{s:?}");
    assert!(s.mixed_digest_members.is_empty());
    assert_eq!(report.records.len(), 40);
    let retried = report.records.iter().filter(|r| r.attempts > 1).count() as u64;
    assert_eq!(retried, s.retried);
    for r in &report.records {
        assert_eq!(r.outcome, Outcome::Served);
        assert_eq!(
            (r.pod.as_deref(), r.digest.as_deref(), r.status),
            (Some("b"), Some(D1), Some(200))
        );
        assert!(r.attempts <= 3 && r.attempts as usize == r.tried.len());
        let (last, before) = r.tried.split_last().unwrap();
        assert_eq!((last.pod.as_deref(), last.status), (Some("b"), Some(200)));
        for a in before {
            match a.pod.as_deref() {
                Some("a-not-ready") => {
                    assert_eq!(
                        (a.status, a.error.as_deref()),
                        (Some(503), Some("not ready"))
                    )
                }
                Some("c-dead") => {
                    assert!(
                        a.status.is_none() && a.error.as_deref().unwrap().starts_with("connect"),
                        "{a:?}"
                    )
                }
                other => panic!("unexpected attempt on {other:?}"),
            }
        }
    }
    let ids: std::collections::BTreeSet<u64> = report.records.iter().map(|r| r.id).collect();
    assert_eq!(ids, (0..40).collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_fails_only_after_every_attempt_was_refused() {
    let eps = vec![refusing("a", "draining").await];
    let report = finish(load::start(
        dispatcher(eps, 3),
        config(1, 3),
        AllowedDigests::any(),
    ))
    .await;
    let s = &report.stats;
    assert_eq!(
        (
            s.served,
            s.failed,
            s.retried,
            s.attempts,
            s.refused_draining
        ),
        (0, 3, 3, 9, 9),
        "{s:?}"
    );
    for r in &report.records {
        assert_eq!(
            (r.outcome, r.status, r.attempts),
            (Outcome::Failed, Some(503), 3)
        );
        assert!(r.error.is_some());
    }
    // Nothing ready at all: fails at once, without attempts.
    let report = finish(load::start(
        dispatcher(vec![], 3),
        config(1, 2),
        AllowedDigests::any(),
    ))
    .await;
    assert_eq!((report.stats.failed, report.stats.attempts), (2, 0));
    assert_eq!(
        report.records[0].error.as_deref(),
        Some("no ready endpoints")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_are_checked_against_a_set_that_changes_while_running() {
    // A member that rolls from D1 to D2 after 5 answers; the harness widens the allowed
    // set at that moment (here: the member does it before answering, deterministically).
    let allowed = AllowedDigests::only([D1]);
    let widen = allowed.clone();
    let eps = vec![
        serving("b", move |i| {
            if i < 5 {
                Some(D1)
            } else {
                widen.allow(D2);
                Some(D2)
            }
        })
        .await,
    ];
    let run = load::start(dispatcher(eps, 3), config(1, 10), allowed);
    let report = finish(run).await;
    let s = &report.stats;
    assert_eq!((s.served, s.wrong_digest, s.failed), (10, 0, 0), "{s:?}");
    assert_eq!(s.mixed_digest_members, vec!["b".to_string()]);
    assert_eq!(s.by_pod["b"].digests.len(), 2);

    // Not allowed, or missing: wrong_digest, still served.
    let eps = vec![serving("m", |i| if i % 2 == 0 { None } else { Some(D2) }).await];
    let report = finish(load::start(
        dispatcher(eps, 3),
        config(1, 4),
        AllowedDigests::only([D1]),
    ))
    .await;
    let s = &report.stats;
    assert_eq!((s.served, s.wrong_digest, s.failed), (4, 4, 0), "{s:?}");
    assert!(
        report
            .records
            .iter()
            .all(|r| r.outcome == Outcome::WrongDigest)
    );
    assert!(
        report.records[0]
            .error
            .as_deref()
            .unwrap()
            .contains("(missing)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duration_run_and_a_stopped_run_end_with_their_records() {
    let eps = vec![serving("b", |_| Some(D1)).await];
    let cfg = LoadConfig {
        concurrency: 2,
        rate: Some(100.0),
        duration: Some(Duration::from_millis(300)),
        request_timeout: Duration::from_secs(5),
        ..LoadConfig::default()
    };
    let report = finish(load::start(
        dispatcher(eps.clone(), 3),
        cfg,
        AllowedDigests::only([D1]),
    ))
    .await;
    let s = &report.stats;
    assert!(
        s.served > 0 && s.served <= 40,
        "paced at 100/s for 0.3 s: {s:?}"
    );
    assert_eq!(s.failed, 0);

    let cfg = LoadConfig {
        concurrency: 2,
        request_timeout: Duration::from_secs(5),
        ..LoadConfig::default()
    };
    let run = load::start(dispatcher(eps, 3), cfg, AllowedDigests::any());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while run.stats().served < 5 {
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(run.records_since(0).len() >= 5);
    run.stop();
    let report = finish(run).await;
    assert_eq!(report.stats.failed, 0);
    assert_eq!(report.records.len() as u64, report.stats.completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_with_the_same_retry_rule() {
    let eps = vec![
        refusing("a", "not ready").await,
        serving("b", |_| Some(D1)).await,
    ];
    let p = Proxy {
        dispatcher: dispatcher(eps, 3),
        request_timeout: Duration::from_secs(5),
    };
    let front = spawn(proxy::router(p), "proxy").await;
    let http = HttpClient::new(Duration::from_secs(1));
    let body = br#"{"prompt":"x","tokens":1}"#.to_vec();
    // The first pick is the refusing member (all idle, sorted first): one retry.
    let r = http
        .post_json(
            &front,
            "/generate",
            body.clone().into(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        (v["pod"].clone(), v["weights_digest"].clone()),
        (json!("b"), json!(D1))
    );
    assert_eq!(r.headers["x-hcomm-pod"], "b");
    assert_eq!(r.headers["x-hcomm-attempts"], "2");
    let eps: Value = serde_json::from_slice(
        &http
            .get(&front, "/endpoints", Duration::from_secs(5))
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(eps.as_array().unwrap().len(), 2);

    let empty = Proxy {
        dispatcher: dispatcher(vec![], 3),
        request_timeout: Duration::from_secs(5),
    };
    let front = spawn(proxy::router(empty), "proxy").await;
    let r = http
        .post_json(&front, "/generate", body.into(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["x-hcomm-attempts"], "0");
}

/// A member whose host vanished mid-request: it accepted the connection and never answers.
async fn silent(pod: &str) -> Endpoint {
    let app = Router::new().route(
        "/generate",
        post(|| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK
        }),
    );
    spawn(app, pod).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_never_answers_moves_on_after_the_attempt_timeout() {
    let eps = vec![silent("gone").await, serving("b", |_| Some(D1)).await];
    let mut d = dispatcher(eps, 3);
    d.attempt_timeout = Some(Duration::from_millis(300));
    let report = finish(load::start(d, config(2, 10), AllowedDigests::any())).await;
    let s = &report.stats;
    assert_eq!((s.served, s.failed), (10, 0), "{s:?}");
    assert!(
        s.by_pod["gone"].errors > 0,
        "the silent member was tried: {s:?}"
    );
    for r in report.records.iter().filter(|r| r.attempts > 1) {
        assert!(r.latency_ms < 2000.0, "moved on after ~300 ms: {r:?}");
    }
    // Without an attempt timeout the request waits out its whole deadline there.
    let eps = vec![silent("gone").await];
    let mut cfg = config(1, 1);
    cfg.request_timeout = Duration::from_millis(500);
    let report = finish(load::start(dispatcher(eps, 3), cfg, AllowedDigests::any())).await;
    assert_eq!(report.stats.failed, 1);
    assert_eq!(report.records[0].attempts, 1);
}
