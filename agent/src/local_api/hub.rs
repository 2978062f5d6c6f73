//! The shared state behind the local API: per member its assignment, the worker's
//! in-flight count, weights readiness and a broadcast of notices. The member tasks write
//! it; the socket server reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch};

use hcomm_crds::local_api::{Assignment, Notice, WorkerLoad};

/// One member's slot.
pub struct Slot {
    pub assignment: watch::Sender<Option<Assignment>>,
    pub inflight: watch::Sender<Option<u64>>,
    pub weights: watch::Sender<Option<Option<String>>>,
    pub drain: watch::Sender<Option<Option<String>>>,
    pub notices: broadcast::Sender<Notice>,
    /// The worker said it serves (`serving`).
    pub serving: watch::Sender<bool>,
    /// The worker's last `report_load` (queue depth and drain progress besides the
    /// in-flight count, which also lands in `inflight`).
    pub load: watch::Sender<Option<WorkerLoad>>,
    /// The worker said it cannot serve (`cannot_serve`), and why (sanitised, bounded).
    pub cannot_serve: watch::Sender<Option<String>>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            assignment: watch::channel(None).0,
            inflight: watch::channel(None).0,
            weights: watch::channel(None).0,
            drain: watch::channel(None).0,
            notices: broadcast::channel(64).0,
            serving: watch::channel(false).0,
            load: watch::channel(None).0,
            cannot_serve: watch::channel(None).0,
        }
    }
}

/// All members on this node, keyed `namespace/pod`.
#[derive(Default, Clone)]
pub struct Hub {
    slots: Arc<Mutex<HashMap<String, Arc<Slot>>>>,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot of `key`, created if needed (member tasks call this).
    pub fn slot(&self, key: &str) -> Arc<Slot> {
        self.lock()
            .entry(key.to_owned())
            .or_insert_with(|| Arc::new(Slot::new()))
            .clone()
    }

    /// The slot of `key`, if the member is known (a Pod's socket asks this way, so a
    /// lingering connection never brings back a member that was forgotten).
    pub fn get(&self, key: &str) -> Option<Arc<Slot>> {
        self.lock().get(key).cloned()
    }

    /// Forgets a member whose Pod is gone.
    pub fn remove(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Finds a member by pod name (and namespace when given); a name present in two
    /// namespaces needs the namespace.
    pub fn find(&self, pod: &str, namespace: Option<&str>) -> Result<Arc<Slot>, String> {
        let slots = self.lock();
        if let Some(ns) = namespace {
            return slots
                .get(&format!("{ns}/{pod}"))
                .cloned()
                .ok_or_else(|| format!("no member {ns}/{pod} on this node"));
        }
        let hits: Vec<&Arc<Slot>> = slots
            .iter()
            .filter(|(k, _)| k.rsplit('/').next() == Some(pod))
            .map(|(_, v)| v)
            .collect();
        match hits.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(format!("no member {pod} on this node")),
            _ => Err(format!(
                "pod name {pod} is in several namespaces; send \"namespace\""
            )),
        }
    }

    /// Publishes a notice to the member's watchers and remembers the state it implies.
    pub fn notify(&self, key: &str, notice: Notice) {
        let slot = self.slot(key);
        match &notice {
            Notice::WeightsReady { path } => {
                slot.weights.send_replace(Some(path.clone()));
            }
            Notice::DrainRequested { deadline } => {
                slot.drain.send_replace(Some(deadline.clone()));
            }
            Notice::EpochChanged { epoch } => {
                slot.assignment.send_modify(|a| {
                    if let Some(a) = a {
                        a.epoch = *epoch;
                    }
                });
            }
            // Only a reader's placeholder for events it does not know; never published.
            Notice::Unknown => return,
        }
        let _ = slot.notices.send(notice);
    }

    /// Member keys currently known.
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_found_by_name_unless_ambiguous() {
        let hub = Hub::default();
        hub.slot("a/w-0");
        hub.slot("b/w-0");
        hub.slot("a/w-1");
        assert!(hub.find("w-1", None).is_ok());
        assert!(
            hub.find("w-0", None)
                .err()
                .unwrap()
                .contains("several namespaces")
        );
        assert!(hub.find("w-0", Some("b")).is_ok());
        assert!(hub.find("w-9", None).err().unwrap().contains("no member"));
    }

    #[test]
    fn notices_are_remembered_for_late_watchers() {
        let hub = Hub::default();
        hub.notify(
            "a/w",
            Notice::WeightsReady {
                path: Some("/w".into()),
            },
        );
        let s = hub.slot("a/w");
        assert_eq!(*s.weights.borrow(), Some(Some("/w".into())));
    }
}
