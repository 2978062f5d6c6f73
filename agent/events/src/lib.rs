//! Publishes Kubernetes Events (`events.k8s.io/v1`) off the caller's path, as client-go's
//! event broadcaster does; the operator's reconciles and the node agent's member tasks
//! and probes both publish through it.
//!
//! Why not `kube::runtime::events::Recorder`, awaited where the Event happens:
//! - It keys a repeated Event without its note, so a second `MemberCreated` on a group
//!   ("member b created") only bumped the count of the first ("member a created") and
//!   `kubectl describe` showed the first member's name for every one; on a Pod, a second
//!   `RejoinFailed` at a later epoch kept the first one's note. Here the note is in the
//!   key, as client-go's core/v1 recorder keys its aggregation (`tools/record`,
//!   `getEventKey`: the message is part of it); its events/v1 broadcaster leaves the note
//!   out as kube-rs does. Only identical Events make a series.
//! - The caller awaited one API call per Event: at 1,000 members the operator's Event
//!   writes were its most frequent call and most of a reconcile's time (issue 20,
//!   `docs/benchmarks.md`), and an agent's member task waited on the API server to say
//!   what it was doing. Now the caller queues its Events and goes on.
//!
//! Events are best effort: the queue is bounded ([`QUEUE`]); one that does not fit is
//! dropped and counted (the caller's `events_dropped_total`), and a failed write is
//! logged and counted (its `event_write_failures_total`), never retried. The publisher
//! takes whatever is queued as one batch, folds identical Events of the batch into one
//! write, and writes the batch [`IN_FLIGHT`] at a time.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use prometheus::IntCounter;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

/// Events waiting to be written; more are dropped.
pub const QUEUE: usize = 1024;
/// Event writes in flight at once.
const IN_FLIGHT: usize = 8;
/// How long a written Event may still grow a series (client-go and kube-rs: 6 minutes).
const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);
/// Events the publisher takes in one batch.
const BATCH: usize = 256;

/// One Event to publish about `regarding`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    pub namespace: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub warning: bool,
    pub reason: String,
    pub action: String,
    pub note: String,
}

impl EventKey {
    /// The key of an Event about `regarding`.
    pub fn new(
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: &str,
    ) -> EventKey {
        let field = |f: &Option<String>| f.clone().unwrap_or_default();
        EventKey {
            namespace: regarding
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            kind: field(&regarding.kind),
            name: field(&regarding.name),
            uid: field(&regarding.uid),
            warning,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: note.to_owned(),
        }
    }
}

/// What the publisher writes for one Event of a batch (pure; [`plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// A new Event object named `name`, seen `count` times (more than once: folded from
    /// one batch, written as a series at once).
    Create { name: String, count: i32 },
    /// The series of the Event `name`, now seen `count` times.
    Count { name: String, count: i32 },
}

/// An Event written lately, which an identical one extends.
#[derive(Debug, Clone)]
pub struct Written {
    name: String,
    count: i32,
    last: Timestamp,
}

/// Decides the writes of a batch: identical Events fold into one write; an Event written
/// within [`SERIES_TTL`] grows its series; others are created, named `<object>.<nanos>`
/// (unique within the batch). Updates `written` as if every write succeeds (a failed
/// creation is forgotten by the caller). Series older than the TTL are forgotten.
pub fn plan(
    written: &mut HashMap<EventKey, Written>,
    batch: Vec<(EventKey, ObjectReference)>,
    now: Timestamp,
) -> Vec<(EventKey, ObjectReference, Write)> {
    written.retain(|_, w| w.last + SERIES_TTL > now);
    let mut seen: HashMap<EventKey, usize> = HashMap::new();
    let mut order: Vec<(EventKey, ObjectReference, i32)> = Vec::new();
    for (key, regarding) in batch {
        match seen.get(&key) {
            Some(&i) => order[i].2 += 1,
            None => {
                seen.insert(key.clone(), order.len());
                order.push((key, regarding, 1));
            }
        }
    }
    let base = now.as_nanosecond();
    order
        .into_iter()
        .enumerate()
        .map(|(i, (key, regarding, times))| {
            let write = match written.get_mut(&key) {
                Some(w) => {
                    w.count += times;
                    w.last = now;
                    Write::Count {
                        name: w.name.clone(),
                        count: w.count,
                    }
                }
                None => {
                    let name = format!("{}.{:x}", key.name, base + i as i128);
                    written.insert(
                        key.clone(),
                        Written {
                            name: name.clone(),
                            count: times,
                            last: now,
                        },
                    );
                    Write::Create { name, count: times }
                }
            };
            (key, regarding, write)
        })
        .collect()
}

/// Who writes the Events (`reportingController` / `reportingInstance`).
#[derive(Debug, Clone)]
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

/// What the queue carries: an Event, or a caller waiting for everything queued before it
/// to be written ([`EventSink::flush`]).
#[derive(Debug)]
enum Queued {
    /// Boxed: far larger than a flush, and most of what the queue holds.
    Event(Box<(EventKey, ObjectReference)>),
    Flush(oneshot::Sender<()>),
}

/// The queue's sending end, kept in the caller's context.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::Sender<Queued>,
    dropped: IntCounter,
}

impl EventSink {
    /// Starts the publisher; it ends when every clone of the sink is gone.
    pub fn start(
        client: kube::Client,
        reporter: Reporter,
        dropped: IntCounter,
        failed: IntCounter,
    ) -> EventSink {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(publisher(client, reporter, rx, failed));
        EventSink { tx, dropped }
    }

    /// Queues an Event; never waits. A full queue drops it (counted).
    pub fn publish(&self, key: EventKey, regarding: ObjectReference) {
        if let Err(e) = self.tx.try_send(Queued::Event(Box::new((key, regarding)))) {
            self.dropped.inc();
            if let Queued::Event(event) = e.into_inner() {
                let key = &event.0;
                warn!(reason = %key.reason, object = %key.name, "event queue full; event dropped");
            }
        }
    }

    /// Waits, at most `within`, until every Event queued before the call is written or
    /// failed: for a process about to exit, whose last Events say why. False if the
    /// deadline passed first.
    pub async fn flush(&self, within: Duration) -> bool {
        let (done, written) = oneshot::channel();
        let flushed = async {
            self.tx.send(Queued::Flush(done)).await.ok()?;
            written.await.ok()
        };
        matches!(tokio::time::timeout(within, flushed).await, Ok(Some(())))
    }
}

async fn publisher(
    client: kube::Client,
    reporter: Reporter,
    mut rx: mpsc::Receiver<Queued>,
    failed: IntCounter,
) {
    let mut written = HashMap::new();
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let now = Timestamp::now();
        let mut events = Vec::with_capacity(batch.len());
        let mut waiting = Vec::new();
        for queued in batch.drain(..) {
            match queued {
                Queued::Event(event) => events.push(*event),
                Queued::Flush(done) => waiting.push(done),
            }
        }
        let writes = plan(&mut written, events, now);
        let results: Vec<_> = futures::stream::iter(writes)
            .map(|(key, regarding, write)| {
                let (client, reporter) = (client.clone(), &reporter);
                async move {
                    let result = send(client, reporter, &key, regarding, &write, now).await;
                    (key, write, result)
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        for (key, _, result) in results {
            if let Err(error) = result {
                failed.inc();
                warn!(%error, reason = %key.reason, object = %key.name, "could not write event");
                // Nothing to count on: the next identical Event is created anew.
                written.remove(&key);
            }
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
}

/// One write.
async fn send(
    client: kube::Client,
    reporter: &Reporter,
    key: &EventKey,
    regarding: ObjectReference,
    write: &Write,
    now: Timestamp,
) -> kube::Result<()> {
    let api: Api<Event> = Api::namespaced(client, &key.namespace);
    match write {
        Write::Create { name, count } => {
            let series = (*count > 1).then_some(EventSeries {
                count: *count,
                last_observed_time: MicroTime(now),
            });
            let event = event(reporter, key, regarding, name, series, now);
            api.create(&PostParams::default(), &event).await?;
        }
        Write::Count { name, count } => {
            let series = EventSeries {
                count: *count,
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    // Gone (expired or deleted by someone): write it whole.
                    let event = event(reporter, key, regarding, name, Some(series), now);
                    api.create(&PostParams::default(), &event).await?;
                }
                other => {
                    other?;
                }
            }
        }
    }
    Ok(())
}

fn event(
    reporter: &Reporter,
    key: &EventKey,
    regarding: ObjectReference,
    name: &str,
    series: Option<EventSeries>,
    now: Timestamp,
) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(key.namespace.clone()),
            ..ObjectMeta::default()
        },
        action: Some(key.action.clone()),
        reason: Some(key.reason.clone()),
        note: Some(key.note.clone()),
        type_: Some(if key.warning { "Warning" } else { "Normal" }.to_owned()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        series,
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group() -> ObjectReference {
        ObjectReference {
            namespace: Some("t".into()),
            kind: Some("HcommGroup".into()),
            name: Some("g".into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        }
    }

    fn key(note: &str) -> EventKey {
        EventKey::new(&group(), false, "Created", "Reconcile", note)
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn events_with_different_notes_are_separate_events() {
        let mut written = HashMap::new();
        let writes = plan(
            &mut written,
            vec![
                (key("member a created"), group()),
                (key("member b created"), group()),
            ],
            at(0),
        );
        assert!(
            writes
                .iter()
                .all(|(_, _, w)| matches!(w, Write::Create { .. })),
            "{writes:?}"
        );
        let names: std::collections::HashSet<_> = writes
            .iter()
            .map(|(_, _, w)| match w {
                Write::Create { name, .. } | Write::Count { name, .. } => name.clone(),
            })
            .collect();
        assert_eq!(names.len(), 2, "distinct objects");
    }

    #[test]
    fn an_identical_event_grows_the_series_and_folds_within_a_batch() {
        let mut written = HashMap::new();
        let first = plan(&mut written, vec![(key("same"), group())], at(0));
        let Write::Create { name, count: 1 } = first[0].2.clone() else {
            panic!("{first:?}")
        };
        let again = plan(
            &mut written,
            vec![(key("same"), group()), (key("same"), group())],
            at(10),
        );
        assert_eq!(again.len(), 1, "one write for the batch");
        assert_eq!(again[0].2, Write::Count { name, count: 3 });
        // New and repeated within one batch: created as a series.
        let folded = plan(
            &mut written,
            vec![(key("other"), group()), (key("other"), group())],
            at(11),
        );
        assert!(matches!(folded[0].2, Write::Create { count: 2, .. }));
        // Past the TTL it starts over.
        let later = plan(&mut written, vec![(key("same"), group())], at(10 + 6 * 60));
        assert!(matches!(later[0].2, Write::Create { .. }));
    }

    #[tokio::test]
    async fn flush_returns_once_everything_queued_before_it_was_tried() {
        // Nothing listens on port 1: every write fails at once, and is counted.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (dropped, failed) = (
            IntCounter::new("dropped", "d").unwrap(),
            IntCounter::new("failed", "f").unwrap(),
        );
        let reporter = Reporter {
            controller: "test".into(),
            instance: "test".into(),
        };
        let sink = EventSink::start(client, reporter, dropped.clone(), failed.clone());
        for note in ["a", "b", "b", "c"] {
            sink.publish(key(note), group());
        }
        assert!(sink.flush(Duration::from_secs(20)).await, "flushed in time");
        assert_eq!(failed.get(), 3, "three distinct Events, each tried once");
        assert_eq!(dropped.get(), 0);
    }
}
