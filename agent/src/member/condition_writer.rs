//! Writes a member's Pod conditions until they land.
//!
//! The conditions are how the member reaches traffic: `member-ready=True` opens the Pod's
//! readiness gate, and nothing writes it again once the member is serving. A write lost to
//! a passing API-server failure (a restart during a control-plane upgrade, a 429 from API
//! Priority and Fairness under load, a timeout) used to leave the member out of traffic
//! until something else changed: the task tried three times 200 ms apart and went on.
//!
//! Now one writer per member Pod holds the conditions not yet on the Pod and writes them
//! until they land: 200 ms after a failure, doubling to [`MAX_RETRY`]. Updates handed over
//! meanwhile are merged over the ones waiting (the newer of one type wins), so a retry
//! never writes a stale condition over a newer one, and the writes stay in their order. A
//! Pod that is gone ends the writer; so does dropping it (the member task ended).
//!
//! Callers wait for their updates with [`ConditionWriter::flushed`] under their own
//! deadline, as before; past it they go on and the writer keeps trying.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::state::CondUpdate;

/// The first wait after a failed write.
pub const FIRST_RETRY: Duration = Duration::from_millis(200);
/// The longest wait between tries.
pub const MAX_RETRY: Duration = Duration::from_secs(10);

/// Why one write did not land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFailure {
    /// The Pod is gone: nothing more to write.
    Gone,
    /// Anything else (refused, unanswered, the API server unreachable): tried again.
    Failed(String),
}

/// One try at putting `updates` on the Pod.
pub trait ConditionSink: Send + Sync + 'static {
    fn put<'a>(&'a self, updates: &'a [CondUpdate]) -> BoxFuture<'a, Result<(), WriteFailure>>;
}

/// How a wait for written updates ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    Written,
    /// The Pod is gone, or the writer stopped: the updates will never be written.
    Gone,
}

/// Merges `newer` over `pending`: an update of a type already waiting replaces it in its
/// place; the others are appended in their order.
pub fn merge_pending(pending: &mut Vec<CondUpdate>, newer: Vec<CondUpdate>) {
    for update in newer {
        match pending.iter_mut().find(|p| p.type_ == update.type_) {
            Some(waiting) => *waiting = update,
            None => pending.push(update),
        }
    }
}

#[derive(Default)]
struct Waiting {
    updates: Vec<CondUpdate>,
    /// Tickets handed out so far; the updates waiting cover every one up to this.
    submitted: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// Every ticket up to this is on the Pod.
    written: u64,
    gone: bool,
}

struct Shared {
    waiting: Mutex<Waiting>,
    wake: Notify,
    progress: watch::Sender<Progress>,
}

impl Shared {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The writer of one member Pod's conditions (module docs).
pub struct ConditionWriter {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl ConditionWriter {
    /// Starts the writer on the current Tokio runtime, in the current span (the member's:
    /// its group, Pod and rank go with every warning).
    pub fn spawn(sink: Arc<dyn ConditionSink>) -> ConditionWriter {
        let shared = Arc::new(Shared {
            waiting: Mutex::new(Waiting::default()),
            wake: Notify::new(),
            progress: watch::Sender::new(Progress::default()),
        });
        let task = tokio::spawn(run(shared.clone(), sink).instrument(tracing::Span::current()));
        ConditionWriter { shared, task }
    }

    /// Hands `updates` over; returns the ticket [`Self::flushed`] waits for. Nothing to
    /// write gets the ticket before it: the writer never takes an empty batch, so a ticket
    /// of its own would never be written.
    pub fn submit(&self, updates: Vec<CondUpdate>) -> u64 {
        let ticket = {
            let mut waiting = self.shared.waiting();
            if updates.is_empty() {
                return waiting.submitted;
            }
            merge_pending(&mut waiting.updates, updates);
            waiting.submitted += 1;
            waiting.submitted
        };
        self.shared.wake.notify_one();
        ticket
    }

    /// Waits until the updates of `ticket` (and all before it) are on the Pod, or they
    /// never will be. No deadline of its own: the caller sets one.
    pub async fn flushed(&self, ticket: u64) -> Flushed {
        let mut progress = self.shared.progress.subscribe();
        loop {
            let now = *progress.borrow_and_update();
            if now.written >= ticket {
                return Flushed::Written;
            }
            if now.gone || self.task.is_finished() {
                return Flushed::Gone;
            }
            if progress.changed().await.is_err() {
                return Flushed::Gone;
            }
        }
    }
}

impl Drop for ConditionWriter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(shared: Arc<Shared>, sink: Arc<dyn ConditionSink>) {
    let mut delay = FIRST_RETRY;
    loop {
        let (batch, through) = loop {
            let woken = shared.wake.notified();
            {
                let mut waiting = shared.waiting();
                if !waiting.updates.is_empty() {
                    break (std::mem::take(&mut waiting.updates), waiting.submitted);
                }
            }
            woken.await;
        };
        match sink.put(&batch).await {
            Ok(()) => {
                delay = FIRST_RETRY;
                shared
                    .progress
                    .send_modify(|p| p.written = p.written.max(through));
            }
            Err(WriteFailure::Gone) => {
                shared.progress.send_modify(|p| p.gone = true);
                return;
            }
            Err(WriteFailure::Failed(why)) => {
                tracing::warn!(
                    error = %why,
                    retry_in_ms = delay.as_millis() as u64,
                    "pod conditions not written; trying again"
                );
                {
                    let mut waiting = shared.waiting();
                    let mut again = batch;
                    merge_pending(&mut again, std::mem::take(&mut waiting.updates));
                    waiting.updates = again;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RETRY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::PodReason;
    use std::collections::VecDeque;

    fn update(type_: &'static str, status: bool) -> CondUpdate {
        CondUpdate {
            type_,
            status,
            reason: PodReason::Verified,
            message: String::new(),
        }
    }

    /// Answers each put with the next planned outcome (`Ok` once they run out) and
    /// records what each put carried.
    #[derive(Default)]
    struct Planned {
        outcomes: Mutex<VecDeque<Result<(), WriteFailure>>>,
        puts: Mutex<Vec<Vec<(&'static str, bool)>>>,
    }

    impl Planned {
        fn with(outcomes: Vec<Result<(), WriteFailure>>) -> Arc<Planned> {
            Arc::new(Planned {
                outcomes: Mutex::new(outcomes.into()),
                ..Planned::default()
            })
        }

        fn puts(&self) -> Vec<Vec<(&'static str, bool)>> {
            self.puts.lock().unwrap().clone()
        }
    }

    impl ConditionSink for Planned {
        fn put<'a>(&'a self, updates: &'a [CondUpdate]) -> BoxFuture<'a, Result<(), WriteFailure>> {
            self.puts
                .lock()
                .unwrap()
                .push(updates.iter().map(|u| (u.type_, u.status)).collect());
            let outcome = self.outcomes.lock().unwrap().pop_front().unwrap_or(Ok(()));
            Box::pin(async move { outcome })
        }
    }

    #[test]
    fn a_newer_update_replaces_a_waiting_one_of_its_type_in_place() {
        let mut pending = vec![update("a", false), update("b", false)];
        merge_pending(&mut pending, vec![update("b", true), update("c", true)]);
        let got: Vec<_> = pending.iter().map(|u| (u.type_, u.status)).collect();
        assert_eq!(got, [("a", false), ("b", true), ("c", true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_write_is_tried_again_until_it_lands() {
        let failed = || Err(WriteFailure::Failed("refused".into()));
        let sink = Planned::with(vec![failed(), failed(), failed(), failed()]);
        let writer = ConditionWriter::spawn(sink.clone());
        let start = tokio::time::Instant::now();
        let ticket = writer.submit(vec![update("ready", true)]);
        assert_eq!(writer.flushed(ticket).await, Flushed::Written);
        assert_eq!(sink.puts().len(), 5, "four refusals, then the write");
        // 0.2 + 0.4 + 0.8 + 1.6 s of waits between the five tries.
        assert_eq!(start.elapsed(), Duration::from_millis(3000));
    }

    #[tokio::test(start_paused = true)]
    async fn updates_handed_over_during_a_retry_go_with_it_newest_first() {
        let sink = Planned::with(vec![Err(WriteFailure::Failed("timeout".into()))]);
        let writer = ConditionWriter::spawn(sink.clone());
        let first = writer.submit(vec![update("ready", false), update("drained", false)]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = writer.submit(vec![update("ready", true)]);
        assert_eq!(writer.flushed(second).await, Flushed::Written);
        assert_eq!(writer.flushed(first).await, Flushed::Written);
        assert_eq!(
            sink.puts(),
            [
                vec![("ready", false), ("drained", false)],
                vec![("ready", true), ("drained", false)],
            ],
            "the retry carries the newer `ready`, never the stale one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_delay_doubles_up_to_its_cap_and_a_wait_can_give_up_while_tries_go_on() {
        let failures = (0..8)
            .map(|_| Err(WriteFailure::Failed("unreachable".into())))
            .collect();
        let sink = Planned::with(failures);
        let writer = ConditionWriter::spawn(sink.clone());
        let ticket = writer.submit(vec![update("ready", true)]);
        let waited = tokio::time::timeout(Duration::from_secs(10), writer.flushed(ticket)).await;
        assert!(waited.is_err(), "still failing after 10 s");
        // 0.2 + 0.4 + 0.8 + 1.6 + 3.2 + 6.4 + 10 + 10 s, then the ninth try lands.
        assert_eq!(writer.flushed(ticket).await, Flushed::Written);
        assert_eq!(sink.puts().len(), 9);
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_pod_ends_the_writer_and_releases_its_waiters() {
        let sink = Planned::with(vec![Err(WriteFailure::Gone)]);
        let writer = ConditionWriter::spawn(sink.clone());
        let ticket = writer.submit(vec![update("ready", true)]);
        assert_eq!(writer.flushed(ticket).await, Flushed::Gone);
        let later = writer.submit(vec![update("ready", false)]);
        assert_eq!(writer.flushed(later).await, Flushed::Gone);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(sink.puts().len(), 1, "nothing tried after the Pod was gone");
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_handed_over_waits_only_for_what_came_before() {
        let sink = Planned::with(Vec::new());
        let writer = ConditionWriter::spawn(sink.clone());
        let nothing = writer.submit(Vec::new());
        let waited = tokio::time::timeout(Duration::from_secs(1), writer.flushed(nothing)).await;
        assert_eq!(waited, Ok(Flushed::Written));
        assert!(sink.puts().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn successful_writes_go_one_by_one_in_order() {
        let sink = Planned::with(Vec::new());
        let writer = ConditionWriter::spawn(sink.clone());
        for status in [false, true] {
            let ticket = writer.submit(vec![update("verified", status)]);
            assert_eq!(writer.flushed(ticket).await, Flushed::Written);
        }
        assert_eq!(
            sink.puts(),
            [vec![("verified", false)], vec![("verified", true)]]
        );
    }
}
