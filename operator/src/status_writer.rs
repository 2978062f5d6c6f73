//! Group status writes off the reconcile path: at most one write per group in flight, and
//! of the statuses handed over meanwhile only the last is written.
//!
//! Why: a reconcile that waited for its status write waited for the API server at its
//! busiest. In a 50-group scale storm a status apply took 80 ms at the median and 500 ms
//! at p99, most of most reconciles' time (issue 20). With eight joiners the group's last
//! reconciles ran three applies back to back after every member was ready. Now a
//! reconcile hands its status over and returns. When nothing is in flight the status is
//! written at once, as before; while a write is in flight, newer statuses replace each
//! other and only the newest follows it. Under load the in-between statuses, which nobody
//! would have read, are never written.
//!
//! What the next round plans from stays this process's latest status: each status is
//! recorded in [`StatusWritten`] as it is handed over (unanswered, so it counts over any
//! cached object), and learns the resource version the API server answered its write
//! with once written. A write that fails is tried again, with growing pauses, until it
//! succeeds, a newer status replaces it, or the group is gone. A caller that must know
//! the status is stored before it goes on (a group being deleted: its finalizer comes off
//! next) waits for its write ([`StatusWriter::write`]), behind any write in flight, and
//! gets its error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use hcomm_crds::{HcommGroup, HcommGroupStatus};
use kube::api::{Patch, PatchParams};
use prometheus::IntCounter;
use tokio::sync::{Notify, oneshot};
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::status_written::StatusWritten;

/// The first pause before a failed write is tried again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(200);
/// The longest pause between tries of a failed write.
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Which group a status belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Target {
    /// The group `group` is.
    pub fn of(group: &HcommGroup) -> Self {
        use kube::ResourceExt;
        Self {
            namespace: group.namespace().unwrap_or_default(),
            name: group.name_any(),
            uid: group.uid().unwrap_or_default(),
        }
    }
}

/// Writes one status; answers the resource version the API server gave the object.
pub type WriteFn = Arc<
    dyn Fn(Target, HcommGroupStatus) -> BoxFuture<'static, Result<Option<String>>> + Send + Sync,
>;

/// A status waiting for its group's write in flight to end.
struct Handover {
    target: Target,
    status: HcommGroupStatus,
    /// The caller waiting for this very write, if one waits.
    done: Option<oneshot::Sender<Result<()>>>,
}

/// A group's writes: the status waiting, and the task writing, if one is.
#[derive(Default)]
struct Slot {
    waiting: Option<Handover>,
    task: Option<AbortHandle>,
}

struct Shared {
    slots: Mutex<HashMap<String, Slot>>,
    write: WriteFn,
    written: Arc<StatusWritten>,
    /// Counts every failed try: reconciles no longer see these errors.
    failures: IntCounter,
    /// Notified whenever a group's writes end (for [`StatusWriter::flush`]).
    idle: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Shared {
    /// The process stopped leading: nothing more is written.
    fn drop(&mut self) {
        for slot in self.lock().values() {
            if let Some(task) = &slot.task {
                task.abort();
            }
        }
    }
}

/// The operator's status writes, shared by every reconcile (clones share the writes).
#[derive(Clone)]
pub struct StatusWriter {
    shared: Arc<Shared>,
}

impl StatusWriter {
    /// Writes with `write`, recording each status in `written` as it is handed over and
    /// written, and counting failed tries in `failures`.
    pub fn new(write: WriteFn, written: Arc<StatusWritten>, failures: IntCounter) -> Self {
        Self {
            shared: Arc::new(Shared {
                slots: Mutex::default(),
                write,
                written,
                failures,
                idle: Notify::new(),
            }),
        }
    }

    /// Writes through `client` by server-side apply of the whole status, as
    /// `field_manager` (forced: only the operator writes a group's status).
    pub fn for_client(
        client: kube::Client,
        field_manager: &'static str,
        written: Arc<StatusWritten>,
        failures: IntCounter,
    ) -> Self {
        let write: WriteFn = Arc::new(move |target: Target, status: HcommGroupStatus| {
            let api = kube::Api::namespaced(client.clone(), &target.namespace);
            Box::pin(async move { apply(&api, &target.name, &status, field_manager).await })
        });
        Self::new(write, written, failures)
    }

    /// Hands `status` over to be written as `target`'s, and returns at once: it is
    /// written now when none of the group's writes is in flight, else after that one,
    /// unless a newer status is handed over first. A failed write is tried again.
    pub fn hand_over(&self, target: Target, status: HcommGroupStatus) {
        self.enqueue(target, status, None);
    }

    /// Writes `status` as `target`'s, behind any write in flight, and waits for it: the
    /// write's error if it failed (not tried again: the caller decides).
    pub async fn write(&self, target: Target, status: HcommGroupStatus) -> Result<()> {
        let (done, answer) = oneshot::channel();
        self.enqueue(target, status, Some(done));
        // Unanswered only when a newer status replaced it: nothing failed.
        answer.await.unwrap_or(Ok(()))
    }

    fn enqueue(
        &self,
        target: Target,
        status: HcommGroupStatus,
        done: Option<oneshot::Sender<Result<()>>>,
    ) {
        self.shared.written.handed_over(&target.uid, &status);
        let uid = target.uid.clone();
        let mut slots = self.shared.lock();
        let slot = slots.entry(uid.clone()).or_default();
        let handover = Handover {
            target,
            status,
            done,
        };
        if let Some(replaced) = slot.waiting.replace(handover) {
            debug!(group = %replaced.target.name, "a newer status replaces one not yet written");
        }
        if slot.task.is_none() {
            let shared = Arc::downgrade(&self.shared);
            slot.task = Some(tokio::spawn(write_group(shared, uid)).abort_handle());
        }
    }

    /// Waits, at most `within`, until no status write is in flight or waiting: for a
    /// process about to stop leading. False if the deadline passed first.
    pub async fn flush(&self, within: Duration) -> bool {
        let idle = async {
            loop {
                let notified = self.shared.idle.notified();
                if self.shared.lock().is_empty() {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(within, idle).await.is_ok()
    }
}

/// Writes the group `uid`'s waiting statuses, one after another, until none waits. Holds
/// the writer only between writes, so dropping it (leadership lost) ends this task.
async fn write_group(shared: Weak<Shared>, uid: String) {
    let mut pause = RETRY_FIRST;
    loop {
        let (handover, write) = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let mut slots = shared.lock();
            let Some(slot) = slots.get_mut(&uid) else {
                return;
            };
            let Some(handover) = slot.waiting.take() else {
                slots.remove(&uid);
                drop(slots);
                shared.idle.notify_waiters();
                return;
            };
            (handover, shared.write.clone())
        };
        let result = write(handover.target.clone(), handover.status.clone()).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Handover {
            target,
            status,
            done,
        } = handover;
        if result.as_ref().is_err_and(|e| !e.is_not_found()) {
            shared.failures.inc();
        }
        match result {
            Ok(version) => {
                shared.written.answered(&uid, &status, version);
                pause = RETRY_FIRST;
                if let Some(done) = done {
                    let _ = done.send(Ok(()));
                }
            }
            Err(error) if error.is_not_found() => {
                debug!(group = %target.name, "group gone; its status is not written");
                shared.written.forget(&uid);
                if let Some(done) = done {
                    let _ = done.send(Err(error));
                }
            }
            Err(error) => match done {
                Some(done) => {
                    // Not stored: the next round builds from the cached status again and
                    // writes what differs (it would otherwise take this one as written).
                    shared.written.forget(&uid);
                    let _ = done.send(Err(error));
                }
                None => {
                    warn!(group = %target.name, %error, retry_in = ?pause, "status write failed");
                    {
                        let mut slots = shared.lock();
                        let slot = slots.entry(uid.clone()).or_default();
                        // A newer status, handed over meanwhile, replaces this one.
                        if slot.waiting.is_none() {
                            slot.waiting = Some(Handover {
                                target,
                                status,
                                done: None,
                            });
                        }
                    }
                    drop(shared);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            },
        }
    }
}

/// Applies `status` to the group `name`; the group's resource version after the write.
async fn apply(
    api: &kube::Api<HcommGroup>,
    name: &str,
    status: &HcommGroupStatus,
    field_manager: &str,
) -> Result<Option<String>> {
    let patch = serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION,
        "kind": "HcommGroup",
        "status": status,
    });
    let written = api
        .patch_status(
            name,
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::kube(format!("write status of HcommGroup {name}")))?;
    Ok(written.metadata.resource_version)
}

#[cfg(test)]
#[path = "status_writer_tests.rs"]
mod tests;
