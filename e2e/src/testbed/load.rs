//! Steady load through the reference router (`hcomm-router load`), run as its own
//! process in the root namespace — where a gateway would run — following the pool's
//! Service EndpointSlices. It prints one JSON stats line per interval and a final one on
//! SIGTERM; [`LoadRun`] keeps the latest.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::{Error, Result, Testbed, binaries};

/// Counters of one member as the router saw it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct PodStats {
    /// Answers 200.
    pub served: u64,
    /// Attempts it refused with 503 `not ready` (traffic sent too early).
    pub refused_not_ready: u64,
    /// Attempts it refused with 503 `draining` (retried elsewhere).
    pub refused_draining: u64,
    /// Other failed attempts (connection errors, other statuses).
    pub errors: u64,
    /// Unix time of the first 200, in ms.
    pub first_ok_unix_ms: Option<u64>,
    /// Unix time of the last 200, in ms.
    pub last_ok_unix_ms: Option<u64>,
    /// Distinct weights digests it answered with.
    pub digests: Vec<String>,
}

/// What the router reports.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct LoadStats {
    /// Requests answered 200 (possibly after retries; includes `wrong_digest`).
    pub served: u64,
    /// Requests that never got a 200 within their deadline.
    pub failed: u64,
    /// Answers whose digest was missing or not one of the expected ones.
    pub wrong_digest: u64,
    /// Requests that needed more than one attempt.
    pub retried: u64,
    /// Attempts refused with 503 `not ready`.
    pub refused_not_ready: u64,
    /// Attempts refused with 503 `draining`.
    pub refused_draining: u64,
    /// Per member Pod.
    pub by_pod: BTreeMap<String, PodStats>,
    /// Members that answered with more than one digest.
    pub mixed_digest_members: Vec<String>,
    /// The first failed requests, one line each (start, error, every attempt).
    pub first_failures: Vec<String>,
    /// Served answers by the communicator backend the answering member served on.
    #[serde(default)]
    pub by_comm: BTreeMap<String, u64>,
    /// The last line was the final one.
    #[serde(rename = "final")]
    pub finished: bool,
}

impl LoadStats {
    /// No request failed, none was answered with wrong, missing or mixed weights, and no
    /// router reached a member before its readiness gate was True (a `not ready` refusal).
    /// The error says what was wrong, with the first failed requests.
    pub fn ensure_clean(&self, when: &str) -> std::result::Result<(), String> {
        if self.served == 0 {
            return Err(format!("{when}: nothing served"));
        }
        if self.failed == 0
            && self.wrong_digest == 0
            && self.mixed_digest_members.is_empty()
            && self.refused_not_ready == 0
        {
            return Ok(());
        }
        Err(format!(
            "{when}: failed={} wrong_digest={} mixed={:?} refused_not_ready={}; first failures: {:#?}",
            self.failed,
            self.wrong_digest,
            self.mixed_digest_members,
            self.refused_not_ready,
            self.first_failures
        ))
    }
}

/// A running load generator.
pub struct LoadRun {
    child: Child,
    latest: Arc<Mutex<LoadStats>>,
    reader: JoinHandle<()>,
    service: String,
}

/// How to load a pool.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The pool's Service.
    pub service: String,
    /// Its namespace.
    pub namespace: String,
    /// Requests in flight at once.
    pub concurrency: u32,
    /// Tokens per request (each takes the worker's `--step-ms`).
    pub tokens: u32,
    /// Digests an answer may carry.
    pub expect_digests: Vec<String>,
}

impl Testbed {
    /// Starts `hcomm-router load` against `options.service`.
    pub fn start_load(&self, options: &LoadOptions) -> Result<LoadRun> {
        let log = self.log_file(&format!("router-{}", options.service))?;
        let mut cmd = Command::new(binaries::find(binaries::ROUTER)?);
        cmd.arg("load")
            .args(["--service", &options.service])
            .args(["--namespace", &options.namespace])
            .args(["--concurrency", &options.concurrency.to_string()])
            .args(["--tokens", &options.tokens.to_string()])
            .args(["--progress", "500ms", "--progress-format", "json"])
            // A member whose host vanishes never answers; move on after 2 s (each
            // request takes tokens × step-ms, well under a second).
            .args(["--attempt-timeout", "2s"])
            // Every request's attempts, for post-mortems (written when the load stops).
            .args([
                "--records",
                &self
                    .dir
                    .join("logs")
                    .join(format!(
                        "router-{}-{}.records.jsonl",
                        options.service,
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.as_millis())
                            .unwrap_or_default()
                    ))
                    .display()
                    .to_string(),
            ]);
        if !options.expect_digests.is_empty() {
            cmd.args(["--expect-digest", &options.expect_digests.join(",")]);
        }
        if !self.hosts.is_isolated() {
            // The EndpointSlice API refuses loopback Pod addresses.
            cmd.args(["--discovery", "pods"]);
        }
        cmd.env("KUBECONFIG", self.cp.kubeconfig_path())
            .env("RUST_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = cmd.spawn().map_err(Error::io("start hcomm-router load"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let latest = Arc::new(Mutex::new(LoadStats::default()));
        let sink = latest.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(stats) = serde_json::from_str::<LoadStats>(&line) {
                    *sink.lock().expect("load stats") = stats;
                }
            }
        });
        Ok(LoadRun {
            child,
            latest,
            reader,
            service: options.service.clone(),
        })
    }
}

impl Drop for LoadRun {
    /// A run dropped without [`LoadRun::stop`] (a failing scenario) still ends gracefully,
    /// so the router writes its per-request records for the post-mortem.
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }
}

impl LoadRun {
    /// The latest stats line.
    pub fn latest(&self) -> LoadStats {
        self.latest.lock().expect("load stats").clone()
    }

    /// Waits until every member in `members` has answered at least `n` requests.
    pub async fn wait_served(
        &self,
        members: &[super::MemberPod],
        n: u64,
        within: Duration,
    ) -> Result<LoadStats> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let s = self.latest();
            if members
                .iter()
                .all(|m| s.by_pod.get(&m.name).is_some_and(|p| p.served >= n))
            {
                return Ok(s);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "every member of {} to serve {n} requests: {members:?} {s:?}",
                        self.service
                    ),
                    after: within,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then the final stats (in-flight requests finish first).
    pub async fn stop(mut self) -> Result<LoadStats> {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        let within = Duration::from_secs(20);
        let waited = tokio::time::timeout(within, async {
            let _ = self.child.wait().await;
            let _ = (&mut self.reader).await;
        })
        .await;
        if waited.is_err() {
            let _ = self.child.kill().await;
            return Err(Error::Timeout {
                what: format!("router load on {} to stop", self.service),
                after: within,
            });
        }
        let stats = self.latest();
        if !stats.finished {
            return Err(Error::Io {
                what: format!("router load on {}", self.service),
                source: std::io::Error::other("exited without its final stats line"),
            });
        }
        Ok(stats)
    }
}
