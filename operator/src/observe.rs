//! Fetch (the first step of the pipeline): read what the cluster holds about a group —
//! its member Pods, the NPUs the operator's member Pods request per node, the Kubernetes
//! Nodes' allocatable NPUs, the `HcommNode` inventories (from the controller's watch
//! caches, see `crate::cache`) and the recorded rank table — and turn it into planner
//! inputs (and, for the `LinksHealthy` condition, the link tests every
//! node's agent published). The conversions are pure.
//!
//! Size: the fetch and its pure conversions of one observation belong together; the
//! conversions are small functions each with its unit test below.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_crds::contract::LABEL_GROUP;
use hcomm_crds::{
    DeviceHealth, HcommGroup, HcommGroupStatus, HcommNode, LinkTestResult, MemberPhase,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::cache::CACHE_WAIT;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::phase::{self, ObservedMember};
use crate::planner::{Device, NodeInventory, Recorded};
use crate::pod_index::PodIndex;
use crate::rank_table::{EPOCH_KEY, MEMBERS_KEY, config_map_name};

pub use hcomm_crds::contract::ANNOTATION_AVOID_NODES;

/// What the cluster holds about one group.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The group's member Pods.
    pub members: Vec<ObservedMember>,
    /// NPUs of the group's resource requested by the operator's member Pods (of every
    /// group), per node.
    pub used_npus: BTreeMap<String, u32>,
    /// Node inventories.
    pub nodes: Vec<NodeInventory>,
    /// The latest link test per peer each node's agent published, by node name.
    pub link_tests: BTreeMap<String, Vec<LinkTestResult>>,
    /// When each node's agent last published its status, by node name.
    pub published_at: BTreeMap<String, Timestamp>,
    /// The recorded epoch and member set.
    pub recorded: Recorded,
    /// The rank-table ConfigMap, if any.
    pub config_map: Option<ConfigMap>,
    /// Cordoned Kubernetes Nodes (`kubectl drain`): their members move (`disruption`).
    pub cordoned: BTreeSet<String>,
}

/// What a reconcile reads before it takes the placement lock: its group's rank table, and
/// whether the watch caches are current for the group (they show every member-Pod write
/// of its earlier reconciles: `crate::cache`).
pub struct Prepared {
    config_map: Option<ConfigMap>,
    cache_current: bool,
}

/// Whether the Pod store shows a group's own earlier writes (`crate::cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnWrites {
    /// It does (or nothing is pending): plan from the caches.
    Seen,
    /// Not yet, for less than [`CACHE_WAIT`]: defer the reconcile. The Pod event that
    /// brings the write runs it again; `recheck_after` bounds the wait if none comes.
    Unseen { recheck_after: Duration },
    /// Not within [`CACHE_WAIT`]: list from the API server instead.
    Overdue,
}

impl OwnWrites {
    /// Judges a group whose oldest write the store does not show was made at
    /// `unseen_since` (pure).
    pub fn judge(unseen_since: Option<Instant>, now: Instant) -> OwnWrites {
        let Some(since) = unseen_since else {
            return OwnWrites::Seen;
        };
        match CACHE_WAIT.checked_sub(now.saturating_duration_since(since)) {
            Some(left) if !left.is_zero() => OwnWrites::Unseen {
                recheck_after: left,
            },
            _ => OwnWrites::Overdue,
        }
    }
}

/// Whether the running controller's Pod store shows `group`'s own writes. No I/O: what a
/// reconcile asks first, so a deferred one costs no API call.
pub fn own_writes(ctx: &Context, group: &HcommGroup) -> OwnWrites {
    let Some(caches) = ctx.caches.get() else {
        return OwnWrites::Seen;
    };
    let key = (group.namespace().unwrap_or_default(), group.name_any());
    OwnWrites::judge(
        ctx.expected.unseen_since(&key, &caches.pods),
        Instant::now(),
    )
}

/// Reads the group's rank table and decides whether the caches can be planned from: they
/// are filled (waiting up to [`CACHE_WAIT`] for their first list, at start only) and show
/// the group's own writes (`own`, from [`own_writes`]; a reconcile defers while they are
/// [`OwnWrites::Unseen`]). Call it before taking the placement lock.
pub async fn prepare(ctx: &Context, group: &HcommGroup, own: OwnWrites) -> Result<Prepared> {
    let name = group.name_any();
    let namespace = group.namespace().unwrap_or_default();
    let caches = ctx.caches.get();
    let cache_current = match &caches {
        None => false,
        Some(caches) => {
            let filled = async {
                caches.pods.wait_until_ready().await.ok()?;
                caches.groups.wait_until_ready().await.ok()?;
                caches.hcomm_nodes.wait_until_ready().await.ok()?;
                caches.nodes.wait_until_ready().await.ok()?;
                caches.rank_tables.wait_until_ready().await.ok()
            };
            let filled = matches!(tokio::time::timeout(CACHE_WAIT, filled).await, Ok(Some(())));
            if !filled {
                tracing::warn!(wait = ?CACHE_WAIT, "the watch caches were not filled in time; listing instead");
            } else if own != OwnWrites::Seen {
                tracing::warn!(
                    wait = ?CACHE_WAIT,
                    "the watch caches did not show the group's own writes in time; listing instead"
                );
            }
            filled && own == OwnWrites::Seen
        }
    };
    let table_name = config_map_name(&name);
    let key = (namespace.clone(), name.clone());
    // From the store once it shows the operator's last write of the table (a reconcile
    // then costs no read at all), else from the API server.
    let cached = caches
        .filter(|_| cache_current)
        .and_then(|c| ctx.table_writes.cached(&key, &table_name, &c.rank_tables));
    let config_map = match cached {
        Some(table) => table.map(Arc::unwrap_or_clone),
        None => Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace)
            .get_opt(&table_name)
            .await
            .map_err(Error::kube(format!(
                "read rank table of {namespace}/{name}"
            )))?,
    };
    Ok(Prepared {
        config_map,
        cache_current,
    })
}

/// Everything a reconcile reads about the cluster besides its group's rank table.
struct Snapshot {
    pods: PodLookup,
    /// The member Pods' names by group and NPUs by node (`crate::pod_index`).
    index: PodIndex,
    groups: Groups,
    hcomm_nodes: Vec<Arc<HcommNode>>,
    nodes: Vec<Arc<Node>>,
}

impl Snapshot {
    /// The caches' view (no API call).
    fn cached(caches: &crate::cache::Caches) -> Snapshot {
        Snapshot {
            pods: PodLookup::Store(caches.pods.clone()),
            index: caches.pod_index.clone(),
            groups: existing_groups(caches.groups.state().iter().map(|g| g.meta())),
            hcomm_nodes: caches.hcomm_nodes.state(),
            nodes: caches.nodes.state(),
        }
    }

    /// Lists from the API server (served from etcd, current by definition).
    async fn listed(ctx: &Context) -> Result<Snapshot> {
        let (pods, groups): (Api<Pod>, Api<HcommGroup>) = match &ctx.namespace {
            Some(ns) => (
                Api::namespaced(ctx.client.clone(), ns),
                Api::namespaced(ctx.client.clone(), ns),
            ),
            None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
        };
        let pods = pods
            .list(&ListParams::default().labels(LABEL_GROUP))
            .await
            .map_err(Error::kube("list member Pods of every group"))?;
        let groups = groups
            .list_metadata(&ListParams::default())
            .await
            .map_err(Error::kube("list HcommGroups"))?;
        let hcomm_nodes = Api::<HcommNode>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(Error::kube("list HcommNodes"))?;
        let nodes = Api::<Node>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(Error::kube("list Nodes"))?;
        Ok(Snapshot {
            index: PodIndex::of(&pods.items),
            pods: PodLookup::Listed(
                pods.items
                    .into_iter()
                    .map(|p| {
                        (
                            (p.namespace().unwrap_or_default(), p.name_any()),
                            Arc::new(p),
                        )
                    })
                    .collect(),
            ),
            groups: existing_groups(groups.items.iter().map(|g| &g.metadata)),
            hcomm_nodes: arcs(hcomm_nodes.items),
            nodes: arcs(nodes.items),
        })
    }
}

/// The member Pods' contents by name: the store's, or those a reconcile listed.
enum PodLookup {
    Store(Store<Pod>),
    Listed(HashMap<(String, String), Arc<Pod>>),
}

impl PodLookup {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        match self {
            PodLookup::Store(store) => store.get(&ObjectRef::new(name).within(namespace)),
            PodLookup::Listed(pods) => pods.get(&(namespace.to_owned(), name.to_owned())).cloned(),
        }
    }
}

fn arcs<K>(items: Vec<K>) -> Vec<Arc<K>> {
    items.into_iter().map(Arc::new).collect()
}

/// Reads everything the planner needs about `group`: from the caches when `prepared` found
/// them current, else listed. Call it with the placement lock held: the NPUs it counts
/// include those assumed for other groups' joiners whose Pods the cache does not show yet.
pub async fn fetch(
    ctx: &Context,
    group: &HcommGroup,
    latest: &HcommGroupStatus,
    prepared: Prepared,
) -> Result<Observed> {
    let name = group.name_any();
    let namespace = group.namespace().unwrap_or_default();
    let caches = ctx.caches.get().filter(|_| prepared.cache_current);
    let snapshot = match &caches {
        Some(c) => Snapshot::cached(c),
        None => {
            let listed = Snapshot::listed(ctx).await?;
            // Everything the group wrote is in etcd, so in this list.
            ctx.expected.clear(&(namespace.clone(), name.clone()));
            listed
        }
    };
    let resource = group.spec.npu.resource_name.as_str();
    let allocatable = allocatable(snapshot.nodes.iter().map(AsRef::as_ref), resource);
    let uid = group.meta().uid.clone();
    let index = snapshot.index.read();
    // The group's own Pods, by the names the index keeps per group (not a walk over every
    // group's Pods: issue 20).
    let members: Vec<ObservedMember> = index
        .names(&namespace, &name)
        .iter()
        .filter_map(|pod| snapshot.pods.get(&namespace, pod))
        .filter(|pod| owned_by(pod, uid.as_deref()))
        .filter_map(|pod| phase::observe(&pod, resource))
        .collect();
    let mut used = index.used_npus(resource, &snapshot.groups);
    ctx.assumed
        .add_to(&mut used, resource, |ns, pod| index.contains(ns, pod));
    drop(index);
    // Only the member nodes' links and publications matter to this group's report.
    let member_nodes: BTreeSet<&str> = members.iter().filter_map(|m| m.node.as_deref()).collect();
    let hcomm_nodes = || snapshot.hcomm_nodes.iter().map(AsRef::as_ref);
    let of_members = || hcomm_nodes().filter(|n| member_nodes.contains(n.spec.node_name.as_str()));
    let link_tests = link_tests(of_members());
    let published_at = published_at(of_members());
    Ok(Observed {
        members,
        used_npus: used,
        nodes: hcomm_nodes().map(|n| inventory(n, &allocatable)).collect(),
        link_tests,
        published_at,
        recorded: recorded(prepared.config_map.as_ref(), latest),
        config_map: prepared.config_map,
        cordoned: crate::disruption::cordoned(snapshot.nodes.iter().map(AsRef::as_ref)),
    })
}

fn owned_by(pod: &Pod, uid: Option<&str>) -> bool {
    let Some(uid) = uid else { return true };
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The groups that exist, as (namespace, name, UID).
pub type Groups = std::collections::BTreeSet<(String, String, String)>;

/// The existing groups' identities, from their metadata (pure).
pub fn existing_groups<'a>(metas: impl IntoIterator<Item = &'a ObjectMeta>) -> Groups {
    metas
        .into_iter()
        .filter_map(|m| Some((m.namespace.clone()?, m.name.clone()?, m.uid.clone()?)))
        .collect()
}

/// The allocatable NPUs of `resource` per Kubernetes Node.
pub fn allocatable<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    resource: &str,
) -> BTreeMap<String, u32> {
    nodes
        .into_iter()
        .filter_map(|n| {
            let q = n.status.as_ref()?.allocatable.as_ref()?.get(resource)?;
            Some((n.name_any(), crate::pod_index::count(q)?))
        })
        .collect()
}

/// The planner's view of an `HcommNode`, with the allocatable NPUs of its Kubernetes Node.
pub fn inventory(node: &HcommNode, allocatable: &BTreeMap<String, u32>) -> NodeInventory {
    // Borrowed, not cloned whole: the status also carries every link test the node ran.
    let status = node.status.as_ref();
    NodeInventory {
        npus: allocatable.get(&node.spec.node_name).copied().unwrap_or(0),
        name: node.spec.node_name.clone(),
        topology: status.map(|s| s.topology.clone()).unwrap_or_default(),
        data_address: status.and_then(|s| s.data_address.clone()),
        devices: status
            .map(|s| s.devices.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|d| Device {
                id: d.id,
                ip: d.ip.clone(),
                healthy: d.health == DeviceHealth::Healthy,
            })
            .collect(),
    }
}

/// The link tests of every node, by node name (nodes without results are left out).
pub fn link_tests<'a>(
    nodes: impl IntoIterator<Item = &'a HcommNode>,
) -> BTreeMap<String, Vec<LinkTestResult>> {
    nodes
        .into_iter()
        .filter_map(|node| {
            let tests = node.status.as_ref()?.link_tests.clone();
            (!tests.is_empty()).then(|| (node.spec.node_name.clone(), tests))
        })
        .collect()
}

/// When each node's agent last published its status (`status.lastUpdated`), by node name.
pub fn published_at<'a>(
    nodes: impl IntoIterator<Item = &'a HcommNode>,
) -> BTreeMap<String, Timestamp> {
    nodes
        .into_iter()
        .filter_map(|node| {
            let at = node.status.as_ref()?.last_updated.as_ref()?.0;
            Some((node.spec.node_name.clone(), at))
        })
        .collect()
}

/// The recorded epoch and set: the newer of the published one (the rank-table ConfigMap)
/// and the planned one (the group status: its epoch and the members it lists that are not
/// on their way out).
///
/// The status runs ahead of the ConfigMap while an epoch's table waits for its members'
/// device-plugin allocations. Taking the ConfigMap alone then would make every reconcile
/// see the planned set as a change against the published one and bump the epoch again;
/// taking the status' epoch with the ConfigMap's set would too. A crash between creating
/// joiners and writing the status is covered by the joiners' epoch labels
/// (`planner::epoch`). `status` is the group's latest (`crate::status_written`): this
/// process's last write while the cached object does not show it yet.
pub fn recorded(config_map: Option<&ConfigMap>, status: &HcommGroupStatus) -> Recorded {
    let planned = Recorded {
        epoch: status.epoch,
        members: status
            .members
            .iter()
            .filter(|m| !matches!(m.phase, MemberPhase::Draining | MemberPhase::Leaving))
            .map(|m| m.name.clone())
            .collect(),
    };
    let Some(data) = config_map.and_then(|c| c.data.as_ref()) else {
        return planned;
    };
    let published = Recorded {
        epoch: data
            .get(EPOCH_KEY)
            .and_then(|e| e.trim().parse().ok())
            .unwrap_or(0),
        members: data
            .get(MEMBERS_KEY)
            .map(|m| {
                m.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    };
    if planned.epoch > published.epoch {
        planned
    } else {
        published
    }
}

/// Nodes to avoid, from the group's annotation.
pub fn avoid_nodes(group: &HcommGroup) -> Vec<String> {
    group
        .annotations()
        .get(ANNOTATION_AVOID_NODES)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn group(status: serde_json::Value) -> HcommGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "w"}]}}},
            "status": status
        }))
        .unwrap()
    }

    fn member(name: &str, phase: &str) -> serde_json::Value {
        serde_json::json!({"name": name, "index": 0, "ranks": {"first": 0, "count": 1},
                           "phase": phase, "epoch": 1})
    }

    fn config_map(epoch: i64, members: &[&str]) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([
                (EPOCH_KEY.to_owned(), epoch.to_string()),
                (MEMBERS_KEY.to_owned(), members.join("\n")),
            ])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn existing_groups_are_read_from_their_metadata() {
        let g: kube::core::PartialObjectMeta<HcommGroup> =
            serde_json::from_value(serde_json::json!({
                "apiVersion": HcommGroup::api_version(&()), "kind": HcommGroup::kind(&()),
                "metadata": {"name": "decode", "namespace": "ai", "uid": "uid-decode"}
            }))
            .unwrap();
        assert_eq!(
            existing_groups([&g.metadata]),
            Groups::from([("ai".into(), "decode".into(), "uid-decode".into())])
        );
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_planned_epoch_whose_table_is_held_back_is_the_recorded_one() {
        // Epoch 2 planned (g-2-e2 joined the status), its table waits for an allocation.
        let g = group(serde_json::json!({"epoch": 2, "members": [
            member("g-0-e1", "Ready"), member("g-1-e1", "Ready"), member("g-2-e2", "Pending"),
            member("g-3-e1", "Draining")]}));
        let table = config_map(1, &["g-0-e1", "g-1-e1", "g-3-e1"]);
        let r = recorded(Some(&table), g.status.as_ref().unwrap());
        assert_eq!(r.epoch, 2);
        assert_eq!(r.members, set(&["g-0-e1", "g-1-e1", "g-2-e2"]));
    }

    #[test]
    fn a_published_table_is_the_record_once_it_caught_up_and_without_one_the_status_is() {
        let g = group(serde_json::json!({"epoch": 2, "members": [member("a", "Ready")]}));
        let status = g.status.as_ref().unwrap();
        let r = recorded(Some(&config_map(2, &["a", "b"])), status);
        assert_eq!((r.epoch, r.members), (2, set(&["a", "b"])));
        let r = recorded(None, status);
        assert_eq!((r.epoch, r.members), (2, set(&["a"])));
        // A group without a status yet: `status_written::latest` gives the default one.
        assert_eq!(
            recorded(None, &HcommGroupStatus::default()),
            Recorded::default()
        );
    }

    #[test]
    fn a_reconcile_defers_for_unseen_own_writes_until_the_cache_wait_is_spent_then_lists() {
        let now = Instant::now();
        assert_eq!(OwnWrites::judge(None, now), OwnWrites::Seen);
        let second = Duration::from_secs(1);
        assert_eq!(
            OwnWrites::judge(Some(now - second), now),
            OwnWrites::Unseen {
                recheck_after: CACHE_WAIT - second
            }
        );
        assert_eq!(
            OwnWrites::judge(Some(now), now),
            OwnWrites::Unseen {
                recheck_after: CACHE_WAIT
            }
        );
        assert_eq!(
            OwnWrites::judge(Some(now - CACHE_WAIT), now),
            OwnWrites::Overdue
        );
        assert_eq!(
            OwnWrites::judge(Some(now - CACHE_WAIT - second), now),
            OwnWrites::Overdue
        );
    }
}
