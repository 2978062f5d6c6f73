//! The member timeline: watches member Pods and records, on this machine's clock, when
//! each one was created, passed each lifecycle condition, was asked to drain, drained
//! and went away — the raw material of the demo's timeline and of scenario assertions
//! such as "no request reached a joiner before its gate was True". Condition times in
//! the API have one-second resolution; watching gives milliseconds.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hcomm_crds::contract::{
    ANNOTATION_DRAIN_REQUESTED, LABEL_GROUP, POD_DRAINED, POD_JOINED, POD_MEMBER_READY,
    POD_VERIFIED, POD_WEIGHTS_SYNCED,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;

/// The lifecycle marks of one member, as offsets from the timeline's start.
#[derive(Debug, Clone, Default)]
pub struct MemberMarks {
    /// `hcomm.io/group`.
    pub group: String,
    /// The node it was placed on.
    pub node: String,
    /// First seen.
    pub created: Option<Duration>,
    /// `hcomm.io/verified` True.
    pub verified: Option<Duration>,
    /// `hcomm.io/weights-synced` True.
    pub synced: Option<Duration>,
    /// `hcomm.io/joined` True.
    pub joined: Option<Duration>,
    /// The readiness gate True (traffic may arrive).
    pub ready: Option<Duration>,
    /// The drain annotation appeared.
    pub drain_requested: Option<Duration>,
    /// `hcomm.io/drained` True.
    pub drained: Option<Duration>,
    /// The Pod was deleted.
    pub deleted: Option<Duration>,
    /// The last `False` verification, as `reason: message`.
    pub refused: Option<String>,
    /// The last `False` join, as `reason: message`. Kept here because the state is brief:
    /// the operator deletes a joiner that failed at once, so polling may never see it.
    pub join_failed: Option<String>,
    /// Why the member counts as drained (`Drained`: nothing in flight; `DrainTimedOut`).
    pub drained_reason: Option<String>,
}

impl MemberMarks {
    /// The same marks as offsets from `origin` (a mark before it becomes 0).
    pub fn since(&self, origin: Duration) -> MemberMarks {
        let shift = |t: Option<Duration>| t.map(|t| t.saturating_sub(origin));
        MemberMarks {
            created: shift(self.created),
            verified: shift(self.verified),
            synced: shift(self.synced),
            joined: shift(self.joined),
            ready: shift(self.ready),
            drain_requested: shift(self.drain_requested),
            drained: shift(self.drained),
            deleted: shift(self.deleted),
            ..self.clone()
        }
    }
}

/// A running timeline recorder.
pub struct Timeline {
    start: Instant,
    start_unix_ms: u64,
    marks: Arc<Mutex<BTreeMap<String, MemberMarks>>>,
    task: JoinHandle<()>,
}

impl Timeline {
    /// Starts recording member Pods in `namespace`.
    pub fn start(client: kube::Client, namespace: &str) -> Timeline {
        let start = Instant::now();
        let start_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        let marks = Arc::new(Mutex::new(BTreeMap::new()));
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let task = tokio::spawn(record(pods, start, marks.clone()));
        Timeline {
            start,
            start_unix_ms,
            marks,
            task,
        }
    }

    /// When recording began.
    pub fn origin(&self) -> Instant {
        self.start
    }

    /// The origin as Unix time in milliseconds (to compare with other processes' clocks
    /// on this machine, such as the router's).
    pub fn origin_unix_ms(&self) -> u64 {
        self.start_unix_ms
    }

    /// Offset of `t` from the origin.
    pub fn offset(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.start)
    }

    /// Every member seen so far, by Pod name.
    pub fn members(&self) -> BTreeMap<String, MemberMarks> {
        self.marks.lock().expect("timeline").clone()
    }

    /// The marks of one Pod.
    pub fn member(&self, pod: &str) -> Option<MemberMarks> {
        self.marks.lock().expect("timeline").get(pod).cloned()
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pause after a watch error of the testbed's observers (this one, the rank-table
/// copies): short, so marks after an API hiccup stay timely.
pub(crate) const WATCH_RETRY: Duration = Duration::from_millis(50);

async fn record(pods: Api<Pod>, start: Instant, marks: Arc<Mutex<BTreeMap<String, MemberMarks>>>) {
    let config = watcher::Config::default().labels(LABEL_GROUP);
    let mut events = watcher::watcher(pods, config).boxed();
    while let Some(event) = events.next().await {
        if let Err(e) = &event {
            // The watcher retries at once on its next poll: pause, so a watch whose API
            // server is gone (after the testbed stops) does not spin without yielding.
            tracing::debug!(error = %e, "timeline: watch error (retrying)");
            tokio::time::sleep(WATCH_RETRY).await;
            continue;
        }
        let now = start.elapsed();
        let mut marks = marks.lock().expect("timeline");
        match event {
            Ok(Event::Apply(pod) | Event::InitApply(pod)) => observe(&mut marks, &pod, now),
            Ok(Event::Delete(pod)) => {
                observe(&mut marks, &pod, now);
                if let Some(m) = pod.metadata.name.and_then(|n| marks.get_mut(&n)) {
                    m.deleted.get_or_insert(now);
                }
            }
            Ok(Event::Init | Event::InitDone) | Err(_) => {}
        }
    }
}

fn observe(marks: &mut BTreeMap<String, MemberMarks>, pod: &Pod, now: Duration) {
    let Some(name) = pod.metadata.name.clone() else {
        return;
    };
    let m = marks.entry(name).or_default();
    m.created.get_or_insert(now);
    if let Some(g) = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_GROUP))
    {
        m.group.clone_from(g);
    }
    if let Some(n) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
        m.node.clone_from(n);
    }
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_DRAIN_REQUESTED))
        || pod.metadata.deletion_timestamp.is_some()
    {
        m.drain_requested.get_or_insert(now);
    }
    for c in pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        let slot = match c.type_.as_str() {
            POD_VERIFIED => &mut m.verified,
            POD_WEIGHTS_SYNCED => &mut m.synced,
            POD_JOINED => &mut m.joined,
            POD_MEMBER_READY => &mut m.ready,
            POD_DRAINED => &mut m.drained,
            _ => continue,
        };
        if c.status == "True" {
            slot.get_or_insert(now);
            if c.type_ == POD_DRAINED {
                m.drained_reason.clone_from(&c.reason);
            }
        } else if c.status == "False" && matches!(c.type_.as_str(), POD_VERIFIED | POD_JOINED) {
            let why = format!(
                "{}: {}",
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            );
            if c.type_ == POD_VERIFIED {
                m.refused = Some(why);
            } else {
                m.join_failed = Some(why);
            }
        }
    }
}

/// A fixed-width table: per member, each phase's start and duration (`+start (dur)`),
/// plus what `extra` adds per Pod (e.g. requests served and failed).
pub fn render(members: &BTreeMap<String, MemberMarks>, extra: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<8} {:>15} {:>15} {:>15} {:>15} {:>15} {:>8}  requests",
        "member", "node", "verifying", "syncing", "joining", "ready", "draining", "gone"
    );
    let cell = |from: Option<Duration>, to: Option<Duration>| match (from, to) {
        (Some(a), Some(b)) => format!(
            "{:>6.2}s ({:.2}s)",
            a.as_secs_f64(),
            (b.saturating_sub(a)).as_secs_f64()
        ),
        (Some(a), None) => format!("{:>6.2}s (…)", a.as_secs_f64()),
        _ => "-".to_owned(),
    };
    for (name, m) in members {
        let ready_end = m.drain_requested.or(m.deleted);
        let _ = writeln!(
            out,
            "{:<16} {:<8} {:>15} {:>15} {:>15} {:>15} {:>15} {:>8}  {}",
            name,
            m.node,
            cell(m.created, m.verified),
            cell(m.verified, m.synced),
            cell(m.synced, m.ready),
            cell(m.ready, ready_end),
            cell(m.drain_requested, m.drained.or(m.deleted)),
            m.deleted
                .map(|d| format!("{:.2}s", d.as_secs_f64()))
                .unwrap_or_else(|| "-".into()),
            extra(name),
        );
    }
    out
}
