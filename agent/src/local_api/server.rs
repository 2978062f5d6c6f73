//! The Unix-socket server of the local API. It takes its listener and a shutdown future
//! (as mini-redis does), bounds concurrent connections, checks the caller's credentials
//! (`SO_PEERCRED` via tokio, no `unsafe`), and answers line by line.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use super::hub::Hub;
use crate::error::{Error, Result};
use hcomm_crds::local_api::{MAX_LINE, Notice, Request, Response, parse_request};

/// Concurrent worker connections served.
pub const MAX_CONNECTIONS: usize = 256;

/// Who may connect.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Allowed peer uids; empty allows any local caller that can open the socket (its
    /// mode is 0660, so that is root and the socket's group).
    pub allowed_uids: Vec<u32>,
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

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    hub: Hub,
    access: Access,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return,
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
            tracing::warn!("local API: too many connections, refusing one");
            continue;
        };
        let cred = stream.peer_cred().ok();
        if !access.allowed_uids.is_empty()
            && !cred.is_some_and(|c| access.allowed_uids.contains(&c.uid()))
        {
            tracing::warn!(uid = ?cred.map(|c| c.uid()), "local API: caller uid not allowed");
            let mut s = stream;
            let _ = write_line(&mut s, &Response::error("caller uid not allowed")).await;
            continue;
        }
        let hub = hub.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, hub).await {
                tracing::debug!(error = %e, pid = ?cred.and_then(|c| c.pid()), "local API connection ended");
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

async fn connection(stream: UnixStream, hub: Hub) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::new(r);
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        if !line.ends_with('\n') && n > MAX_LINE {
            write_line(&mut w, &Response::error("request line too long")).await?;
            return Ok(());
        }
        let req = match parse_request(&line) {
            Ok(r) => r,
            Err(e) => {
                write_line(&mut w, &Response::error(e)).await?;
                continue;
            }
        };
        let (pod, ns) = req.target();
        let slot = match hub.find(pod, ns) {
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
                                assignment,
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
            Request::Serving { .. } => {
                slot.serving.send_replace(true);
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

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::local_api::Assignment;
    use tokio::io::AsyncBufReadExt;

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
        tokio::spawn(serve(l, hub.clone(), Access::default(), async {
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
        tokio::spawn(serve(l, hub.clone(), Access::default(), async {
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
            Access::default(),
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
        };
        tokio::spawn(serve(l, Hub::default(), access, std::future::pending()));
        let (mut r, _w) = client(&path).await;
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        assert!(line.contains("not allowed"), "{line}");
        let _ = std::fs::remove_file(&path);
    }
}
