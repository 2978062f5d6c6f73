//! The worker against the agent's real local API server (`hcomm_agent::local_api`: the
//! hub the member tasks write and the Unix-socket server), with real weights in a real
//! weight store: 503 before the weights, 200 with the group's digest after, the pinned
//! set kept when `current` moves, in-flight reports reaching the agent, drain → 503 and a
//! final 0, SIGTERM finishing the request in flight.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use hcomm_agent::local_api::{Hub, server};
use hcomm_agent::weights::{DEFAULT_CHUNK_SIZE, WeightStore, manifest_digest};
use hcomm_crds::local_api::{Assignment, Notice};
use hcomm_examples::router::client::Reply;
use hcomm_examples::router::{Endpoint, HttpClient};
use hcomm_examples::worker::{self, LinkTiming, WorkerConfig};
use serde_json::{Value, json};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(10);

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hcomm-ex-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A weights set of a few files, one larger than a chunk.
fn write_weights(dir: &Path, seed: u8) {
    std::fs::create_dir_all(dir.join("shards")).unwrap();
    std::fs::write(dir.join("config.json"), format!("{{\"seed\":{seed}}}")).unwrap();
    let big: Vec<u8> = (0..(DEFAULT_CHUNK_SIZE as usize + 1000))
        .map(|i| (i as u8).wrapping_mul(seed))
        .collect();
    std::fs::write(dir.join("shards/model-0.bin"), big).unwrap();
}

/// Starts the agent's node socket server on `sock` with `hub`. Callers are not identified
/// (the worker here runs in no Pod; the Pod sockets and their caller check have their own
/// tests in the agent).
fn start_agent(sock: &Path, hub: &Hub) {
    let listener = server::bind(sock).unwrap();
    tokio::spawn(server::serve(
        listener,
        hub.clone(),
        server::Access {
            callers: hcomm_agent::local_api::caller::CallerCheck::Unchecked,
            ..server::Access::default()
        },
        server::Serves::Node,
        std::future::pending(),
    ));
}

fn assignment(weights_path: Option<String>) -> Assignment {
    Assignment {
        group: "decode".into(),
        rank: 2,
        world: 4,
        local_ranks: 1,
        devices: vec![2],
        weights_path,
        epoch: 3,
        ..Default::default()
    }
}

fn local(addr: std::net::SocketAddr) -> Endpoint {
    Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
        pod: None,
    }
}

async fn generate(http: &HttpClient, ep: &Endpoint, tokens: u32) -> Reply {
    let body = serde_json::to_vec(&json!({"prompt": "hi", "tokens": tokens})).unwrap();
    http.post_json(ep, "/generate", body.into(), WAIT)
        .await
        .expect("the worker answers")
}

fn json_of(r: &Reply) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

async fn stats(http: &HttpClient, ep: &Endpoint) -> Value {
    let r = http.get(ep, "/stats", WAIT).await.expect("stats");
    assert_eq!(r.status, 200);
    json_of(&r)
}

/// Polls `/stats` until `pred` holds (bounded).
async fn stats_until(
    http: &HttpClient,
    ep: &Endpoint,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = stats(http, ep).await;
        if pred(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}; stats {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the agent's record of the worker's in-flight count is `want`.
async fn inflight_reaches(rx: &mut watch::Receiver<Option<u64>>, want: u64) {
    let reached = tokio::time::timeout(WAIT, rx.wait_for(|n| *n == Some(want)))
        .await
        .map(|r| r.is_ok())
        .unwrap_or(false);
    assert!(
        reached,
        "agent never saw in-flight {want}; last {:?}",
        *rx.borrow()
    );
}

fn fast_timing() -> LinkTiming {
    LinkTiming {
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        watch_idle: Duration::from_secs(1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_serves_only_loaded_pinned_weights_reports_inflight_and_drains() {
    let dir = scratch("lifecycle");
    let src = dir.join("src-v1");
    write_weights(&src, 3);
    let digest_v1 = manifest_digest(&src, DEFAULT_CHUNK_SIZE).unwrap();
    let store = WeightStore::open(dir.join("store")).unwrap();
    let current = store
        .import_dir(&src, &digest_v1, DEFAULT_CHUNK_SIZE)
        .unwrap();
    let sock = dir.join("agent.sock");

    // The worker starts before the agent's socket exists: it must keep retrying.
    let mut cfg = WorkerConfig::new("w-0", "127.0.0.1:0".parse().unwrap(), sock.clone());
    cfg.namespace = Some("default".into());
    cfg.step = Duration::from_millis(10);
    cfg.role = "decode".into();
    cfg.agent_timeout = Duration::from_secs(1);
    cfg.timing = fast_timing();
    let w = worker::start(cfg).await.unwrap();
    let ep = local(w.local_addr());
    let http = HttpClient::new(Duration::from_secs(1));

    assert_eq!(http.get(&ep, "/healthz", WAIT).await.unwrap().status, 200);
    let r = generate(&http, &ep, 1).await;
    assert_eq!(
        (r.status, json_of(&r)),
        (503, json!({"error": "not ready"}))
    );

    // The agent comes up with the member verified but its weights not yet synced.
    let hub = Hub::default();
    let slot = hub.slot("default/w-0");
    slot.assignment
        .send_replace(Some(assignment(Some(current.display().to_string()))));
    let mut inflight = slot.inflight.subscribe();
    start_agent(&sock, &hub);
    stats_until(&http, &ep, "assignment learnt", |s| s["epoch"] == 3).await;
    let r = generate(&http, &ep, 1).await;
    assert_eq!(r.status, 503, "assignment alone is not readiness");

    // Weights synced: the worker pins the version directory and digests it.
    hub.notify(
        "default/w-0",
        Notice::WeightsReady {
            path: Some(current.display().to_string()),
        },
    );
    let s = stats_until(&http, &ep, "weights loaded", |s| {
        !s["weights_digest"].is_null()
    })
    .await;
    assert_eq!(s["weights_digest"], digest_v1.to_string());
    assert_eq!(s["rejected_not_ready"], 2);
    // ... and told the agent it serves (what opens an annotated Pod's readiness gate).
    let mut serving = slot.serving.subscribe();
    tokio::time::timeout(WAIT, serving.wait_for(|s| *s))
        .await
        .expect("the worker reports serving after loading")
        .expect("slot alive");
    let r = generate(&http, &ep, 3).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        json_of(&r),
        json!({"pod": "w-0", "group": "decode", "rank": 2, "epoch": 3,
               "weights_digest": digest_v1.to_string(), "tokens": 3, "role": "decode", "comm": "tcp"})
    );

    // In-flight reports reach the agent, and the final 0 is never lost.
    let long = {
        let (http, ep) = (http.clone(), ep.clone());
        tokio::spawn(async move { generate(&http, &ep, 50).await })
    };
    inflight_reaches(&mut inflight, 1).await;
    assert_eq!(long.await.unwrap().status, 200);
    inflight_reaches(&mut inflight, 0).await;

    // A new version becomes `current` on the node; the worker keeps serving its pinned
    // set. Events are handled in order, so once epoch 4 shows, the repeated
    // weights_ready before it was handled too.
    let src2 = dir.join("src-v2");
    write_weights(&src2, 5);
    let digest_v2 = manifest_digest(&src2, DEFAULT_CHUNK_SIZE).unwrap();
    assert_ne!(digest_v1, digest_v2);
    store
        .import_dir(&src2, &digest_v2, DEFAULT_CHUNK_SIZE)
        .unwrap();
    assert_eq!(store.current().unwrap(), Some(digest_v2));
    hub.notify(
        "default/w-0",
        Notice::WeightsReady {
            path: Some(current.display().to_string()),
        },
    );
    hub.notify("default/w-0", Notice::EpochChanged { epoch: 4 });
    stats_until(&http, &ep, "epoch 4", |s| s["epoch"] == 4).await;
    let r = json_of(&generate(&http, &ep, 1).await);
    assert_eq!(
        (r["epoch"].clone(), r["weights_digest"].clone()),
        (json!(4), json!(digest_v1.to_string()))
    );

    // Drain: no new work, the request in flight finishes, the agent hears 0.
    let long = {
        let (http, ep) = (http.clone(), ep.clone());
        tokio::spawn(async move { generate(&http, &ep, 500).await })
    };
    // Wait on the worker itself: the agent may still be hearing the late 1-then-0 of the
    // epoch-4 request above, so its 1 does not prove the long request has started.
    stats_until(&http, &ep, "long request started", |s| s["inflight"] == 1).await;
    hub.notify("default/w-0", Notice::DrainRequested { deadline: None });
    let s = stats_until(&http, &ep, "draining", |s| s["draining"] == true).await;
    assert_eq!(s["inflight"], 1, "the long request is still in flight");
    let r = generate(&http, &ep, 1).await;
    assert_eq!((r.status, json_of(&r)), (503, json!({"error": "draining"})));
    // The drain itself triggers a report, so the agent hears the 1 even when an earlier
    // request's late 1-then-0 reports were still on their way when the drain began.
    inflight_reaches(&mut inflight, 1).await;
    assert_eq!(long.await.unwrap().status, 200);
    inflight_reaches(&mut inflight, 0).await;
    let s = stats(&http, &ep).await;
    assert_eq!(
        (s["rejected_draining"].clone(), s["inflight"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(s["served"], 4);

    tokio::time::timeout(WAIT, w.shutdown())
        .await
        .unwrap()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_binary_serves_a_group_without_weights_and_finishes_in_flight_on_sigterm() {
    let dir = scratch("sigterm");
    let sock = dir.join("agent.sock");
    let hub = Hub::default();
    let slot = hub.slot("default/w-1");
    slot.assignment.send_replace(Some(assignment(None)));
    // A group without weights is synced at once with no path (replayed to the watcher).
    hub.notify("default/w-1", Notice::WeightsReady { path: None });
    let mut inflight = slot.inflight.subscribe();
    start_agent(&sock, &hub);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hcomm-worker"))
        .args(["--role", "prefill", "--step-ms", "10"])
        .env("POD_NAME", "w-1")
        .env("POD_NAMESPACE", "default")
        .env("POD_IP", "192.0.2.1")
        .env("HCOMM_WORKER_LISTEN", format!("127.0.0.1:{port}"))
        .env(hcomm_crds::contract::env::AGENT_SOCKET, &sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let ep = Endpoint {
        address: "127.0.0.1".into(),
        port,
        pod: None,
    };
    let http = HttpClient::new(Duration::from_secs(1));
    let deadline = tokio::time::Instant::now() + WAIT;
    let s = loop {
        if let Ok(r) = http.get(&ep, "/stats", Duration::from_secs(1)).await {
            let s = json_of(&r);
            if s["weights_digest"] == "none" {
                break s;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "worker never became ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(s["served"], 0);
    let r = json_of(&generate(&http, &ep, 2).await);
    assert_eq!(
        (
            r["weights_digest"].clone(),
            r["role"].clone(),
            r["pod"].clone()
        ),
        (json!("none"), json!("prefill"), json!("w-1"))
    );

    // The short request's own "1 in flight" may still be the last report: wait for its
    // "0", so the "1" below is the long request's and SIGTERM comes while it is in flight.
    inflight_reaches(&mut inflight, 0).await;
    let long = {
        let (http, ep) = (http.clone(), ep.clone());
        tokio::spawn(async move { generate(&http, &ep, 100).await })
    };
    inflight_reaches(&mut inflight, 1).await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(
        long.await.unwrap().status,
        200,
        "the request in flight is finished"
    );
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
    inflight_reaches(&mut inflight, 0).await;
    let after = http
        .post_json(
            &ep,
            "/generate",
            br#"{"tokens":1}"#.to_vec().into(),
            Duration::from_secs(2),
        )
        .await;
    assert!(after.is_err(), "nothing listens after exit");
    let _ = std::fs::remove_dir_all(&dir);
}
