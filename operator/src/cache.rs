//! The controller's watch caches, and the writes a reconcile waits to see in them.
//!
//! A reconcile reads every member Pod (NPU accounting for placement), every `HcommNode`,
//! every Node and every group. Listing them from the API server on each reconcile made
//! each one cost four LIST calls and, behind the placement lock, queued the reconciles of
//! fifty groups one after the other (issue 20). The controller keeps reflector stores of
//! all four instead (the same watches that trigger reconciles: a store is updated before
//! the event that wakes a reconcile is handed on), and a reconcile reads those.
//!
//! A store lags the operator's own writes by a watch round trip, and placement must never
//! count a node's NPUs without the Pods the previous reconcile just created there (two
//! groups would get the same free NPU). So every Pod write of `apply` is recorded here with
//! the resource version the API server returned, and a reconcile, under the placement
//! lock, first waits until the Pod store holds each of them at that version or newer
//! ([`Expectations::settled`]) — what client-go's controllers call expectations. Within
//! [`CACHE_WAIT`] it nearly always does; otherwise the reconcile lists from the API
//! server as before (correct, only slower).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use hcomm_crds::{HcommGroup, HcommNode};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

/// How long a reconcile waits for the Pod store to catch up with the operator's own
/// writes before it lists from the API server instead.
pub const CACHE_WAIT: Duration = Duration::from_secs(5);

/// The controller's reflector stores.
#[derive(Clone)]
pub struct Caches {
    /// Member Pods (label `hcomm.io/group`) of every group in the watched scope.
    pub pods: Store<Pod>,
    /// The groups in the watched scope.
    pub groups: Store<HcommGroup>,
    /// Every `HcommNode`.
    pub hcomm_nodes: Store<HcommNode>,
    /// Every Kubernetes Node.
    pub nodes: Store<Node>,
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

/// Pod writes the store must show before the next reconcile plans: `namespace/name` → the
/// resource version the API server answered the write with.
#[derive(Default)]
pub struct Expectations(Mutex<HashMap<(String, String), String>>);

impl Expectations {
    /// Records a write of `pod` (the API server's answer to a create or patch).
    pub fn wrote(&self, pod: &Pod) {
        let (Some(ns), Some(rv)) = (pod.namespace(), pod.resource_version()) else {
            return;
        };
        self.lock().insert((ns, pod.name_any()), rv);
    }

    /// Whether `pods` shows every recorded write (forgetting those it does).
    pub fn settled(&self, pods: &Store<Pod>) -> bool {
        let mut pending = self.lock();
        pending.retain(|(ns, name), rv| {
            let seen = pods
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|p| p.resource_version());
            !seen.is_some_and(|have| at_least(&have, rv))
        });
        pending.is_empty()
    }

    /// Forgets every recorded write (after a reconcile listed from the API server).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
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
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}
        }))
        .unwrap()
    }

    #[test]
    fn resource_versions_compare_as_etcd_revisions_else_only_when_equal() {
        assert!(at_least("120", "120") && at_least("121", "120"));
        assert!(!at_least("119", "120"));
        assert!(at_least("x", "x") && !at_least("x", "y"));
    }

    #[test]
    fn a_write_is_settled_once_the_store_holds_it_at_that_version_or_newer() {
        let (reader, mut writer) = store::<Pod>();
        let expected = Expectations::default();
        assert!(expected.settled(&reader), "nothing written");
        expected.wrote(&pod("a", "10"));
        expected.wrote(&pod("b", "11"));
        assert!(!expected.settled(&reader), "the store has neither");
        writer.apply_watcher_event(&Event::Apply(pod("a", "9")));
        writer.apply_watcher_event(&Event::Apply(pod("b", "12")));
        assert!(!expected.settled(&reader), "a is older than the write");
        writer.apply_watcher_event(&Event::Apply(pod("a", "10")));
        assert!(expected.settled(&reader));
        expected.wrote(&pod("c", "13"));
        expected.clear();
        assert!(expected.settled(&reader));
    }

    #[test]
    fn installed_caches_go_with_their_guard() {
        let shared = SharedCaches::default();
        let caches = Caches {
            pods: store().0,
            groups: store().0,
            hcomm_nodes: store().0,
            nodes: store().0,
        };
        let guard = shared.install(caches);
        assert!(shared.get().is_some());
        drop(guard);
        assert!(shared.get().is_none());
    }
}
