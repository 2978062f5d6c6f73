//! An upgrade of hcomm itself while both pools serve (issue 19, point 3), as `helm upgrade`
//! rolls it out: the agent DaemonSet replaces one node's agent at a time (SIGTERM, a new
//! process on the same node state), and the operator Deployment starts the new operator
//! beside the old one, which hands the Lease over when it gets SIGTERM.
//!
//! What must hold: the members are the same Pods before and after (no member replaced,
//! none drained), every member's readiness gate stays True while its agent restarts (the
//! new agent adopts the member where it is instead of verifying, syncing and joining it
//! again), the groups stay at their epoch (the communicators are not rebuilt), and no
//! request fails. The chart's side — one node at a time, a surge for the operator — is
//! checked on the rendered manifests by `e2e/tests/chart.rs`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::HcommGroup;
use hcomm_e2e::chart::RELEASE_NAMESPACE;
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, MemberPod};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::check;

/// The grace a DaemonSet's and a Deployment's Pods get by default
/// (`terminationGracePeriodSeconds`).
const GRACE: Duration = Duration::from_secs(30);
/// How long a new agent may take to be ready (`/readyz`): its node registered, its member
/// Pods listed, its local API bound.
const AGENT_READY_WAIT: Duration = Duration::from_secs(30);
/// How long the members are watched after their agent is ready again: long enough for a
/// re-verification or a rejoin to have shown up as a gate going False.
const SETTLE: Duration = Duration::from_secs(5);
/// How long the new operator may take to hold the Lease once the old one stopped.
const HANDOVER_WAIT: Duration = Duration::from_secs(15);

/// Precondition: decode at 2 members, Ready.
pub async fn an_upgrade_restarts_agents_node_by_node_and_hands_the_operator_over_under_load(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(2).await?;
    let client = pools.bed.client().await?;
    let groups: Api<HcommGroup> = Api::namespaced(client.clone(), NS);
    let before = members_by_name(pools).await?;
    let epochs_before = epochs(&groups).await?;
    let hosts = pools.bed.hosts().hosts().len();

    for i in 0..hosts {
        let t = Instant::now();
        let exited = pools.bed.roll_agent(i, GRACE)?;
        ensure!(
            exited,
            "host-{i}'s agent did not exit within {GRACE:?} of SIGTERM"
        );
        let deadline = Instant::now() + AGENT_READY_WAIT;
        while !pools.bed.agent_ready(i) {
            ensure!(
                Instant::now() < deadline,
                "host-{i}'s new agent not ready within {AGENT_READY_WAIT:?}"
            );
            watch_gates(pools, &before, i).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ready_after = t.elapsed();
        let settle = Instant::now() + SETTLE;
        while Instant::now() < settle {
            watch_gates(pools, &before, i).await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("upgrade: host-{i}'s agent replaced, ready after {ready_after:?}");
    }
    let after = members_by_name(pools).await?;
    ensure!(
        after == before,
        "the members changed across the agents' restarts: before {before:?}, after {after:?}"
    );
    let epochs_after = epochs(&groups).await?;
    ensure!(
        epochs_after == epochs_before,
        "a group changed epoch across the agents' restarts (communicators rebuilt): {epochs_before:?} → {epochs_after:?}"
    );
    check::pools_clean(pools, "across agent restarts")?;

    // The operator: the new one waits beside the old, which releases the Lease on SIGTERM.
    let leases: Api<Lease> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let lease_before = leases.get("hcomm-operator").await?.spec.unwrap_or_default();
    let t = Instant::now();
    let (identity, exited) = pools.bed.roll_operator(GRACE)?;
    ensure!(
        exited,
        "the old operator did not exit within {GRACE:?} of SIGTERM"
    );
    let stopped = t.elapsed();
    let deadline = Instant::now() + HANDOVER_WAIT;
    let lease = loop {
        let spec = leases.get("hcomm-operator").await?.spec.unwrap_or_default();
        if spec.holder_identity.as_deref() == Some(identity.as_str()) {
            break spec;
        }
        ensure!(
            Instant::now() < deadline,
            "{identity} does not hold the Lease {HANDOVER_WAIT:?} after the old operator stopped: {spec:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ensure!(
        lease.lease_transitions.unwrap_or(0) == lease_before.lease_transitions.unwrap_or(0) + 1,
        "one handover is one transition: {:?} → {:?}",
        lease_before.lease_transitions,
        lease.lease_transitions
    );
    eprintln!(
        "upgrade: operator handed over: the old one exited {stopped:?} after SIGTERM, {identity} held the Lease {:?} after that",
        t.elapsed() - stopped
    );
    // The new leader acts: a scale-out and back.
    pools.bed.scale("decode", 3)?;
    let grown = pools
        .bed
        .wait_pool_ready(NS, "decode", 3, POOL_WAIT)
        .await?;
    pools
        .decode_load
        .wait_served(&grown, 3, Duration::from_secs(30))
        .await?;
    pools.decode_at(2).await?;
    check::pools_clean(pools, "across the operator's handover")
}

/// Both pools' members by Pod name.
async fn members_by_name(pools: &ExamplePools) -> Result<BTreeMap<String, MemberPod>> {
    let mut all = BTreeMap::new();
    for group in ["prefill", "decode"] {
        for m in pools.bed.members(NS, group).await? {
            all.insert(m.name.clone(), m);
        }
    }
    Ok(all)
}

/// Every member of `before` still exists and is Ready (its gate True) while host `i`'s
/// agent restarts.
async fn watch_gates(
    pools: &ExamplePools,
    before: &BTreeMap<String, MemberPod>,
    i: usize,
) -> Result<()> {
    let now = members_by_name(pools).await?;
    for (name, m) in before {
        let still = now.get(name).with_context(|| {
            format!(
                "{name} ({}) went away while host-{i}'s agent restarted",
                m.node
            )
        })?;
        ensure!(
            still.ready,
            "{name} on {} turned not Ready while host-{i}'s agent restarted",
            still.node
        );
    }
    Ok(())
}

/// Each example group's `status.epoch`.
async fn epochs(groups: &Api<HcommGroup>) -> Result<BTreeMap<String, i64>> {
    let mut out = BTreeMap::new();
    for g in ["prefill", "decode"] {
        let epoch = groups
            .get(g)
            .await?
            .status
            .map(|s| s.epoch)
            .context("group without status")?;
        out.insert(g.to_owned(), epoch);
    }
    Ok(out)
}
