//! The member Pods as a reconcile reads them: each group's Pod names, and the NPUs the
//! operator's member Pods hold per node, kept up to date event by event.
//!
//! Every reconcile needs a node's NPUs as every group's member Pods request them. Reading
//! that from the Pod store meant walking every member Pod of the cluster, and checking
//! each one's labels, owner and requests, on every reconcile, with the placement lock held:
//! at 1,000 members that walk was 37 % of the operator's CPU in a 50-group storm, and the
//! lock made the reconciles queue behind it (issue 20, docs/benchmarks.md). The index
//! folds each Pod in once, when its event arrives, so a reconcile reads its group's
//! share in time proportional to the groups and the nodes they use, not to the Pods.
//!
//! The index is fed from the Pod watch *before* the reflector's store, so it is never
//! behind the store: a reconcile that finds its group's own writes in the store
//! (`crate::cache::Expectations`) finds them here too, and a Pod counted here is never
//! also counted as assumed (`crate::cache::Assumed`). A relist is folded into a new index
//! and swapped in whole, as the store does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{LABEL_GROUP, LABEL_MANAGED_BY, MANAGER_NAME};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Resource;
use kube::runtime::watcher;

/// A group's identity as its Pods' controller reference names it: namespace, name, UID.
pub type Owner = (String, String, String);

/// `(namespace, name)`.
type Key = (String, String);

/// What one Pod contributes: the group label it carries, and the NPUs it holds if it is an
/// operator's member Pod that has not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    group: Option<String>,
    claim: Option<Claim>,
}

/// NPUs a member Pod holds on a node, per extended resource, for the group that owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    owner: Owner,
    node: String,
    npus: Vec<(String, u32)>,
}

/// The folded Pods. Read it through [`PodIndex::read`].
#[derive(Debug, Default)]
pub struct Index {
    pods: HashMap<Key, Entry>,
    /// `(namespace, group label)` → the names of the Pods carrying it.
    names: HashMap<Key, BTreeSet<String>>,
    /// Owner → `(resource, node)` → NPUs its member Pods hold there.
    held: HashMap<Owner, BTreeMap<(String, String), u32>>,
}

impl Index {
    /// Whether the Pod `namespace/name` is known (its NPUs count here, if it holds any).
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.pods
            .contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    /// The names of the Pods in `namespace` labelled as members of group `group`, in order.
    pub fn names(&self, namespace: &str, group: &str) -> Vec<String> {
        self.names
            .get(&(namespace.to_owned(), group.to_owned()))
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// NPUs of `resource` held per node by the member Pods of the groups in `groups` (a
    /// Pod whose owner is no existing group counts for nothing: issue 17, point 6).
    pub fn used_npus(&self, resource: &str, groups: &BTreeSet<Owner>) -> BTreeMap<String, u32> {
        let mut used: BTreeMap<String, u32> = BTreeMap::new();
        for held in groups.iter().filter_map(|g| self.held.get(g)) {
            for ((r, node), npus) in held {
                if r == resource {
                    *used.entry(node.clone()).or_default() += npus;
                }
            }
        }
        used
    }

    fn insert(&mut self, pod: &Pod) {
        let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return;
        };
        let key = (namespace.clone(), name.clone());
        let entry = Entry::of(pod);
        if self.pods.get(&key) == Some(&entry) {
            return;
        }
        self.remove(&key);
        if let Some(group) = &entry.group {
            self.names
                .entry((namespace.clone(), group.clone()))
                .or_default()
                .insert(name.clone());
        }
        if let Some(claim) = &entry.claim {
            let held = self.held.entry(claim.owner.clone()).or_default();
            for (resource, npus) in &claim.npus {
                *held
                    .entry((resource.clone(), claim.node.clone()))
                    .or_default() += npus;
            }
        }
        self.pods.insert(key, entry);
    }

    fn remove(&mut self, key: &Key) {
        let Some(entry) = self.pods.remove(key) else {
            return;
        };
        if let Some(group) = entry.group {
            let label = (key.0.clone(), group);
            if let Some(names) = self.names.get_mut(&label) {
                names.remove(&key.1);
                if names.is_empty() {
                    self.names.remove(&label);
                }
            }
        }
        if let Some(claim) = entry.claim
            && let Some(held) = self.held.get_mut(&claim.owner)
        {
            for (resource, npus) in claim.npus {
                let at = (resource, claim.node.clone());
                if let Some(n) = held.get_mut(&at) {
                    *n = n.saturating_sub(npus);
                    if *n == 0 {
                        held.remove(&at);
                    }
                }
            }
            if held.is_empty() {
                self.held.remove(&claim.owner);
            }
        }
    }
}

impl Entry {
    fn of(pod: &Pod) -> Entry {
        Entry {
            group: pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_GROUP))
                .cloned(),
            claim: Claim::of(pod),
        }
    }
}

impl Claim {
    /// What `pod` holds, if it is an operator's member Pod that has not finished
    /// (Succeeded and Failed Pods release their NPUs). It counts on its node once bound,
    /// and before that on the node its required affinity names (where the operator
    /// planned it), so a plan never hands out NPUs a Pod waiting for the scheduler was
    /// planned on.
    fn of(pod: &Pod) -> Option<Claim> {
        let owner = owner(pod)?;
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if finished {
            return None;
        }
        let spec = pod.spec.as_ref()?;
        let node = crate::affinity::node_of(spec)?;
        // Per container, each resource's request, else its limit.
        let mut held: BTreeMap<String, u32> = BTreeMap::new();
        for r in spec.containers.iter().filter_map(|c| c.resources.as_ref()) {
            let (requests, limits) = (r.requests.as_ref(), r.limits.as_ref());
            let named: BTreeSet<&String> = requests
                .into_iter()
                .chain(limits)
                .flat_map(|m| m.keys())
                .collect();
            for resource in named {
                let quantity = requests
                    .and_then(|m| m.get(resource))
                    .or_else(|| limits.and_then(|m| m.get(resource)));
                if let Some(n) = quantity.and_then(count) {
                    *held.entry(resource.clone()).or_default() += n;
                }
            }
        }
        let npus = held.into_iter().filter(|(_, n)| *n > 0).collect();
        Some(Claim { owner, node, npus })
    }
}

/// A whole-number quantity (extended resources are integers).
pub fn count(q: &Quantity) -> Option<u32> {
    q.0.trim().parse().ok()
}

/// The group `pod` is a member Pod of, if it carries the marks of one: labelled as managed
/// by this operator, controlled by an `HcommGroup` whose name its group label repeats.
/// Anyone can write those on their own Pods; it counts only if that group exists with that
/// UID in the Pod's namespace ([`Index::used_npus`] checks).
pub fn owner(pod: &Pod) -> Option<Owner> {
    let labels = pod.metadata.labels.as_ref()?;
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGER_NAME) {
        return None;
    }
    let namespace = pod.metadata.namespace.as_ref()?;
    let group = labels.get(LABEL_GROUP)?;
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find_map(|o| {
            (o.controller == Some(true)
                && o.kind == HcommGroup::kind(&())
                && o.api_version == HcommGroup::api_version(&())
                && &o.name == group)
                .then(|| (namespace.clone(), o.name.clone(), o.uid.clone()))
        })
}

/// The index shared by the reconciles; [`Writer`] keeps it current.
#[derive(Debug, Clone, Default)]
pub struct PodIndex(Arc<RwLock<Index>>);

impl PodIndex {
    /// An index of `pods` (a reconcile that listed them from the API server).
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> PodIndex {
        let mut index = Index::default();
        pods.into_iter().for_each(|p| index.insert(p));
        PodIndex(Arc::new(RwLock::new(index)))
    }

    /// The index as it is now. Hold the guard briefly: the watch waits for it.
    pub fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// Folds the Pod watch's events into a [`PodIndex`].
pub struct Writer {
    index: PodIndex,
    /// The relist under way (between `Init` and `InitDone`).
    relist: Option<Index>,
}

/// An empty index and the writer that keeps it.
pub fn index() -> (PodIndex, Writer) {
    let index = PodIndex::default();
    let writer = Writer {
        index: index.clone(),
        relist: None,
    };
    (index, writer)
}

impl Writer {
    /// Folds in one watch event, as the reflector's store does: a relist replaces the
    /// index whole once it is complete.
    pub fn apply(&mut self, event: &watcher::Event<Pod>) {
        let write = || self.index.0.write().unwrap_or_else(|p| p.into_inner());
        match event {
            watcher::Event::Apply(pod) => write().insert(pod),
            watcher::Event::Delete(pod) => {
                if let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
                    write().remove(&(ns.clone(), name.clone()));
                }
            }
            watcher::Event::Init => self.relist = Some(Index::default()),
            watcher::Event::InitApply(pod) => {
                self.relist.get_or_insert_with(Index::default).insert(pod);
            }
            watcher::Event::InitDone => *write() = self.relist.take().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
#[path = "pod_index_tests.rs"]
mod tests;
