//! What the cluster says about the member `diagnose` looks at (`--pod`, `--namespace`, or
//! `--group`): the Pod's hcomm conditions and epoch label, the group's status epoch, and
//! the rank-table ConfigMap (its epoch, and the table itself when no `--rank-table` file is
//! given, so rank 0 and the peers get probed). Reading is I/O with a deadline on every
//! call — an API server that does not answer is a row saying so, never a hang; turning
//! the objects into facts is pure ([`snapshot`], [`fill`]).

use std::time::Duration;

use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{
    LABEL_EPOCH, LABEL_GROUP, POD_JOINED, POD_MEMBER_READY, POD_VERIFIED, POD_WEIGHTS_SYNCED,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;

use super::facts::{ClusterRead, Facts, MemberConditions, PodCondition};

/// The Pod conditions `diagnose` reports, in lifecycle order.
pub const MEMBER_CONDITIONS: [&str; 4] = [
    POD_VERIFIED,
    POD_WEIGHTS_SYNCED,
    POD_JOINED,
    POD_MEMBER_READY,
];

/// Which member or group to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// The member Pod (its group comes from its `hcomm.io/group` label).
    pub pod: Option<String>,
    /// The group, when no Pod is named (or to override the label).
    pub group: Option<String>,
    /// The namespace of both.
    pub namespace: String,
    /// The deadline of each API call (and of building the client).
    pub timeout: Duration,
}

impl Target {
    /// Whether anything was asked of the cluster.
    pub fn asked(&self) -> bool {
        self.pod.is_some() || self.group.is_some()
    }
}

/// The objects read (each absent when it does not exist).
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub pod: Option<Pod>,
    pub group: Option<HcommGroup>,
    pub rank_table: Option<ConfigMap>,
}

/// One API call with a deadline; the error names the call.
async fn call<T>(
    deadline: Duration,
    what: String,
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {deadline:?}")),
    }
}

/// Reads the member's Pod, its group and the rank-table ConfigMap. `Err` says why the API
/// server could not be used (no kubeconfig, unreachable, refused, deadline passed).
pub async fn read(target: &Target) -> Result<Objects, String> {
    let deadline = target.timeout;
    let client = call(
        deadline,
        "build a client from KUBECONFIG or the in-cluster config".into(),
        kube::Client::try_default(),
    )
    .await?;
    let ns = &target.namespace;
    let mut objects = Objects::default();
    if let Some(pod) = &target.pod {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        objects.pod = call(deadline, format!("get Pod {ns}/{pod}"), pods.get_opt(pod)).await?;
    }
    let group = target.group.clone().or_else(|| {
        objects
            .pod
            .as_ref()
            .and_then(|p| p.metadata.labels.as_ref()?.get(LABEL_GROUP).cloned())
    });
    if let Some(group) = group {
        let groups: Api<HcommGroup> = Api::namespaced(client.clone(), ns);
        let what = format!("get HcommGroup {ns}/{group}");
        objects.group = call(deadline, what, groups.get_opt(&group)).await?;
        let name = objects
            .group
            .as_ref()
            .and_then(|g| g.status.as_ref()?.rank_table.clone())
            .unwrap_or_else(|| format!("{group}-rank-table"));
        let maps: Api<ConfigMap> = Api::namespaced(client, ns);
        let what = format!("get ConfigMap {ns}/{name}");
        objects.rank_table = call(deadline, what, maps.get_opt(&name)).await?;
    }
    Ok(objects)
}

/// The facts in the objects (pure).
pub fn snapshot(target: &Target, objects: &Objects) -> MemberConditions {
    let ns = &target.namespace;
    let pod = objects.pod.as_ref();
    let conditions = pod
        .and_then(|p| p.status.as_ref()?.conditions.as_ref())
        .map(|list| {
            MEMBER_CONDITIONS
                .iter()
                .filter_map(|t| list.iter().find(|c| c.type_ == *t))
                .map(|c| PodCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    let data = objects.rank_table.as_ref().and_then(|c| c.data.as_ref());
    MemberConditions {
        pod: target.pod.as_ref().map(|p| format!("{ns}/{p}")),
        pod_found: pod.is_some(),
        conditions,
        pod_epoch: pod.and_then(|p| p.metadata.labels.as_ref()?.get(LABEL_EPOCH)?.parse().ok()),
        group: objects.group.as_ref().and_then(|g| g.metadata.name.clone()),
        group_epoch: objects
            .group
            .as_ref()
            .and_then(|g| u64::try_from(g.status.as_ref()?.epoch).ok()),
        rank_table_epoch: data.and_then(|d| d.get("epoch")?.trim().parse().ok()),
        rank_table_json: data.and_then(|d| d.get(hcomm_crds::rank_table::KEY_RANK_TABLE).cloned()),
    }
}

/// Fills what the command line left open from the cluster's answer (pure): flags win, so a
/// person can still ask "what if".
pub fn fill(f: &mut Facts, read: ClusterRead) {
    if let ClusterRead::Read(m) = &read {
        f.pod_epoch = f.pod_epoch.or(m.pod_epoch);
        f.group_epoch = f.group_epoch.or(m.group_epoch);
        f.rank_table_epoch = f.rank_table_epoch.or(m.rank_table_epoch);
        if f.weights_synced.is_none() && m.pod_found {
            f.weights_synced = Some(
                m.conditions
                    .iter()
                    .any(|c| c.type_ == POD_WEIGHTS_SYNCED && c.status == "True"),
            );
        }
    }
    f.cluster = read;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects() -> Objects {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "decode-1-e2", "namespace": "ai",
                         "labels": {(hcomm_crds::contract::LABEL_GROUP): "decode", (hcomm_crds::contract::LABEL_EPOCH): "2"}},
            "status": {"conditions": [
                {"type": "Ready", "status": "False"},
                {"type": hcomm_crds::contract::POD_JOINED, "status": "False", "reason": hcomm_crds::contract::PodReason::JoinFailed.as_str(),
                 "message": "rank 0 198.18.0.10:30000 refused"},
                {"type": hcomm_crds::contract::POD_VERIFIED, "status": "True", "reason": hcomm_crds::contract::PodReason::Verified.as_str()},
                {"type": hcomm_crds::contract::POD_WEIGHTS_SYNCED, "status": "True", "reason": "Synced"}
            ]}
        }))
        .unwrap();
        let group: HcommGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
            "metadata": {"name": "decode", "namespace": "ai"},
            "spec": {"replicas": 2, "role": "decode", "devicesPerMember": 1,
                     "template": {"spec": {"containers": [{"name": "w", "image": "w"}]}}},
            "status": {"epoch": 3}
        }))
        .unwrap();
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "decode-rank-table"},
            "data": {"epoch": "2\n", (hcomm_crds::rank_table::KEY_RANK_TABLE): "{}"}
        }))
        .unwrap();
        Objects {
            pod: Some(pod),
            group: Some(group),
            rank_table: Some(cm),
        }
    }

    fn target() -> Target {
        Target {
            pod: Some("decode-1-e2".into()),
            group: None,
            namespace: "ai".into(),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_objects_become_conditions_in_lifecycle_order_and_three_epochs() {
        let m = snapshot(&target(), &objects());
        let types: Vec<&str> = m.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [POD_VERIFIED, POD_WEIGHTS_SYNCED, POD_JOINED],
            "member-ready not set yet"
        );
        assert_eq!(m.pod.as_deref(), Some("ai/decode-1-e2"));
        assert_eq!(
            (m.pod_epoch, m.group_epoch, m.rank_table_epoch),
            (Some(2), Some(3), Some(2))
        );
        assert_eq!(m.group.as_deref(), Some("decode"));
        assert_eq!(m.rank_table_json.as_deref(), Some("{}"));
    }

    #[test]
    fn flags_win_and_the_cluster_fills_the_rest() {
        let mut f = Facts {
            group_epoch: Some(7),
            ..Facts::default()
        };
        fill(&mut f, ClusterRead::Read(snapshot(&target(), &objects())));
        assert_eq!(f.group_epoch, Some(7));
        assert_eq!((f.pod_epoch, f.rank_table_epoch), (Some(2), Some(2)));
        assert_eq!(f.weights_synced, Some(true));
    }

    #[test]
    fn a_missing_pod_leaves_weights_unknown() {
        let mut o = objects();
        o.pod = None;
        let mut f = Facts::default();
        fill(&mut f, ClusterRead::Read(snapshot(&target(), &o)));
        assert_eq!(f.weights_synced, None);
        assert_eq!(f.group_epoch, Some(3));
    }
}
