//! Scaling the decode pool with `kubectl scale` under load: the pools come up, grow
//! without touching existing members or sending traffic to a joiner too early, and
//! shrink by draining each victim to zero requests in flight before it goes.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hcomm_crds::HcommGroup;
use hcomm_e2e::testbed::examples::NAMESPACE as NS;
use hcomm_e2e::testbed::{ExamplePools, MemberPod};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

use crate::check;

/// Both example pools come up at 2 members, every member Ready, with the rank table
/// and the topology in their status.
///
/// Precondition: decode at 2 members, Ready.
pub async fn both_example_pools_come_up_with_rank_tables_and_topology(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(2).await?;
    let groups: Api<HcommGroup> = Api::namespaced(pools.bed.client().await?, NS);
    for name in ["prefill", "decode"] {
        let status = groups.get(name).await?.status.context("status")?;
        ensure!(
            status.rank_table.is_some(),
            "{name}: no rank table in status"
        );
        ensure!(!status.topology.is_empty(), "{name}: no topology in status");
        ensure!(
            status.members.len() == 2,
            "{name}: members {:?}",
            status.members
        );
    }
    check::clean(&pools.decode_load.latest(), "decode once up")?;
    check::clean(&pools.prefill_load.latest(), "prefill once up")
}

/// decode 2 → 4 with `kubectl scale`: no failed request, no wrong or missing digest, no
/// request at a joiner before its readiness gate, existing members' Pods and ranks
/// untouched.
///
/// Precondition: decode at 2 members, Ready, each having served.
pub async fn scale_out_under_load_fails_no_request(pools: &mut ExamplePools) -> Result<()> {
    let decode = pools.decode_at(2).await?;
    pools
        .decode_load
        .wait_served(&decode, 5, Duration::from_secs(30))
        .await?;
    let (bed, timeline, decode_load) = (&pools.bed, &pools.timeline, &pools.decode_load);

    bed.scale("decode", 4)?;
    let grown = bed
        .wait_pool_ready(NS, "decode", 4, hcomm_e2e::testbed::examples::POOL_WAIT)
        .await?;
    let kept: Vec<&MemberPod> = grown
        .iter()
        .filter(|m| decode.iter().any(|d| d.uid == m.uid))
        .collect();
    ensure!(
        kept.len() == 2
            && kept
                .iter()
                .all(|k| decode.iter().any(|d| d.uid == k.uid && d.rank == k.rank)),
        "existing members' Pods and ranks must be untouched: before {decode:?}, after {grown:?}"
    );
    let joiners: Vec<&MemberPod> = grown
        .iter()
        .filter(|m| !decode.iter().any(|d| d.uid == m.uid))
        .collect();
    let stats = decode_load
        .wait_served(&grown, 3, Duration::from_secs(30))
        .await?;
    for j in &joiners {
        let marks = timeline.member(&j.name).context("joiner in timeline")?;
        let ready = marks.ready.context("joiner ready mark")?;
        let first = stats.by_pod[&j.name]
            .first_ok_unix_ms
            .context("joiner served")?;
        let first_offset = first.saturating_sub(timeline.origin_unix_ms());
        ensure!(
            Duration::from_millis(first_offset) + Duration::from_millis(50) >= ready,
            "{}: first answer at {first_offset} ms, before its gate turned True at {ready:?}",
            j.name
        );
    }
    check::clean(&stats, "decode after scale-out")
}

/// decode 4 → 2: no failed request, each victim drained to zero in flight (`Drained`, not
/// `DrainTimedOut`) before it was deleted, the drain visible in Events.
///
/// Precondition: decode at 4 members, Ready.
pub async fn drain_under_load(pools: &mut ExamplePools) -> Result<()> {
    let grown = pools.decode_at(4).await?;
    let shrunk = pools.decode_at(2).await?;
    let timeline = &pools.timeline;
    let victims: Vec<&MemberPod> = grown
        .iter()
        .filter(|m| !shrunk.iter().any(|s| s.uid == m.uid))
        .collect();
    ensure!(victims.len() == 2, "two victims: {victims:?}");
    for v in &victims {
        let m = timeline.member(&v.name).context("victim marks")?;
        ensure!(
            m.drain_requested.is_some() && m.drained.is_some() && m.deleted.is_some(),
            "{}: drain not seen before deletion: {m:?}",
            v.name
        );
        ensure!(
            m.drain_requested <= m.drained && m.drained <= m.deleted,
            "{}: order {m:?}",
            v.name
        );
        // `Drained` (not `DrainTimedOut`): the worker reported zero in flight before the
        // member left the domain and its communicator was destroyed.
        ensure!(
            m.drained_reason.as_deref() == Some("Drained"),
            "{}: drained as {:?}",
            v.name,
            m.drained_reason
        );
    }
    let events: Api<Event> = Api::namespaced(pools.bed.client().await?, NS);
    let drain_events = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref().is_some_and(|r| r.contains("Drain")))
        .count();
    ensure!(drain_events > 0, "no drain Event");
    check::clean(&pools.decode_load.latest(), "decode after scale-in")
}
