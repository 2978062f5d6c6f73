//! The controller's watch caches, and the writes a reconcile waits to see in them.
//!
//! A reconcile reads every member Pod (NPU accounting for placement), every `HcommNode`,
//! every Node and every group. Listing them from the API server on each reconcile made
//! each one cost four LIST calls and, behind the placement lock, queued the reconciles of
//! fifty groups one after the other (issue 20). The controller keeps reflector stores of
//! all four instead (the same watches that trigger reconciles: a store is updated before
//! the event that wakes a reconcile is handed on), and a reconcile reads those.
//!
//! A store lags the operator's own writes by a watch round trip. Two things must never be
//! planned from a store that does not show them yet:
//! - a group's own members: a reconcile of a group that has not seen the Pods its last
//!   reconcile created would create them again. Every Pod write of `apply` is recorded
//!   with the resource version the API server returned ([`Expectations`], what
//!   client-go's controllers call expectations). A reconcile of a group whose writes the
//!   store does not hold at that version or newer yet is deferred: it returns at once,
//!   and the Pod event that brings the write — which updates the store before it triggers
//!   the group — runs it again. Waiting inside the reconcile instead made its measured
//!   duration seconds of idle time in a 50-group storm (issue 20). A store still behind
//!   after [`CACHE_WAIT`] is not waited for again: the reconcile lists from the API server
//!   (correct, only slower).
//! - every group's NPUs: placement must count a node's NPUs with the Pods other groups
//!   just created there, or two groups get the same free NPU. A plan's joiners are
//!   assumed on their nodes while the placement lock is held ([`Assumed`], as
//!   kube-scheduler assumes a Pod before binding it) and count until the store shows
//!   their Pods; the lock covers reading, planning and assuming — microseconds from the
//!   store — not the API calls that follow, so fifty groups do not queue behind each
//!   other's writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hcomm_crds::contract::LABEL_GROUP;
use hcomm_crds::{HcommGroup, HcommNode};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

/// How long reconciles of a group are deferred for the Pod store to catch up with the
/// operator's own writes before one lists from the API server instead.
pub const CACHE_WAIT: Duration = Duration::from_secs(5);

/// The controller's reflector stores.
#[derive(Clone)]
pub struct Caches {
    /// Member Pods (label `hcomm.io/group`) of every group in the watched scope.
    pub pods: Store<Pod>,
    /// The same Pods folded by group and node, never behind `pods` (`crate::pod_index`).
    pub pod_index: crate::pod_index::PodIndex,
    /// The groups in the watched scope.
    pub groups: Store<HcommGroup>,
    /// Every `HcommNode`.
    pub hcomm_nodes: Store<HcommNode>,
    /// Every Kubernetes Node.
    pub nodes: Store<Node>,
    /// The groups' rank-table ConfigMaps (labelled as the operator's, with a group).
    pub rank_tables: Store<ConfigMap>,
}

/// The caches of the running controller, if one runs (a reconcile called directly, as in
/// tests, lists instead). Cleared when that controller stops: a leader that lost its Lease
/// and later regains it starts new watches.
#[derive(Clone, Default)]
pub struct SharedCaches(Arc<RwLock<Option<Caches>>>);

impl SharedCaches {
    /// The current caches, if a controller runs.
    pub fn get(&self) -> Option<Caches> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Installs `caches` until the returned guard is dropped.
    pub fn install(&self, caches: Caches) -> Installed {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(caches);
        Installed(self.clone())
    }
}

/// Clears the caches when dropped (the controller's future ended or was dropped).
pub struct Installed(SharedCaches);

impl Drop for Installed {
    fn drop(&mut self) {
        *self.0.0.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// A group: `(namespace, name)`.
pub type GroupKey = (String, String);

/// One write the store must show: the resource version the API server answered it with,
/// whether it created the Pod (a patched Pod the store no longer holds was deleted since,
/// which is newer than the patch; a created one it does not hold is not seen yet), and
/// when it was answered (how long the store has lagged it).
#[derive(Debug, Clone)]
struct Write {
    resource_version: String,
    created: bool,
    at: Instant,
}

/// The operator's member-Pod writes a group's next reconcile must see in the store: per
/// group, Pod name → the write.
#[derive(Default)]
pub struct Expectations(Mutex<HashMap<GroupKey, HashMap<String, Write>>>);

impl Expectations {
    /// Records the creation of the member Pod `pod` (the API server's answer); its group is
    /// its `hcomm.io/group` label.
    pub fn created(&self, pod: &Pod) {
        self.wrote(pod, true);
    }

    /// Records a patch of the member Pod `pod` (the API server's answer).
    pub fn patched(&self, pod: &Pod) {
        self.wrote(pod, false);
    }

    /// Forgets the writes of a Pod the operator deleted.
    pub fn deleted(&self, group: &GroupKey, name: &str) {
        if let Some(pending) = lock(&self.0).get_mut(group) {
            pending.remove(name);
        }
    }

    fn wrote(&self, pod: &Pod, created: bool) {
        let (Some(ns), Some(rv), Some(group)) = (
            pod.namespace(),
            pod.resource_version(),
            pod.labels().get(LABEL_GROUP).cloned(),
        ) else {
            return;
        };
        let write = Write {
            resource_version: rv,
            created,
            at: Instant::now(),
        };
        lock(&self.0)
            .entry((ns, group))
            .or_default()
            .insert(pod.name_any(), write);
    }

    /// When the oldest recorded write of `group`'s Pods that `pods` does not show yet was
    /// made; `None` once the store shows them all (forgetting those it does).
    pub fn unseen_since(&self, group: &GroupKey, pods: &Store<Pod>) -> Option<Instant> {
        let mut all = lock(&self.0);
        let pending = all.get_mut(group)?;
        pending.retain(
            |name, write| match pods.get(&ObjectRef::new(name).within(&group.0)) {
                Some(p) => !p
                    .resource_version()
                    .is_some_and(|have| at_least(&have, &write.resource_version)),
                None => write.created,
            },
        );
        let oldest = pending.values().map(|w| w.at).min();
        if oldest.is_none() {
            all.remove(group);
        }
        oldest
    }

    /// Forgets `group`'s recorded writes (its reconcile listed from the API server).
    pub fn clear(&self, group: &GroupKey) {
        lock(&self.0).remove(group);
    }
}

/// The rank-table ConfigMap each group's reconcile last wrote, by the resource version the
/// API server answered. A reconcile reads its group's table from the store once the store
/// shows that write or a newer version; while the store shows an older one, it reads the
/// write's answer — the recorded epoch comes from the table, and planning from a table
/// older than the operator's own last write would publish the same epoch twice. (It used
/// to GET the table then: a consistent read that waits for etcd; 51 of the reconciles over
/// 100 ms in a logged 1,000-member scale-bench run waited on it, issue 20.) The answer is let go once the
/// store shows the write; its version is kept: a watch event at exactly that version is
/// the write coming back, which wakes nobody.
#[derive(Default)]
pub struct TableWrites(Mutex<HashMap<GroupKey, TableWrite>>);

/// One group's last table write.
struct TableWrite {
    resource_version: String,
    /// The API server's answer, until the store shows it.
    answer: Option<Arc<ConfigMap>>,
}

impl TableWrites {
    /// Records the API server's answer to a write of `group`'s table.
    pub fn wrote(&self, group: GroupKey, mut written: ConfigMap) {
        if let Some(resource_version) = written.resource_version() {
            crate::trim::object(&mut written);
            let answer = Some(Arc::new(written));
            lock(&self.0).insert(
                group,
                TableWrite {
                    resource_version,
                    answer,
                },
            );
        }
    }

    /// `group`'s table (its name `name`), current as far as this process knows: `Some(None)`
    /// is "there is none". From the store once it shows the last write or a newer version,
    /// else the write's answer while the store shows an older one. `None` when the store
    /// shows none since the write (not there yet, or deleted since, or its labels taken
    /// off): a GET tells which.
    pub fn cached(
        &self,
        group: &GroupKey,
        name: &str,
        store: &Store<ConfigMap>,
    ) -> Option<Option<Arc<ConfigMap>>> {
        let found = store.get(&ObjectRef::new(name).within(&group.0));
        let mut all = lock(&self.0);
        let Some(written) = all.get_mut(group) else {
            return Some(found);
        };
        let found = found?;
        let current = found
            .resource_version()
            .is_some_and(|have| at_least(&have, &written.resource_version));
        if current {
            written.answer = None;
            return Some(Some(found));
        }
        written.answer.clone().map(Some)
    }

    /// Whether `table` is, as far as this process knows, its own last write of it coming
    /// back through the watch (not a change someone else made).
    pub fn own_echo(&self, table: &ConfigMap) -> bool {
        let (Some(ns), Some(group), Some(rv)) = (
            table.namespace(),
            table.labels().get(LABEL_GROUP).cloned(),
            table.resource_version(),
        ) else {
            return false;
        };
        lock(&self.0)
            .get(&(ns, group))
            .is_some_and(|w| w.resource_version == rv)
    }

    /// Forgets `group` (it is gone).
    pub fn forget(&self, group: &GroupKey) {
        lock(&self.0).remove(group);
    }
}

/// How long an assumed joiner counts without its Pod in the store: a create that failed
/// without the operator knowing (it crashed mid-reconcile) frees its NPUs after this.
pub const ASSUME_TTL: Duration = Duration::from_secs(30);

/// A joiner's NPUs, promised to it before its Pod exists.
#[derive(Debug, Clone)]
struct Assumption {
    node: String,
    resource: String,
    npus: u32,
    at: Instant,
}

/// NPUs promised to joiner Pods the store does not show yet, by `(namespace, Pod name)`.
#[derive(Default)]
pub struct Assumed(Mutex<HashMap<(String, String), Assumption>>);

impl Assumed {
    /// Promises `npus` of `resource` on `node` to the Pod `namespace/name` (call it with
    /// the placement lock held, before the lock is released).
    pub fn assume(&self, namespace: &str, name: &str, node: &str, resource: &str, npus: u32) {
        lock(&self.0).insert(
            (namespace.to_owned(), name.to_owned()),
            Assumption {
                node: node.to_owned(),
                resource: resource.to_owned(),
                npus,
                at: Instant::now(),
            },
        );
    }

    /// Withdraws the promise to `namespace/name` (its Pod was not created).
    pub fn forget(&self, namespace: &str, name: &str) {
        lock(&self.0).remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Adds to `used` the NPUs of `resource` promised to Pods that `present` does not know
    /// yet; forgets promises whose Pod it knows (it counts there now) or that expired.
    pub fn add_to(
        &self,
        used: &mut BTreeMap<String, u32>,
        resource: &str,
        present: impl Fn(&str, &str) -> bool,
    ) {
        let now = Instant::now();
        let mut all = lock(&self.0);
        all.retain(|(ns, name), a| !present(ns, name) && now.duration_since(a.at) < ASSUME_TTL);
        for a in all.values().filter(|a| a.resource == resource) {
            *used.entry(a.node.clone()).or_default() += a.npus;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether resource version `have` is `want` or newer. Resource versions are opaque to
/// clients, but the API server's are etcd revisions, decimal and increasing; anything
/// else only counts when equal.
pub fn at_least(have: &str, want: &str) -> bool {
    match (have.parse::<u64>(), want.parse::<u64>()) {
        (Ok(h), Ok(w)) => h >= w,
        _ => have == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    fn pod(name: &str, rv: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                         "labels": {(LABEL_GROUP): "g"}}
        }))
        .unwrap()
    }

    fn g() -> GroupKey {
        ("ns".into(), "g".into())
    }

    #[test]
    fn resource_versions_compare_as_etcd_revisions_else_only_when_equal() {
        assert!(at_least("120", "120") && at_least("121", "120"));
        assert!(!at_least("119", "120"));
        assert!(at_least("x", "x") && !at_least("x", "y"));
    }

    /// Whether `pods` shows every recorded write of `group`'s Pods.
    fn settled(expected: &Expectations, group: &GroupKey, pods: &Store<Pod>) -> bool {
        expected.unseen_since(group, pods).is_none()
    }

    #[test]
    fn a_write_is_settled_once_the_store_holds_it_at_that_version_or_newer() {
        let (reader, mut writer) = store::<Pod>();
        let expected = Expectations::default();
        assert!(settled(&expected, &g(), &reader), "nothing written");
        expected.created(&pod("a", "10"));
        expected.created(&pod("b", "11"));
        assert!(!settled(&expected, &g(), &reader), "the store has neither");
        let other: GroupKey = ("ns".into(), "other".into());
        assert!(
            settled(&expected, &other, &reader),
            "another group waits for nothing"
        );
        writer.apply_watcher_event(&Event::Apply(pod("a", "9")));
        writer.apply_watcher_event(&Event::Apply(pod("b", "12")));
        assert!(
            !settled(&expected, &g(), &reader),
            "a is older than the write"
        );
        let unseen = expected.unseen_since(&g(), &reader).expect("a is unseen");
        assert!(unseen.elapsed() < Duration::from_secs(5), "{unseen:?}");
        writer.apply_watcher_event(&Event::Apply(pod("a", "10")));
        assert!(settled(&expected, &g(), &reader));
        assert_eq!(expected.unseen_since(&g(), &reader), None);
        expected.created(&pod("c", "13"));
        expected.clear(&g());
        assert!(settled(&expected, &g(), &reader));
        // A patched Pod the store no longer holds was deleted since: nothing to wait for.
        expected.patched(&pod("gone", "14"));
        assert!(settled(&expected, &g(), &reader));
        // A Pod the operator deleted itself is forgotten.
        expected.created(&pod("d", "15"));
        expected.deleted(&g(), "d");
        assert!(settled(&expected, &g(), &reader));
    }

    #[test]
    fn an_assumed_joiner_counts_on_its_node_until_the_store_shows_its_pod() {
        let assumed = Assumed::default();
        assumed.assume("ns", "a-0", "n1", "npu", 2);
        assumed.assume("ns", "b-0", "n1", "other", 8);
        let mut used = BTreeMap::from([("n1".to_owned(), 1)]);
        assumed.add_to(&mut used, "npu", |_, _| false);
        assert_eq!(used["n1"], 3, "the store's 1 and the promised 2");
        // The store shows the Pod: it counts there, not twice.
        let mut used = BTreeMap::from([("n1".to_owned(), 3)]);
        assumed.add_to(&mut used, "npu", |_, name| name == "a-0");
        assert_eq!(used["n1"], 3);
        let mut used = BTreeMap::new();
        assumed.add_to(&mut used, "npu", |_, _| false);
        assert!(used.is_empty(), "forgotten once seen");
        assumed.forget("ns", "b-0");
        assumed.add_to(&mut used, "other", |_, _| false);
        assert!(used.is_empty(), "withdrawn");
    }

    fn table(rv: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-rank-table", "namespace": "ns", "resourceVersion": rv,
                         "labels": {(LABEL_GROUP): "g"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_rank_table_is_read_from_the_store_once_it_shows_the_last_write_else_from_its_answer() {
        let (reader, mut writer) = store::<ConfigMap>();
        let writes = TableWrites::default();
        let cached = |w: &TableWrites| {
            w.cached(&g(), "g-rank-table", &reader)
                .map(|t| t.and_then(|t| t.resource_version()))
        };
        assert_eq!(cached(&writes), Some(None), "nothing written, none stored");
        writer.apply_watcher_event(&Event::Apply(table("5")));
        assert_eq!(cached(&writes), Some(Some("5".into())), "someone else's");
        writes.wrote(g(), table("7"));
        assert_eq!(
            cached(&writes),
            Some(Some("7".into())),
            "the store is behind the write: its answer"
        );
        assert!(
            !writes.own_echo(&table("5")),
            "an older version is not the write"
        );
        assert!(writes.own_echo(&table("7")));
        writer.apply_watcher_event(&Event::Apply(table("7")));
        assert_eq!(cached(&writes), Some(Some("7".into())));
        writer.apply_watcher_event(&Event::Apply(table("9")));
        assert_eq!(
            cached(&writes),
            Some(Some("9".into())),
            "a newer edit counts"
        );
        assert!(
            !writes.own_echo(&table("9")),
            "someone else's edit wakes the group"
        );
        writer.apply_watcher_event(&Event::Delete(table("9")));
        assert_eq!(
            cached(&writes),
            None,
            "deleted since the write: GET to be sure"
        );
        writes.forget(&g());
        assert_eq!(cached(&writes), Some(None));
        // A first table written while the store shows none: not there yet, or deleted
        // already? A GET tells.
        writes.wrote(g(), table("11"));
        assert_eq!(cached(&writes), None);
    }

    #[test]
    fn installed_caches_go_with_their_guard() {
        let shared = SharedCaches::default();
        let caches = Caches {
            pods: store().0,
            pod_index: Default::default(),
            groups: store().0,
            hcomm_nodes: store().0,
            nodes: store().0,
            rank_tables: store().0,
        };
        let guard = shared.install(caches);
        assert!(shared.get().is_some());
        drop(guard);
        assert!(shared.get().is_none());
    }
}
