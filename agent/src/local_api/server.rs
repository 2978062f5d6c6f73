//! The Unix-socket server of the local API. It takes its listener, the [`Scope`] of the
//! socket (the node socket, or one Pod's) and a shutdown future (as mini-redis does),
//! bounds concurrent connections per socket, identifies every caller (`SO_PEERCRED` via
//! tokio, no `unsafe`, then [`super::caller`]) before reading a byte from it, bounds the
//! wait for each request line, and answers line by line. On a Pod's socket a request acts
//! on that Pod only: the `pod`/`namespace` it names must be the socket's.
//! Size: the server and its tests of every refusal (caller, foreign Pod, deadline, cap).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};

use super::caller::{self, CallerCheck, Refusal, Scope};
use super::hub::{Hub, Slot};
use crate::error::{Error, Result};
use hcomm_crds::local_api::{MAX_LINE, Notice, Request, Response, parse_request};

/// Concurrent connections served on the node socket.
pub const MAX_CONNECTIONS: usize = 256;
/// Concurrent connections served on one Pod's socket: a worker holds a watch, a kept
/// report connection and a few short ones per process, so 64 covers 16 processes; a Pod
/// that opens more only delays itself, never another Pod.
pub const MAX_POD_CONNECTIONS: usize = 64;
/// How long a request line may take to arrive, counted from the end of the previous
/// answer: a silent or trickling client gives its slot back after this.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(300);

/// Who may connect, and how long they may stay silent.
#[derive(Debug, Clone)]
pub struct Access {
    /// Allowed peer uids; empty allows any local caller that can open the socket (its
    /// mode is 0660, so that is root and the socket's group).
    pub allowed_uids: Vec<u32>,
    /// Whether every caller's Pod is identified (see [`CallerCheck`]).
    pub callers: CallerCheck,
    /// Where the callers' `/proc/<pid>/cgroup` are read (`/proc`).
    pub proc_root: PathBuf,
    /// See [`REQUEST_DEADLINE`].
    pub request_deadline: Duration,
}

impl Default for Access {
    fn default() -> Access {
        Access {
            allowed_uids: Vec::new(),
            callers: CallerCheck::Strict,
            proc_root: "/proc".into(),
            request_deadline: REQUEST_DEADLINE,
        }
    }
}

/// The Pod a Pod socket belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodIdentity {
    /// The hub key (`namespace/pod`).
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What a connection may act on.
#[derive(Debug, Clone)]
pub enum Serves {
    /// The node socket: any member on the node, by name.
    Node,
    /// One Pod's socket.
    Pod(PodIdentity),
}

impl Serves {
    fn scope(&self) -> Scope {
        match self {
            Serves::Node => Scope::Node,
            Serves::Pod(p) => Scope::Pod { uid: p.uid.clone() },
        }
    }

    fn cap(&self) -> usize {
        match self {
            Serves::Node => MAX_CONNECTIONS,
            Serves::Pod(_) => MAX_POD_CONNECTIONS,
        }
    }

    /// The slot a request acts on: on a Pod's socket the request must name that Pod.
    fn slot(&self, hub: &Hub, req: &Request) -> std::result::Result<Arc<Slot>, String> {
        let (pod, ns) = req.target();
        match self {
            Serves::Node => hub.find(pod, ns),
            Serves::Pod(own) => {
                if pod != own.name || ns.is_some_and(|n| n != own.namespace) {
                    return Err(format!(
                        "ForeignPod: this socket belongs to Pod {}, the request names {}{pod}",
                        own.key(),
                        ns.map(|n| format!("{n}/")).unwrap_or_default()
                    ));
                }
                hub.get(&own.key())
                    .ok_or_else(|| format!("no member {} on this node", own.key()))
            }
        }
    }
}

/// Binds the socket at `path` (replacing a stale one) with mode 0660.
pub fn bind(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
    }
    if path.exists() {
        std::fs::remove_file(path)
            .map_err(Error::io(format!("remove stale {}", path.display())))?;
    }
    let l = UnixListener::bind(path).map_err(Error::io(format!("bind {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(Error::io(format!("chmod {}", path.display())))?;
    Ok(l)
}

/// Who is on the other end of `stream`, and whether they may use this socket.
fn check_caller(
    stream: &UnixStream,
    access: &Access,
    serves: &Serves,
) -> std::result::Result<(), Refusal> {
    let cred = stream.peer_cred().ok();
    let found = match access.callers {
        // Not read at all when it is not used.
        CallerCheck::Unchecked => caller::CallerPod::Node,
        CallerCheck::Strict => caller::identify(cred.and_then(|c| c.pid()), &access.proc_root),
    };
    caller::authorize(
        &serves.scope(),
        cred.map(|c| c.uid()),
        &access.allowed_uids,
        &found,
        access.callers,
    )
}

/// Serves the socket of `serves` until `shutdown` resolves; then every open connection
/// (watches included) ends too.
pub async fn serve(
    listener: UnixListener,
    hub: Hub,
    access: Access,
    serves: Serves,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(serves.cap()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let access = Arc::new(access);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => {
                let _ = stop_tx.send(true);
                return;
            }
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "local API accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(serves = ?serves, "local API: too many connections on this socket, refusing one");
            let mut s = stream;
            let _ = write_line(
                &mut s,
                &Response::error("TooManyConnections: try again later"),
            )
            .await;
            continue;
        };
        if let Err(refusal) = check_caller(&stream, &access, &serves) {
            let pid = stream.peer_cred().ok().and_then(|c| c.pid());
            tracing::warn!(serves = ?serves, ?pid, category = refusal.category(), %refusal, "local API: caller refused");
            let mut s = stream;
            let _ = write_line(&mut s, &Response::error(refusal.to_string())).await;
            continue;
        }
        let (hub, serves, access) = (hub.clone(), serves.clone(), access.clone());
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = connection(stream, hub, &serves, &access) => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "local API connection ended");
                    }
                }
                _ = stop.wait_for(|s| *s) => {}
            }
            drop(permit);
        });
    }
}

async fn write_line<T: serde::Serialize>(
    w: &mut (impl AsyncWriteExt + Unpin),
    v: &T,
) -> std::io::Result<()> {
    let mut s = serde_json::to_string(v).unwrap_or_else(|_| "{}".into());
    s.push('\n');
    w.write_all(s.as_bytes()).await
}

async fn connection(
    stream: UnixStream,
    hub: Hub,
    serves: &Serves,
    access: &Access,
) -> std::io::Result<()> {
    let deadline = access.request_deadline;
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::new(r);
    let mut line = String::new();
    loop {
        line.clear();
        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
        let Ok(n) = tokio::time::timeout(deadline, limited.read_line(&mut line)).await else {
            let _ = write_line(
                &mut w,
                &Response::error(format!("RequestDeadline: no request within {deadline:?}")),
            )
            .await;
            return Ok(());
        };
        let n = n?;
        if n == 0 {
            return Ok(());
        }
        if !line.ends_with('\n') && n > MAX_LINE {
            write_line(&mut w, &Response::error("request line too long")).await?;
            return Ok(());
        }
        // The caller is checked again for every request, not only at accept: the process
        // that connected may have exited and its pid been reused by another Pod's process
        // (then refused), or be gone (`CallerUnidentified`). The connection then ends.
        if let Err(refusal) = check_caller(reader.get_ref().as_ref(), access, serves) {
            tracing::warn!(serves = ?serves, category = refusal.category(), %refusal, "local API: caller refused on a later request");
            write_line(&mut w, &Response::error(refusal.to_string())).await?;
            return Ok(());
        }
        let req = match parse_request(&line) {
            Ok(r) => r,
            Err(e) => {
                write_line(&mut w, &Response::error(e)).await?;
                continue;
            }
        };
        let slot = match serves.slot(&hub, &req) {
            Ok(s) => s,
            Err(e) => {
                write_line(&mut w, &Response::error(e)).await?;
                continue;
            }
        };
        match req {
            Request::Assignment { .. } => {
                let a = slot.assignment.borrow().clone();
                match a {
                    Some(assignment) => {
                        write_line(
                            &mut w,
                            &Response::Assignment {
                                ok: true,
                                assignment: Box::new(assignment),
                            },
                        )
                        .await?
                    }
                    None => {
                        write_line(
                            &mut w,
                            &Response::error("assignment not known yet (member not verified)"),
                        )
                        .await?
                    }
                }
            }
            Request::ReportInflight { n, .. } => {
                slot.inflight.send_replace(Some(n));
                write_line(&mut w, &Response::Ok { ok: true }).await?;
            }
            Request::WeightsReady { .. } => {
                let state = slot.weights.borrow().clone();
                let (ready, path) = match state {
                    Some(p) => (true, p),
                    None => (false, None),
                };
                write_line(
                    &mut w,
                    &Response::Weights {
                        ok: true,
                        ready,
                        path,
                    },
                )
                .await?;
            }
            Request::ReportLoad { load, .. } => {
                // The drain waits on the in-flight count, whichever report carried it.
                slot.inflight.send_replace(Some(load.in_flight));
                slot.load.send_replace(Some(load));
                write_line(&mut w, &Response::Ok { ok: true }).await?;
            }
            Request::Serving { .. } => {
                slot.serving.send_replace(true);
                write_line(&mut w, &Response::Ok { ok: true }).await?;
            }
            Request::CannotServe { reason, .. } => {
                slot.cannot_serve.send_replace(Some(worker_reason(&reason)));
                write_line(&mut w, &Response::Ok { ok: true }).await?;
            }
            Request::Watch { .. } => {
                write_line(&mut w, &Response::Ok { ok: true }).await?;
                let mut rx = slot.notices.subscribe();
                // Replay the state a late watcher would otherwise miss.
                let weights = slot.weights.borrow().clone();
                let drain = slot.drain.borrow().clone();
                if let Some(path) = weights {
                    write_line(&mut w, &Notice::WeightsReady { path }).await?;
                }
                if let Some(deadline) = drain {
                    write_line(&mut w, &Notice::DrainRequested { deadline }).await?;
                }
                // Until the member goes or the worker hangs up. A watch can stay quiet for
                // hours, so the worker's side is read too: without that, a worker that
                // exits between notices would leave this connection (and its fd) open
                // for the member's whole life.
                let mut scratch = [0u8; 256];
                loop {
                    tokio::select! {
                        notice = rx.recv() => match notice {
                            Ok(n) => write_line(&mut w, &n).await?,
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => return Ok(()),
                        },
                        read = reader.read(&mut scratch) => {
                            // Nothing more is expected on a watch; EOF or an error ends it.
                            if read? == 0 {
                                return Ok(());
                            }
                        }
                    }
                }
            }
        }
    }
}

use tokio::io::AsyncReadExt as _;

/// A worker's own words, made fit for a Pod condition: control characters become spaces,
/// and at most [`hcomm_crds::local_api::CANNOT_SERVE_REASON_MAX`] bytes are kept (on a
/// character boundary). A worker is untrusted; its reason is shown, never interpreted.
fn worker_reason(reason: &str) -> String {
    let mut out = String::new();
    for c in reason.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > hcomm_crds::local_api::CANNOT_SERVE_REASON_MAX {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::local_api::Assignment;
    use tokio::io::AsyncBufReadExt;

    /// No Pod check: these tests are about the protocol (the checks have their own below).
    fn open_access() -> Access {
        Access {
            callers: CallerCheck::Unchecked,
            ..Access::default()
        }
    }

    fn socket_path(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("hcomm-api-{}-{tag}.sock", std::process::id()))
    }

    async fn client(
        path: &Path,
    ) -> (
        BufReader<tokio::net::unix::OwnedReadHalf>,
        tokio::net::unix::OwnedWriteHalf,
    ) {
        let s = UnixStream::connect(path).await.unwrap();
        let (r, w) = s.into_split();
        (BufReader::new(r), w)
    }

    async fn ask(
        r: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
        w: &mut tokio::net::unix::OwnedWriteHalf,
        req: &str,
    ) -> serde_json::Value {
        w.write_all(format!("{req}\n").as_bytes()).await.unwrap();
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        serde_json::from_str(&line).unwrap()
    }

    #[tokio::test]
    async fn a_worker_reads_its_assignment_reports_inflight_and_watches_a_drain() {
        let path = socket_path("flow");
        let hub = Hub::default();
        let slot = hub.slot("ns/w-0");
        slot.assignment.send_replace(Some(Assignment {
            group: "g".into(),
            rank: 2,
            world: 4,
            ..Default::default()
        }));
        let l = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let (_stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(l, hub.clone(), open_access(), Serves::Node, async {
            let _ = stop_rx.await;
        }));

        let (mut r, mut w) = client(&path).await;
        let a = ask(&mut r, &mut w, r#"{"op":"assignment","pod":"w-0"}"#).await;
        assert_eq!(a["assignment"]["rank"], 2);
        let ok = ask(
            &mut r,
            &mut w,
            r#"{"op":"report_inflight","pod":"w-0","n":5}"#,
        )
        .await;
        assert_eq!(ok["ok"], true);
        assert_eq!(*slot.inflight.borrow(), Some(5));
        assert!(!*slot.serving.borrow());
        let ok = ask(&mut r, &mut w, r#"{"op":"serving","pod":"w-0"}"#).await;
        assert_eq!(ok["ok"], true);
        assert!(
            *slot.serving.borrow(),
            "the worker's serving report reaches the slot"
        );
        let ok = ask(
            &mut r,
            &mut w,
            r#"{"op":"report_load","pod":"w-0","in_flight":2,"queue_depth":7,"draining":true}"#,
        )
        .await;
        assert_eq!(ok["ok"], true);
        assert_eq!(
            *slot.inflight.borrow(),
            Some(2),
            "a load report sets in flight"
        );
        let load = slot.load.borrow().unwrap();
        assert_eq!((load.queue_depth, load.draining), (7, true));
        let bad = ask(&mut r, &mut w, r#"{"op":"assignment","pod":"nobody"}"#).await;
        assert_eq!(bad["ok"], false);
        let junk = ask(&mut r, &mut w, "not json").await;
        assert!(junk["error"].as_str().unwrap().contains("bad request"));

        let (mut wr, mut ww) = client(&path).await;
        assert_eq!(
            ask(&mut wr, &mut ww, r#"{"op":"watch","pod":"w-0"}"#).await["ok"],
            true
        );
        hub.notify("ns/w-0", Notice::DrainRequested { deadline: None });
        let mut line = String::new();
        wr.read_line(&mut line).await.unwrap();
        assert_eq!(
            line.trim(),
            r#"{"event":"drain_requested","deadline":null}"#
        );
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn a_watch_ends_when_its_worker_hangs_up_even_if_nothing_is_notified() {
        let path = socket_path("hangup");
        let hub = Hub::default();
        let slot = hub.slot("ns/w-2");
        let l = bind(&path).unwrap();
        let (_stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(l, hub.clone(), open_access(), Serves::Node, async {
            let _ = stop_rx.await;
        }));
        let (mut r, mut w) = client(&path).await;
        assert_eq!(
            ask(&mut r, &mut w, r#"{"op":"watch","pod":"w-2"}"#).await["ok"],
            true
        );
        // The connection holds the slot while it watches: here, the hub and this test.
        assert_eq!(Arc::strong_count(&slot), 3);
        drop((r, w));
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while Arc::strong_count(&slot) > 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the watch outlived its worker"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn a_late_watcher_still_hears_that_weights_are_ready() {
        let path = socket_path("late");
        let hub = Hub::default();
        hub.notify(
            "ns/w-1",
            Notice::WeightsReady {
                path: Some("/models/x".into()),
            },
        );
        let l = bind(&path).unwrap();
        tokio::spawn(serve(
            l,
            hub.clone(),
            open_access(),
            Serves::Node,
            std::future::pending(),
        ));
        let (mut r, mut w) = client(&path).await;
        let wr = ask(&mut r, &mut w, r#"{"op":"weights_ready","pod":"w-1"}"#).await;
        assert_eq!(wr["ready"], true);
        assert_eq!(
            ask(&mut r, &mut w, r#"{"op":"watch","pod":"w-1"}"#).await["ok"],
            true
        );
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        assert!(
            line.contains("weights_ready") && line.contains("/models/x"),
            "{line}"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn callers_with_a_uid_not_allowed_are_refused() {
        let path = socket_path("uid");
        let l = bind(&path).unwrap();
        let access = Access {
            allowed_uids: vec![4_000_000],
            ..open_access()
        };
        tokio::spawn(serve(
            l,
            Hub::default(),
            access,
            Serves::Node,
            std::future::pending(),
        ));
        let (mut r, _w) = client(&path).await;
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        assert!(line.contains("not allowed"), "{line}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_workers_reason_is_kept_printable_and_bounded() {
        assert_eq!(
            worker_reason("op\ntimed out\u{1b}[31m"),
            "op timed out [31m"
        );
        let long = "é".repeat(400);
        let kept = worker_reason(&long);
        assert!(kept.len() <= hcomm_crds::local_api::CANNOT_SERVE_REASON_MAX);
        assert_eq!(kept.chars().count(), 256, "cut on a character boundary");
    }
}
