//! Rolling a change of the member template through decode under load, stopping a bad
//! revision, and rolling it back (issue 19, point 1).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::conditions::find_condition;
use hcomm_crds::contract::{CONDITION_PROGRESSING, GroupReason, LABEL_GROUP};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, MemberPod, Testbed};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::check;

/// The progress deadline this scenario sets: a bad revision is stopped this soon.
const PROGRESS_DEADLINE_SECONDS: i32 = 15;
/// An image no registry serves (the testbed kubelet cannot pull `.invalid` hosts).
const BAD_IMAGE: &str = "example.invalid/hcomm-worker:broken";

/// A template change (one env var) makes a new revision; decode's members are replaced
/// one at a time, each new one serving before an old one drains (never fewer than 2
/// serving), with no failed request, and the status counts and revision history follow.
/// Then a template whose image cannot be pulled: its member never turns Ready, the
/// rollout stops with `Progressing=False` (`ProgressDeadlineExceeded`) and the serving
/// members stay; applying the previous template again rolls back to its revision (the
/// same ControllerRevision) and the stuck member goes.
///
/// Precondition: decode Ready (resized here to 2 members).
pub async fn a_template_change_rolls_member_by_member_and_a_bad_revision_is_stopped_and_rolled_back(
    pools: &mut ExamplePools,
) -> Result<()> {
    let before = pools.decode_at(2).await?;
    let bed = &pools.bed;
    let groups: Api<HcommGroup> = Api::namespaced(bed.client().await?, NS);
    let r1 = settled_revision(&groups).await?;
    bed.kubectl(&[
        "patch",
        "hcg/decode",
        "--type=merge",
        "-p",
        &json!({"spec": {"updateStrategy": {"progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS}}})
            .to_string(),
    ])?;
    ensure!(
        settled_revision(&groups).await? == r1,
        "the update strategy is not part of a revision"
    );

    // 1. A new env var: a new revision, rolled member by member.
    let t = Instant::now();
    bed.kubectl(&[
        "patch",
        "hcg/decode",
        "--type=json",
        "-p",
        &json!([{"op": "add", "path": "/spec/template/spec/containers/0/env/-",
                 "value": {"name": "HCOMM_EXAMPLE_ROLLOUT", "value": "2"}}])
        .to_string(),
    ])?;
    let rolled = wait_rolled(bed, &groups, &before, &r1).await?;
    let r2 = settled_revision(&groups).await?;
    ensure!(r2 != r1, "the template change made no new revision ({r1})");
    let s = pools
        .decode_load
        .wait_served(&rolled, 3, Duration::from_secs(30))
        .await?;
    check::clean(&s, "decode during the template rollout")?;
    let history = revisions(bed).await?;
    ensure!(
        history.iter().any(|(r, _)| r == &r1) && history.iter().any(|(r, _)| r == &r2),
        "ControllerRevisions of {r1} and {r2} expected, found {history:?}"
    );
    eprintln!("template roll: 2 members to {r2} in {:?}", t.elapsed());

    // 2. A bad image: the rollout stops and the members of r2 keep serving.
    let image = pools_image(&groups).await?;
    set_image(bed, BAD_IMAGE)?;
    let t = Instant::now();
    let stopped = loop {
        let group = groups.get("decode").await?;
        let status = group.status.clone().unwrap_or_default();
        let members = bed.members(NS, "decode").await?;
        let serving: Vec<&MemberPod> = members.iter().filter(|m| m.ready).collect();
        ensure!(
            rolled
                .iter()
                .all(|r| serving.iter().any(|m| m.uid == r.uid)),
            "a member of {r2} stopped serving during the bad rollout: {members:?}"
        );
        if let Some(c) = find_condition(&status.conditions, CONDITION_PROGRESSING)
            && c.status == "False"
            && c.reason == GroupReason::ProgressDeadlineExceeded.as_str()
        {
            break c.message.clone();
        }
        ensure!(
            t.elapsed() < Duration::from_secs(PROGRESS_DEADLINE_SECONDS as u64) + POOL_WAIT,
            "no ProgressDeadlineExceeded: {:?}",
            status.conditions
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let bad = settled_revision_of(&groups.get("decode").await?);
    ensure!(bad != r2, "the bad template made no new revision");
    eprintln!(
        "template roll: bad revision {bad} stopped after {:?}: {stopped}",
        t.elapsed()
    );

    // 3. Roll back: the previous template again, its revision and ControllerRevision.
    let t = Instant::now();
    set_image(bed, &image)?;
    let back = loop {
        let group = groups.get("decode").await?;
        let status = group.status.clone().unwrap_or_default();
        let members = bed.members(NS, "decode").await?;
        if status.update_revision.as_deref() == Some(r2.as_str())
            && status.current_revision.as_deref() == Some(r2.as_str())
            && status.updated_replicas == 2
            && members.len() == 2
            && members.iter().all(|m| m.ready)
        {
            break members;
        }
        ensure!(
            t.elapsed() < POOL_WAIT,
            "not rolled back to {r2}: status {:?}/{:?} updated {}, members {members:?}",
            status.current_revision,
            status.update_revision,
            status.updated_replicas
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    ensure!(
        back.iter().all(|m| rolled.iter().any(|r| r.uid == m.uid)),
        "the rollback replaced members of {r2}: {back:?} (were {rolled:?})"
    );
    let history = revisions(bed).await?;
    let newest = history
        .iter()
        .max_by_key(|(_, n)| *n)
        .map(|(r, _)| r.clone());
    ensure!(
        newest.as_deref() == Some(r2.as_str())
            && history.iter().filter(|(r, _)| r == &r2).count() == 1,
        "the rollback should reuse {r2}'s ControllerRevision as the newest: {history:?}"
    );
    let s = pools
        .decode_load
        .wait_served(&back, 3, Duration::from_secs(30))
        .await?;
    check::clean(&s, "decode through the bad revision and the rollback")?;
    eprintln!("template roll: rolled back to {r2} in {:?}", t.elapsed());
    Ok(())
}

/// Waits until decode's 2 members are all new (none of `before`), Ready, and the status
/// counts them on the update revision; meanwhile at least 2 members serve at every look
/// (maxSurge 1, maxUnavailable 0).
async fn wait_rolled(
    bed: &Testbed,
    groups: &Api<HcommGroup>,
    before: &[MemberPod],
    old: &str,
) -> Result<Vec<MemberPod>> {
    let deadline = Instant::now() + POOL_WAIT * 2;
    let mut most = 0;
    loop {
        let members = bed.members(NS, "decode").await?;
        let serving = members.iter().filter(|m| m.ready).count();
        ensure!(
            serving >= 2,
            "fewer than 2 members serving during the rollout: {members:?}"
        );
        most = most.max(members.len());
        let status = groups.get("decode").await?.status.unwrap_or_default();
        let fresh = members
            .iter()
            .all(|m| !before.iter().any(|b| b.uid == m.uid));
        if fresh
            && members.len() == 2
            && serving == 2
            && status.updated_replicas == 2
            && status.ready_replicas == 2
            && status.current_revision == status.update_revision
            && status.update_revision.as_deref() != Some(old)
        {
            ensure!(most <= 4, "up to {most} member Pods at once");
            return Ok(members);
        }
        if Instant::now() > deadline {
            bail!("not rolled: {members:?}, status {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The update revision once the status has one and every member runs it.
async fn settled_revision(groups: &Api<HcommGroup>) -> Result<String> {
    let deadline = Instant::now() + POOL_WAIT;
    loop {
        let group = groups.get("decode").await?;
        let status = group.status.clone().unwrap_or_default();
        if let Some(update) = status.update_revision.clone()
            && status.current_revision.as_deref() == Some(update.as_str())
        {
            return Ok(update);
        }
        ensure!(Instant::now() < deadline, "no settled revision: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn settled_revision_of(group: &HcommGroup) -> String {
    group
        .status
        .as_ref()
        .and_then(|s| s.update_revision.clone())
        .unwrap_or_default()
}

/// The worker container's image in decode's template.
async fn pools_image(groups: &Api<HcommGroup>) -> Result<String> {
    let group = groups.get("decode").await?;
    group
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .context("decode's template has no image")
}

fn set_image(bed: &Testbed, image: &str) -> Result<String> {
    Ok(bed.kubectl(&[
        "patch",
        "hcg/decode",
        "--type=json",
        "-p",
        &json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}])
            .to_string(),
    ])?)
}

/// decode's ControllerRevisions as (revision, number).
async fn revisions(bed: &Testbed) -> Result<Vec<(String, i64)>> {
    let api: Api<ControllerRevision> = Api::namespaced(bed.client().await?, NS);
    let list = api
        .list(&ListParams::default().labels(&format!("{LABEL_GROUP}=decode")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|r| {
            let revision = r
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(hcomm_crds::contract::LABEL_REVISION).cloned())
                .unwrap_or_default();
            (revision, r.revision)
        })
        .collect())
}
