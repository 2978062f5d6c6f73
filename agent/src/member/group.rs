//! Reading the member's group and its current rank table from the API server.

use hcomm_crds::{CommSpec, HcommGroup, MemberPhase, ScalingSpec, WeightsSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::ranktable::{KEY_EPOCH, KEY_RANK_TABLE, RankTable};
use crate::error::{Error, Result};

/// What a member task needs of its group.
#[derive(Debug, Clone, Default)]
pub struct GroupView {
    pub uid: String,
    pub comm: CommSpec,
    pub weights: Option<WeightsSpec>,
    pub scaling: ScalingSpec,
    pub epoch: u64,
    pub rank_table: Option<String>,
    pub devices_per_member: u32,
    /// Every member in the group's status with its phase.
    pub members: Vec<(String, MemberPhase)>,
}

/// The other members still on their way to the domain — not yet verified or still
/// syncing weights (pure). While any is, a domain of the new epoch cannot form, and a
/// member's join that timed out waiting for them is not a failure.
pub fn still_arriving(view: &GroupView, me: &str) -> Vec<String> {
    view.members
        .iter()
        .filter(|(name, phase)| {
            name != me
                && matches!(
                    phase,
                    MemberPhase::Pending | MemberPhase::Verifying | MemberPhase::Syncing
                )
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Fetches the group.
pub async fn fetch_group(client: &kube::Client, namespace: &str, name: &str) -> Result<GroupView> {
    let api: Api<HcommGroup> = Api::namespaced(client.clone(), namespace);
    let g = api
        .get(name)
        .await
        .map_err(Error::kube(format!("get HcommGroup {namespace}/{name}")))?;
    let status = g.status.clone().unwrap_or_default();
    Ok(GroupView {
        uid: g.metadata.uid.clone().unwrap_or_default(),
        comm: g.spec.comm.clone(),
        weights: g.spec.weights.clone(),
        scaling: g.spec.scaling.clone(),
        epoch: u64::try_from(status.epoch).unwrap_or(0),
        rank_table: status.rank_table,
        devices_per_member: u32::try_from(g.spec.devices_per_member).unwrap_or(1),
        members: status
            .members
            .iter()
            .map(|m| (m.name.clone(), m.phase))
            .collect(),
    })
}

/// Fetches and parses the rank table ConfigMap; returns the table and its epoch.
pub async fn fetch_rank_table(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(RankTable, u64)> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get(name)
        .await
        .map_err(Error::kube(format!("get ConfigMap {namespace}/{name}")))?;
    parse_config_map(&cm).map_err(|reason| Error::RankTable {
        name: name.into(),
        reason,
    })
}

/// The rank table and epoch in a ConfigMap (pure).
pub fn parse_config_map(cm: &ConfigMap) -> std::result::Result<(RankTable, u64), String> {
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
    Ok((table, epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_before_joining_are_still_arriving_but_not_this_one() {
        let view = GroupView {
            members: vec![
                ("me".into(), MemberPhase::Syncing),
                ("a".into(), MemberPhase::Pending),
                ("b".into(), MemberPhase::Verifying),
                ("c".into(), MemberPhase::Syncing),
                ("d".into(), MemberPhase::Joining),
                ("e".into(), MemberPhase::Ready),
                ("f".into(), MemberPhase::Failed),
                ("g".into(), MemberPhase::Draining),
            ],
            ..GroupView::default()
        };
        assert_eq!(still_arriving(&view, "me"), ["a", "b", "c"]);
        assert!(still_arriving(&GroupView::default(), "me").is_empty());
    }

    #[test]
    fn the_config_map_gives_table_and_epoch() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-rank-table"},
            "data": {
                (KEY_RANK_TABLE): r#"{"version":"1.0","server_count":"1","status":"completed","server_list":[{"server_id":"h","host_ip":"1.2.3.4","device":[{"device_id":"0","rank_id":"0"}]}]}"#,
                "epoch": "5"
            }
        })).unwrap();
        let (t, e) = parse_config_map(&cm).unwrap();
        assert_eq!((t.world(), e), (1, 5));
        let empty = ConfigMap::default();
        assert!(
            parse_config_map(&empty)
                .unwrap_err()
                .contains(hcomm_crds::rank_table::KEY_RANK_TABLE)
        );
    }
}
