//! Wakes a group's member tasks on this node as soon as its `HcommGroup` or its rank
//! table changes.
//!
//! A member learns of a new epoch (a joiner to admit, a leaver to let go) by re-reading the
//! group and its rank table. Polling alone costs every scale a poll interval (2 s by
//! default) before the existing members even start to re-form the domain, which a joiner
//! whose weights were already on the node would spend waiting. So the agent also watches
//! the groups and nudges their members here; the poll stays as the fallback when the watch
//! is down.
//!
//! Only the groups with a member on this node are watched, each by name: a watch of every
//! group would hand every agent every status write of every group — on a cluster of a
//! thousand nodes, each of a 50-group scale storm's ~1,000 status writes sent to a thousand
//! agents, nearly all of which have no member of that group.
//!
//! This module depends on nothing of the agent's: [`crate::config::Context`] holds a
//! [`GroupNudges`], and [`watch_groups`] takes the client and that registry rather than the
//! whole context, so the two modules do not import each other.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use futures::StreamExt;
use futures::stream::BoxStream;
use hcomm_crds::HcommGroup;
use hcomm_crds::rank_table::config_map_name;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// (namespace, group).
pub type GroupKey = (String, String);

/// The groups with a member Pod on this node; None until the node's Pods were listed
/// (`Context::groups_here`).
pub type GroupsHere = watch::Receiver<Option<BTreeSet<GroupKey>>>;

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

/// Watches each group `groups_here` names, by name, and nudges its members when it
/// changes; a group that leaves the node has its watch stopped. Runs until aborted (its
/// watches stop with it) or until `groups_here` closes.
pub async fn watch_groups(client: kube::Client, nudges: &GroupNudges, groups_here: GroupsHere) {
    follow_groups(nudges, groups_here, move |key, changed| {
        tokio::spawn(watch_group(client.clone(), key, changed))
    })
    .await
}

/// A running watch of one group; dropping it stops the watch.
struct Watching(JoinHandle<()>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps one watch (`start`) per group in `groups_here` and nudges the group each one
/// reports changed. The watches are started through `start` so tests can stand in for the
/// API server.
async fn follow_groups(
    nudges: &GroupNudges,
    mut groups_here: GroupsHere,
    start: impl Fn(GroupKey, mpsc::Sender<GroupKey>) -> JoinHandle<()>,
) {
    // Bounded: a watch that gets ahead of the nudges waits (a nudge coalesces anyway).
    let (changed_tx, mut changed_rx) = mpsc::channel::<GroupKey>(64);
    let mut watching: HashMap<GroupKey, Watching> = HashMap::new();
    loop {
        let wanted = groups_here.borrow_and_update().clone().unwrap_or_default();
        watching.retain(|k, _| wanted.contains(k));
        for key in wanted {
            if let std::collections::hash_map::Entry::Vacant(slot) = watching.entry(key) {
                let task = start(slot.key().clone(), changed_tx.clone());
                slot.insert(Watching(task));
            }
        }
        loop {
            tokio::select! {
                here = groups_here.changed() => {
                    if here.is_err() {
                        return;
                    }
                    break;
                }
                Some((namespace, group)) = changed_rx.recv() => nudges.nudge(&namespace, &group),
            }
        }
    }
}

/// Watches `HcommGroup` `key` and its rank-table ConfigMap, each alone (a field selector
/// on its name), and sends `key` on every version of either, the first included: a change
/// made before the watch began is not missed. The table is watched because a joiner waits
/// for the table of its epoch, which the operator writes only once the device plugin's
/// allocation is on the joiner's Pod; the group's own status write that follows it comes
/// tens of ms later, so a joiner woken by that (or by its retry timer) started that much
/// later. Errors are retried after a second (the members' polls cover the gap).
async fn watch_group(client: kube::Client, key: GroupKey, changed: mpsc::Sender<GroupKey>) {
    let (namespace, name) = &key;
    let groups: Api<HcommGroup> = Api::namespaced(client.clone(), namespace);
    let tables: Api<ConfigMap> = Api::namespaced(client, namespace);
    let mut versions = futures::stream::select(
        versions_of(groups, name),
        versions_of(tables, &config_map_name(name)),
    );
    while let Some(version) = versions.next().await {
        match version {
            Ok(()) => {
                if changed.send(key.clone()).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(%namespace, group = %name, error = %e, "group watch error; members keep polling");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

/// One item per version of object `name` (its deletion and the watch's bookkeeping
/// aside), or the watch's error.
fn versions_of<K>(api: Api<K>, name: &str) -> BoxStream<'static, Result<(), watcher::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let only = watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(30);
    watcher(api, only)
        .filter_map(|ev| {
            std::future::ready(match ev {
                Ok(watcher::Event::Apply(_)) | Ok(watcher::Event::InitApply(_)) => Some(Ok(())),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

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

    fn key(g: &str) -> GroupKey {
        ("ns".to_owned(), g.to_owned())
    }

    /// Stands in for the API server: each started watch reports its group once, then
    /// stays; `started` records the starts, `live` the watches still running.
    #[derive(Clone, Default)]
    struct FakeWatches {
        started: Arc<Mutex<Vec<GroupKey>>>,
        live: Arc<Mutex<BTreeSet<GroupKey>>>,
    }

    /// Removes its group from `live` when its task is aborted.
    struct Alive(Arc<Mutex<BTreeSet<GroupKey>>>, GroupKey);

    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.lock().unwrap().remove(&self.1);
        }
    }

    impl FakeWatches {
        fn start(&self, k: GroupKey, changed: mpsc::Sender<GroupKey>) -> JoinHandle<()> {
            self.started.lock().unwrap().push(k.clone());
            self.live.lock().unwrap().insert(k.clone());
            let alive = Alive(self.live.clone(), k.clone());
            tokio::spawn(async move {
                let _alive = alive;
                let _ = changed.send(k).await;
                std::future::pending::<()>().await;
            })
        }
    }

    #[tokio::test]
    async fn only_the_groups_here_are_watched_and_a_group_that_leaves_has_its_watch_stopped() {
        let nudges = Arc::new(GroupNudges::default());
        let mut a = nudges.subscribe("ns", "a");
        let mut b = nudges.subscribe("ns", "b");
        let (here, here_rx) = watch::channel(None);
        let fake = FakeWatches::default();
        let follow = tokio::spawn({
            let (nudges, fake) = (nudges.clone(), fake.clone());
            async move { follow_groups(&nudges, here_rx, |k, tx| fake.start(k, tx)).await }
        });
        let settle = || tokio::time::sleep(Duration::from_millis(50));
        // Nothing is watched before the node's Pods were listed.
        settle().await;
        assert!(fake.started.lock().unwrap().is_empty());
        // Group a has a member here: watched, and its first version nudges it.
        here.send_replace(Some(BTreeSet::from([key("a")])));
        tokio::time::timeout(Duration::from_secs(5), a.changed())
            .await
            .expect("group a nudged")
            .unwrap();
        assert!(!b.has_changed().unwrap(), "group b has no member here");
        // b joins; a stays watched (not started again), b's watch starts.
        here.send_replace(Some(BTreeSet::from([key("a"), key("b")])));
        tokio::time::timeout(Duration::from_secs(5), b.changed())
            .await
            .expect("group b nudged")
            .unwrap();
        assert_eq!(*fake.started.lock().unwrap(), [key("a"), key("b")]);
        // a leaves the node: its watch stops, b's goes on.
        here.send_replace(Some(BTreeSet::from([key("b")])));
        settle().await;
        assert_eq!(*fake.live.lock().unwrap(), BTreeSet::from([key("b")]));
        // The node's list closing ends the follower and every watch with it.
        drop(here);
        tokio::time::timeout(Duration::from_secs(5), follow)
            .await
            .expect("the follower ends")
            .unwrap();
        settle().await;
        assert!(fake.live.lock().unwrap().is_empty());
    }
}
