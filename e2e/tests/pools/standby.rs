//! Warm standby under load (issue 18, point 5): `spec.scaling.standby` keeps a decode
//! member verified, synced and joined but out of traffic; a scale-out is served from it —
//! its Pod is kept and only its readiness gate opens — while a new standby refills behind
//! it; a scale-in moves a serving member back to standby instead of deleting it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, MemberPod};

use crate::check;

/// Sets decode's `spec.scaling.standby`.
fn set_standby(pools: &ExamplePools, n: usize) -> Result<()> {
    let patch = format!(r#"{{"spec":{{"scaling":{{"standby":{n}}}}}}}"#);
    pools.bed.kubectl(&[
        "patch", "hcg", "decode", "-n", NS, "--type", "merge", "-p", &patch,
    ])?;
    Ok(())
}

/// decode at 2 with one warm standby: the standby takes no request; 2 → 3 promotes it
/// (same Pod, joined before the scale request, first answer after its gate opened) and a
/// new standby warms up behind it; 3 → 2 moves a serving member back to standby. Zero
/// failed requests throughout.
///
/// Precondition: decode at 2 members, Ready. Leaves decode at 2 with no standby.
pub async fn a_scale_out_is_served_from_a_warm_standby_and_a_scale_in_moves_a_member_back(
    pools: &mut ExamplePools,
) -> Result<()> {
    let serving = pools.decode_at(2).await?;
    set_standby(pools, 1)?;
    let bed = &pools.bed;
    let standby = bed.wait_standby_warm(NS, "decode", 1, POOL_WAIT).await?;
    let standby: MemberPod = standby.into_iter().next().context("one standby")?;
    ensure!(
        !serving.iter().any(|m| m.uid == standby.uid),
        "the standby is a new member: {standby:?}, serving {serving:?}"
    );
    // Out of traffic while it waits: not Ready, not counted, never answered a request.
    ensure!(!standby.ready, "a standby Pod is not Ready: {standby:?}");
    bed.wait_pool_ready(NS, "decode", 2, POOL_WAIT).await?;
    pools
        .decode_load
        .wait_served(&serving, 3, Duration::from_secs(30))
        .await?;
    let waited = pools.decode_load.latest();
    ensure!(
        waited
            .by_pod
            .get(&standby.name)
            .is_none_or(|p| p.served == 0),
        "the standby answered requests before its promotion: {:?}",
        waited.by_pod.get(&standby.name)
    );

    let asked = Instant::now();
    let asked_at = pools.timeline.offset(asked);
    bed.scale("decode", 3)?;
    let grown = bed.wait_pool_ready(NS, "decode", 3, POOL_WAIT).await?;
    let promoted_after = asked.elapsed();
    ensure!(
        grown.iter().any(|m| m.uid == standby.uid),
        "the standby's Pod serves after the scale-out: {grown:?}, standby {standby:?}"
    );
    let marks = pools
        .timeline
        .member(&standby.name)
        .context("standby in timeline")?;
    ensure!(
        marks.joined.is_some_and(|j| j < asked_at),
        "the standby joined before the scale request: {marks:?}, asked at {asked_at:?}"
    );
    let gate = marks.ready.context("the promoted standby's gate")?;
    eprintln!(
        "standby promoted: gate open {:.3} s after kubectl scale, pool Ready after {:.3} s",
        gate.saturating_sub(asked_at).as_secs_f64(),
        promoted_after.as_secs_f64()
    );
    let stats = pools
        .decode_load
        .wait_served(&grown, 3, Duration::from_secs(30))
        .await?;
    let first = stats.by_pod[&standby.name]
        .first_ok_unix_ms
        .context("the promoted standby served")?;
    let first_offset = first.saturating_sub(pools.timeline.origin_unix_ms());
    ensure!(
        Duration::from_millis(first_offset) + Duration::from_millis(50) >= gate,
        "{}: first answer at {first_offset} ms, before its gate opened at {gate:?}",
        standby.name
    );
    let refill = bed.wait_standby_warm(NS, "decode", 1, POOL_WAIT).await?;
    ensure!(
        refill.iter().all(|r| !grown.iter().any(|g| g.uid == r.uid)),
        "a new member refills the standby: {refill:?}"
    );
    check::clean(&stats, "decode after a scale-out served from the standby")?;

    // Scale-in: a serving member goes back to standby (kept warm), the surplus drains.
    bed.scale("decode", 2)?;
    let shrunk = bed.wait_pool_ready(NS, "decode", 2, POOL_WAIT).await?;
    let back = bed.wait_standby_warm(NS, "decode", 1, POOL_WAIT).await?;
    ensure!(
        back.iter().all(|b| grown.iter().any(|g| g.uid == b.uid)),
        "a member that served is the standby now: standby {back:?}, serving before {grown:?}"
    );
    ensure!(
        shrunk.iter().all(|s| grown.iter().any(|g| g.uid == s.uid)),
        "no new member serves after a scale-in: {shrunk:?}"
    );
    check::clean(
        &pools.decode_load.latest(),
        "decode after a scale-in back to standby",
    )?;

    // No standby: the standby member drains and goes; the pool stays at 2.
    set_standby(pools, 0)?;
    pools.bed.wait_members(NS, "decode", 2, POOL_WAIT).await?;
    pools.decode_at(2).await?;
    check::clean(&pools.decode_load.latest(), "decode after standby 0")
}
