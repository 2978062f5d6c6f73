//! Issue 19, point 1, the rest of it: `partition` holds a canary (members below it keep
//! their revision while the one above serves the new one), releasing it finishes the
//! rollout, and a weights version whose digest the source does not have stops the rollout
//! with `Progressing=False` while the old members serve, until applying the old weights
//! rolls it back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::conditions::find_condition;
use hcomm_crds::contract::{CONDITION_PROGRESSING, GroupReason};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, MemberPod, Testbed};
use kube::Api;
use serde_json::json;

use crate::check;

/// The progress deadline this scenario sets: a bad revision is stopped this soon.
const PROGRESS_DEADLINE_SECONDS: i32 = 15;

/// decode's member Pods not being deleted, by member index.
async fn members_by_index(bed: &Testbed) -> Result<BTreeMap<i32, MemberPod>> {
    bed.members(NS, "decode")
        .await?
        .into_iter()
        .map(|m| Ok((m.index.context("member index label")?, m)))
        .collect()
}

fn patch(bed: &Testbed, kind: &str, body: serde_json::Value) -> Result<()> {
    bed.kubectl(&[
        "patch",
        "hcg/decode",
        &format!("--type={kind}"),
        "-p",
        &body.to_string(),
    ])?;
    Ok(())
}

/// The group's `Progressing` condition as (status, reason, message).
async fn progressing(groups: &Api<HcommGroup>) -> Result<Option<(String, String, String)>> {
    let status = groups.get("decode").await?.status.unwrap_or_default();
    Ok(find_condition(&status.conditions, CONDITION_PROGRESSING)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())))
}

/// Waits until `done` holds of decode's members and `Progressing`, checking at every look
/// that `serving` members (by UID) still serve.
async fn wait_for(
    bed: &Testbed,
    groups: &Api<HcommGroup>,
    what: &str,
    serving: &[String],
    done: impl Fn(&BTreeMap<i32, MemberPod>, Option<&(String, String, String)>) -> bool,
) -> Result<BTreeMap<i32, MemberPod>> {
    let deadline =
        Instant::now() + POOL_WAIT + Duration::from_secs(PROGRESS_DEADLINE_SECONDS as u64);
    loop {
        let members = members_by_index(bed).await?;
        for uid in serving {
            ensure!(
                members.values().any(|m| &m.uid == uid && m.ready),
                "{what}: member {uid} stopped serving: {members:?}"
            );
        }
        let cond = progressing(groups).await?;
        if done(&members, cond.as_ref()) {
            return Ok(members);
        }
        ensure!(
            Instant::now() < deadline,
            "{what}: not reached; members {members:?}, Progressing {cond:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// With `partition` at the higher of decode's two indices, a template change rolls only
/// that member (its replacement joins at a new index first); the lower one keeps its Pod
/// and revision and serves (`Progressing=False`, `PartitionPaused`); `partition: 0` rolls
/// it too. Then a weights version whose digest the source does not have: its member never
/// serves, the rollout stops (`Progressing=False`) and the members of the good revision
/// keep serving; the old weights applied again roll it back. No failed request.
///
/// Precondition: decode at 2 members, Ready. Leaves decode at 2 on a new template
/// revision (one extra env var), partition 0.
pub async fn a_partition_holds_a_canary_and_a_weights_digest_no_source_has_stops_the_rollout(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(2).await?;
    let bed = &pools.bed;
    let groups: Api<HcommGroup> = Api::namespaced(bed.client().await?, NS);
    let before = wait_for(bed, &groups, "decode settled", &[], |m, _| {
        m.len() == 2 && m.values().all(|x| x.ready)
    })
    .await?;
    // Earlier scenarios leave any two indices: the partition sits at the higher one, so
    // the lower member keeps its revision and the higher one is the canary.
    let (&low, &high) = (
        before.keys().next().context("a member")?,
        before.keys().last().context("a member")?,
    );
    patch(
        bed,
        "merge",
        json!({"spec": {"updateStrategy": {
            "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
            "rollingUpdate": {"partition": high}}}}),
    )?;
    let old = before[&low].revision.clone();

    // 1. The canary: only member 1 (at or above the partition) is replaced.
    patch(
        bed,
        "json",
        json!([{"op": "add", "path": "/spec/template/spec/containers/0/env/-",
                "value": {"name": "HCOMM_EXAMPLE_CANARY", "value": "1"}}]),
    )?;
    let keep = [before[&low].uid.clone()];
    // The member above the partition is replaced make-before-break (a surge member at a
    // new index); the one below keeps its Pod and revision.
    let canary = wait_for(bed, &groups, "canary", &keep, |m, c| {
        m.len() == 2
            && m.values().any(|x| x.uid == keep[0] && x.revision == old)
            && m.values().any(|x| x.ready && x.revision != old)
            && c.is_some_and(|(s, r, _)| s == "False" && r == GroupReason::PartitionPaused.as_str())
    })
    .await?;
    let new = canary
        .values()
        .find(|x| x.revision != old)
        .map(|x| x.revision.clone())
        .context("the canary's revision")?;
    eprintln!("canary: one member on {new}, member 0 kept on {old}");

    // 2. Release the partition: member 0 rolls too.
    patch(
        bed,
        "merge",
        json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
    )?;
    let released = wait_for(bed, &groups, "partition released", &[], |m, _| {
        m.len() == 2 && m.values().all(|x| x.ready && x.revision == new)
    })
    .await?;
    ensure!(
        released.values().all(|x| x.uid != keep[0]),
        "member 0 was replaced by a member of {new}: {released:?}"
    );
    let serving: Vec<String> = released.values().map(|m| m.uid.clone()).collect();

    // 3. Weights whose digest no source has: the rollout stops, the good members serve.
    let weights = groups
        .get("decode")
        .await?
        .spec
        .weights
        .clone()
        .context("decode has weights")?;
    let bad_digest = format!("sha256:{}", "0".repeat(64));
    patch(
        bed,
        "merge",
        json!({"spec": {"weights": {"version": "no-such-version", "digest": bad_digest}}}),
    )?;
    let stopped = wait_for(bed, &groups, "bad weights stopped", &serving, |_, c| {
        c.is_some_and(|(s, r, _)| {
            s == "False"
                && (r == GroupReason::ProgressDeadlineExceeded.as_str()
                    || r == GroupReason::RevisionFailed.as_str())
        })
    })
    .await?;
    eprintln!("bad weights: stopped, members {stopped:?}");

    // 4. Roll back: the old weights again; the members of the good revision stay.
    patch(
        bed,
        "merge",
        json!({"spec": {"weights": {"version": weights.version, "digest": weights.digest}}}),
    )?;
    let back = wait_for(bed, &groups, "rolled back", &serving, |m, _| {
        m.len() == 2 && m.values().all(|x| x.ready && x.revision == new)
    })
    .await?;
    ensure!(
        back.values().all(|m| serving.contains(&m.uid)),
        "the rollback replaced good members: {back:?} (were {serving:?})"
    );
    check::clean(
        &pools.decode_load.latest(),
        "decode through the canary, the bad weights and the rollback",
    )
}
