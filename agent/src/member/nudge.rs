//! Wakes a group's member tasks on this node as soon as its `HcommGroup` changes.
//!
//! A member learns of a new epoch (a joiner to admit, a leaver to let go) by re-reading the
//! group and its rank table. Polling alone costs every scale a poll interval (2 s by
//! default) before the existing members even start to re-form the domain, which a joiner
//! whose weights were already on the node would spend waiting. So the agent also watches
//! the groups and nudges their members here; the poll stays as the fallback when the watch
//! is down.
//!
//! This module depends on nothing of the agent's: [`crate::config::Context`] holds a
//! [`GroupNudges`], and [`watch_groups`] takes the client and that registry rather than the
//! whole context, so the two modules do not import each other.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::StreamExt;
use hcomm_crds::HcommGroup;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

/// (namespace, group).
type GroupKey = (String, String);

/// One wake-up channel per group with a member task on this node.
#[derive(Debug, Default)]
pub struct GroupNudges {
    groups: Mutex<HashMap<GroupKey, watch::Sender<()>>>,
}

impl GroupNudges {
    /// A receiver that changes whenever group `namespace/group` does.
    pub fn subscribe(&self, namespace: &str, group: &str) -> watch::Receiver<()> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups
            .entry((namespace.to_owned(), group.to_owned()))
            .or_insert_with(|| watch::Sender::new(()))
            .subscribe()
    }

    /// Wakes the group's subscribers; forgets a group nobody listens to any more.
    pub fn nudge(&self, namespace: &str, group: &str) {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let key = (namespace.to_owned(), group.to_owned());
        if let Some(tx) = groups.get(&key) {
            if tx.receiver_count() == 0 {
                groups.remove(&key);
            } else {
                tx.send_replace(());
            }
        }
    }
}

/// Watches every `HcommGroup` and nudges the members of each one that changes. Runs until
/// aborted; watch errors are retried (the members' polls cover the gap).
pub async fn watch_groups(client: kube::Client, nudges: &GroupNudges) {
    let api: Api<HcommGroup> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default().timeout(30)).boxed();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Apply(g)) | Ok(watcher::Event::InitApply(g)) => {
                nudges.nudge(&g.namespace().unwrap_or_default(), &g.name_any());
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "group watch error; members keep polling");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nudge_reaches_only_its_groups_subscribers_and_idle_groups_are_forgotten() {
        let n = GroupNudges::default();
        let mut a = n.subscribe("ns", "a");
        let b = n.subscribe("ns", "b");
        n.nudge("ns", "a");
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        a.mark_unchanged();
        // A group without subscribers is not kept.
        n.nudge("ns", "nobody");
        drop(b);
        n.nudge("ns", "b");
        let groups = n.groups.lock().unwrap();
        assert_eq!(
            groups.keys().cloned().collect::<Vec<_>>(),
            [("ns".to_owned(), "a".to_owned())]
        );
    }
}
