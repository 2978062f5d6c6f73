//! Reading the member's group (its spec), its current rank table and its peers' own
//! conditions from the API server.
//!
//! The agent never reads the group's status. `status.members[].phase` and `status.epoch`
//! are what the operator derived from the agents' own Pod conditions and the rank table,
//! one reconcile later: deciding from them would be a loop through status — a stale view
//! of facts the agent can read first-hand, and a coupling that makes the operator's
//! status format part of the agent's behaviour. So the epoch comes from the rank-table
//! ConfigMap (named by the contract, `hcomm_crds::rank_table::config_map_name`), this member's membership from the
//! table and the Pods it lists, drain from its own Pod's annotation, and which peers are still on their
//! way from those peers' own Pod conditions ([`still_arriving`]).

use std::collections::BTreeSet;

use futures::{StreamExt as _, TryStreamExt as _};
use hcomm_crds::contract::{
    ANNOTATION_DRAIN_REQUESTED, LABEL_GROUP, POD_VERIFIED, POD_WEIGHTS_SYNCED,
};
use hcomm_crds::rank_table::KEY_MEMBERS;
use hcomm_crds::{CommSpec, HcommGroup, HcommNode, ScalingSpec, WeightsSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{GetParams, ListParams, VersionMatch};

use super::ranktable::{KEY_EPOCH, KEY_RANK_TABLE, RankTable};
use crate::error::{Error, Result};

/// What a member task needs of its group: its spec.
#[derive(Debug, Clone, Default)]
pub struct GroupView {
    pub uid: String,
    pub comm: CommSpec,
    pub weights: Option<WeightsSpec>,
    pub scaling: ScalingSpec,
    pub devices_per_member: u32,
}

/// The other members still on their way to the domain, from their own Pod conditions
/// (pure): neither refused by verification (`hcomm.io/verified=False`) nor done syncing
/// weights (`hcomm.io/weights-synced=True`), and not being deleted or drained. While any
/// is, a domain of the new epoch cannot form, and a member's join that timed out waiting
/// for them is not a failure.
pub fn still_arriving(peers: &[Pod], me: &str) -> Vec<String> {
    let status = |p: &Pod, t: &str| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == t))
            .map(|c| c.status.clone())
    };
    peers
        .iter()
        .filter(|p| {
            let leaving = p.metadata.deletion_timestamp.is_some()
                || p.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(ANNOTATION_DRAIN_REQUESTED));
            p.metadata.name.as_deref() != Some(me)
                && !leaving
                && status(p, POD_VERIFIED).as_deref() != Some("False")
                && status(p, POD_WEIGHTS_SYNCED).as_deref() != Some("True")
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// Fetches the group's spec.
pub async fn fetch_group(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    at: &ReadAt,
) -> Result<GroupView> {
    let api: Api<HcommGroup> = Api::namespaced(client.clone(), namespace);
    let g = get_at(&api, name, at)
        .await
        .map_err(Error::kube(format!("get HcommGroup {namespace}/{name}")))?;
    Ok(GroupView {
        uid: g.metadata.uid.clone().unwrap_or_default(),
        comm: g.spec.comm.clone(),
        weights: g.spec.weights.clone(),
        scaling: g.spec.scaling.clone(),
        devices_per_member: u32::try_from(g.spec.devices_per_member).unwrap_or(1),
    })
}

/// Lists the member Pods of group `name` (label `hcomm.io/group`).
pub async fn fetch_member_pods(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<Pod>> {
    fetch_member_pods_at(client, namespace, name, &ReadAt::Latest).await
}

/// Which state of the cluster a read may be answered from.
///
/// Why not always the latest: a read without a version is a consistent read, which the
/// API server answers only once it has etcd's newest revision; in the burst of writes
/// around a scale-out, a joiner's list of its group's Pods took 60 ms where the same list
/// took 3 ms seconds later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAt {
    /// The newest state (a consistent read).
    Latest,
    /// Any state at least as new as this `resourceVersion`, from the API server's watch
    /// cache once the cache holds it. Every object written before the object the
    /// version was read from is in it: Pods the operator created before it wrote a rank
    /// table are in a list no older than the table.
    NotOlderThan(String),
    /// Whatever the API server's watch cache holds (`resourceVersion=0`), which may trail
    /// the newest state by the cache's delay.
    Cache,
}

impl ReadAt {
    fn list_params(&self, lp: ListParams) -> ListParams {
        match self {
            ReadAt::Latest => lp,
            ReadAt::NotOlderThan(rv) => lp.at(rv).matching(VersionMatch::NotOlderThan),
            ReadAt::Cache => lp.match_any(),
        }
    }

    fn get_params(&self) -> Option<GetParams> {
        match self {
            ReadAt::Latest => None,
            ReadAt::NotOlderThan(rv) => Some(GetParams::at(rv)),
            ReadAt::Cache => Some(GetParams::any()),
        }
    }
}

/// The group's member Pods as of `at`. A read at a version that the API server refuses
/// (a cache that does not reach it in time) is asked again for the latest.
pub async fn fetch_member_pods_at(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    at: &ReadAt,
) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let what = || format!("list member Pods of {namespace}/{name}");
    if *at != ReadAt::Latest {
        match api.list(&member_pods_params(name, at)).await {
            Ok(list) => return Ok(list.items),
            Err(e) => tracing::debug!(error = %e, ?at, "{}: asking for the latest", what()),
        }
    }
    let list = api
        .list(&member_pods_params(name, &ReadAt::Latest))
        .await
        .map_err(Error::kube(what()))?;
    Ok(list.items)
}

/// The list of a group's member Pods as of `at` (pure).
pub fn member_pods_params(name: &str, at: &ReadAt) -> ListParams {
    at.list_params(ListParams::default().labels(&format!("{LABEL_GROUP}={name}")))
}

/// At most this many `HcommNode` reads in flight for one member. Read one after the
/// other, a group's nodes cost a joiner one API round trip each on its way to `Verifying`'s
/// verdict (nine with eight joiners and one member, each slower while they all start);
/// read all at once, one joiner of a large group would flood the API server.
const NODE_READS_IN_FLIGHT: usize = 8;

/// Each of `nodes`' `HcommNode` read as of `at`, `NODE_READS_IN_FLIGHT` at a time, as
/// `(node, read)` in `nodes`' order; `None` where none is published.
pub fn read_hcomm_nodes(
    client: &kube::Client,
    nodes: Vec<String>,
    at: ReadAt,
) -> impl futures::Stream<Item = (String, Result<Option<HcommNode>>)> + use<> {
    let api: Api<HcommNode> = Api::all(client.clone());
    futures::stream::iter(nodes)
        .map(move |node| {
            let api = api.clone();
            let at = at.clone();
            async move {
                let read = get_opt_at(&api, &node, &at)
                    .await
                    .map_err(Error::kube(format!("get HcommNode {node}")));
                (node, read)
            }
        })
        .buffered(NODE_READS_IN_FLIGHT)
}

/// The object `name` as of `at`, None when there is none.
pub async fn get_opt_at<K>(api: &Api<K>, name: &str, at: &ReadAt) -> kube::Result<Option<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match get_at(api, name, at).await {
        Ok(found) => Ok(Some(found)),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The object `name` as of `at`; a not-found is an error, as from a plain `get`, and a
/// read at a version that fails otherwise is asked again for the latest.
async fn get_at<K>(api: &Api<K>, name: &str, at: &ReadAt) -> kube::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if let Some(gp) = at.get_params() {
        match api.get_with(name, &gp).await {
            Ok(found) => return Ok(found),
            Err(kube::Error::Api(s)) if s.is_not_found() => return Err(kube::Error::Api(s)),
            Err(e) => tracing::debug!(error = %e, name, ?at, "asking for the latest instead"),
        }
    }
    api.get(name).await
}

/// Each of `nodes`' `HcommNode` as of `at`, None where none is published, in `nodes`'
/// order; the first failed read fails all.
pub async fn fetch_hcomm_nodes(
    client: &kube::Client,
    nodes: Vec<String>,
    at: ReadAt,
) -> Result<Vec<(String, Option<HcommNode>)>> {
    read_hcomm_nodes(client, nodes, at)
        .map(|(node, read)| read.map(|found| (node, found)))
        .try_collect()
        .await
}

/// A rank table as the operator published it: the HCCL table, the epoch it was written
/// for, and the member Pods it was written for.
#[derive(Debug, Clone)]
pub struct PublishedTable {
    pub table: RankTable,
    pub epoch: u64,
    /// The member Pods of the epoch (the ConfigMap's `members`); None when the ConfigMap
    /// has no such key. The table itself names nodes and devices, not Pods: a task whose
    /// Pod was deleted while its node was cut off finds its node and devices in the next
    /// epoch's table (a replacement got the same NPUs) and must not take that member's
    /// ranks.
    pub members: Option<BTreeSet<String>>,
    /// The ConfigMap's `resourceVersion` as read (None for a table not read from the API
    /// server): reads that must see every member the table names are made no older.
    pub revision: Option<String>,
}

/// Fetches and parses the rank table ConfigMap.
pub async fn fetch_rank_table(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    at: &ReadAt,
) -> Result<PublishedTable> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = get_at(&api, name, at)
        .await
        .map_err(Error::kube(format!("get ConfigMap {namespace}/{name}")))?;
    let mut published = parse_config_map(&cm).map_err(|reason| Error::RankTable {
        name: name.into(),
        reason,
    })?;
    published.revision = cm.metadata.resource_version;
    Ok(published)
}

/// The rank table, its epoch and its members in a ConfigMap (pure).
pub fn parse_config_map(cm: &ConfigMap) -> std::result::Result<PublishedTable, String> {
    let data = cm.data.clone().unwrap_or_default();
    let json = data
        .get(KEY_RANK_TABLE)
        .ok_or_else(|| format!("no key {KEY_RANK_TABLE}"))?;
    let table = super::ranktable::parse(json)?;
    let epoch = data
        .get(KEY_EPOCH)
        .map(|e| {
            e.trim()
                .parse::<u64>()
                .map_err(|_| format!("epoch {e:?} is not a number"))
        })
        .transpose()?
        .unwrap_or(0);
    let members = data.get(KEY_MEMBERS).map(|m| {
        m.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    });
    Ok(PublishedTable {
        table,
        epoch,
        members,
        revision: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_list_no_older_than_a_table_names_its_version_the_latest_none() {
        let at = member_pods_params("g", &ReadAt::NotOlderThan("4711".into()));
        assert_eq!(at.resource_version.as_deref(), Some("4711"));
        assert_eq!(at.version_match, Some(VersionMatch::NotOlderThan));
        assert_eq!(at.label_selector, Some(format!("{LABEL_GROUP}=g")));
        let latest = member_pods_params("g", &ReadAt::Latest);
        assert_eq!(
            (latest.resource_version, latest.version_match),
            (None, None)
        );
        let cached = member_pods_params("g", &ReadAt::Cache);
        assert_eq!(cached.resource_version.as_deref(), Some("0"));
        assert!(ReadAt::Latest.get_params().is_none());
        let gp = ReadAt::Cache.get_params().and_then(|g| g.resource_version);
        assert_eq!(gp.as_deref(), Some("0"));
    }

    fn pod(name: &str, verified: Option<&str>, synced: Option<&str>) -> Pod {
        let mut conds = Vec::new();
        for (t, s) in [(POD_VERIFIED, verified), (POD_WEIGHTS_SYNCED, synced)] {
            if let Some(s) = s {
                conds.push(serde_json::json!({"type": t, "status": s}));
            }
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"conditions": conds}
        }))
        .unwrap()
    }

    #[test]
    fn peers_not_yet_verified_or_still_syncing_are_arriving_but_not_this_one() {
        let mut draining = pod("g", None, None);
        draining.metadata.annotations =
            Some([(ANNOTATION_DRAIN_REQUESTED.to_owned(), "t".to_owned())].into());
        let peers = vec![
            pod("me", Some("True"), None),
            pod("a", None, None),
            pod("b", Some("True"), None),
            pod("c", Some("True"), Some("False")),
            pod("d", Some("True"), Some("True")),
            pod("f", Some("False"), None),
            draining,
        ];
        assert_eq!(still_arriving(&peers, "me"), ["a", "b", "c"]);
        assert!(still_arriving(&[], "me").is_empty());
    }

    #[test]
    fn the_config_map_gives_table_and_epoch() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-rank-table"},
            "data": {
                (KEY_RANK_TABLE): r#"{"version":"1.0","server_count":"1","status":"completed","server_list":[{"server_id":"h","host_ip":"1.2.3.4","device":[{"device_id":"0","rank_id":"0"}]}]}"#,
                "epoch": "5",
                "members": "g-0-e1\ng-1-e5\n"
            }
        })).unwrap();
        let p = parse_config_map(&cm).unwrap();
        assert_eq!((p.table.world(), p.epoch), (1, 5));
        assert_eq!(
            p.members,
            Some(["g-0-e1".to_owned(), "g-1-e5".to_owned()].into())
        );
        let mut unlisted = cm.clone();
        unlisted.data.as_mut().unwrap().remove("members");
        let p = parse_config_map(&unlisted).unwrap();
        assert!(p.members.is_none());
        let empty = ConfigMap::default();
        assert!(
            parse_config_map(&empty)
                .unwrap_err()
                .contains(hcomm_crds::rank_table::KEY_RANK_TABLE)
        );
    }
}
