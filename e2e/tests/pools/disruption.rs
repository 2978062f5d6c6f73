//! Voluntary disruptions under load (issue 19, point 2): `kubectl drain` of a node that
//! hosts a decode member, and a member Pod deleted directly. Either way the member leaves
//! through hcomm's drain (gate off → in-flight 0 → leave the epoch → gone), its
//! replacement serves elsewhere, and no request fails.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, MemberPod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;

use crate::check;

/// How long `kubectl drain` may take: a replacement joins, the member drains and goes.
const DRAIN_TIMEOUT: &str = "100s";

/// `kubectl drain` of a node hosting a decode member: a direct eviction of the member is
/// refused (the group's PodDisruptionBudget); the operator sees the cordon, a replacement
/// joins on another node first, then the member drains (`Drained`, nothing in flight)
/// and goes; the drain completes; no request fails. Then `kubectl uncordon`.
///
/// Precondition: decode at 2 members, Ready.
pub async fn kubectl_drain_moves_a_decode_member_through_hcomms_drain(
    pools: &mut ExamplePools,
) -> Result<()> {
    let decode = pools.decode_at(2).await?;
    pools
        .decode_load
        .wait_served(&decode, 5, Duration::from_secs(30))
        .await?;
    let victim = decode[0].clone();
    let node = victim.node.clone();
    ensure!(!node.is_empty(), "{victim:?}: not bound");

    // The group's budget: owned by the group, no eviction allowed.
    let client = pools.bed.client().await?;
    let budget = Api::<PodDisruptionBudget>::namespaced(client, NS)
        .get("decode")
        .await
        .context("the decode group's PodDisruptionBudget")?;
    let spec = budget.spec.clone().unwrap_or_default();
    ensure!(
        spec.max_unavailable == Some(IntOrString::Int(0))
            && budget
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "HcommGroup" && o.name == "decode"),
        "budget: {budget:?}"
    );
    // A bare eviction is refused while hcomm has not moved the member. With kubectl: the
    // client library retries a 429 by itself, kubectl reports it.
    let eviction = pools.bed.dir().join("eviction.json");
    std::fs::write(
        &eviction,
        serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": victim.name, "namespace": NS}
        })
        .to_string(),
    )?;
    let path = format!("/api/v1/namespaces/{NS}/pods/{}/eviction", victim.name);
    let refused = tokio::task::block_in_place(|| {
        pools.bed.kubectl(&[
            "create",
            "--raw",
            &path,
            "-f",
            &eviction.display().to_string(),
        ])
    });
    match refused {
        Err(e) if format!("{e:#}").contains("TooManyRequests") => {}
        other => bail!(
            "evicting {} directly: expected 429, got {other:?}",
            victim.name
        ),
    }
    let bed = &pools.bed;
    let drained = tokio::task::block_in_place(|| {
        bed.kubectl(&[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            &format!("--timeout={DRAIN_TIMEOUT}"),
        ])
    });
    let uncordoned = tokio::task::block_in_place(|| bed.kubectl(&["uncordon", &node]));
    let drained = drained.context("kubectl drain")?;
    uncordoned.context("kubectl uncordon")?;
    eprintln!("{drained}");

    // The scheduler may have put both decode members on this node: each one it held is
    // moved, one at a time.
    let victims: Vec<&MemberPod> = decode.iter().filter(|m| m.node == node).collect();
    let after = bed.wait_pool_ready(NS, "decode", 2, POOL_WAIT).await?;
    ensure!(
        !after.iter().any(|m| victims.iter().any(|v| v.uid == m.uid)),
        "a member of the drained node is still there: {after:?}"
    );
    let replacements: Vec<&MemberPod> = after
        .iter()
        .filter(|m| !decode.iter().any(|d| d.uid == m.uid))
        .collect();
    ensure!(
        replacements.len() == victims.len() && replacements.iter().all(|r| r.node != node),
        "one replacement per member of {node} ({}), each on another node: {after:?}",
        victims.len()
    );
    // Make before break: the k-th member to leave left only after the k-th replacement
    // served, so decode never served with fewer than its replicas.
    let timeline = &pools.timeline;
    let marks = |pod: &MemberPod| {
        timeline
            .member(&pod.name)
            .with_context(|| format!("{}: no timeline marks", pod.name))
    };
    let mut left = Vec::new();
    for victim in &victims {
        let old = marks(victim)?;
        // The member stops taking traffic at its drain request, or, when `kubectl
        // drain`'s retry evicted it first (the budget allows that once the replacement is
        // Ready), when its SIGTERM drain ends.
        let at = old
            .drain_requested
            .or(old.deleted)
            .with_context(|| format!("{}: never left ({old:?})", victim.name))?;
        // `Drained`: nothing was in flight when it left. A drain that ended in its SIGTERM
        // (evicted once no longer Ready) may leave no condition: the Pod goes with its
        // worker.
        ensure!(
            matches!(old.drained_reason.as_deref(), None | Some("Drained")),
            "{}: drained as {:?} ({old:?})",
            victim.name,
            old.drained_reason
        );
        left.push(at);
    }
    let mut ready = Vec::new();
    for replacement in &replacements {
        let new = marks(replacement)?;
        ready.push(
            new.ready
                .with_context(|| format!("{}: never Ready ({new:?})", replacement.name))?,
        );
    }
    left.sort();
    ready.sort();
    ensure!(
        ready.iter().zip(&left).all(|(r, l)| r <= l),
        "each replacement must be Ready before a member drains: left at {left:?}, replacements Ready at {ready:?}"
    );
    // The prefill member the node held (if any) was moved the same way.
    bed.wait_pool_ready(NS, "prefill", 2, POOL_WAIT).await?;
    let stats = pools
        .decode_load
        .wait_served(&after, 3, Duration::from_secs(30))
        .await?;
    check::clean(&stats, "decode after kubectl drain")?;
    check::clean(&pools.prefill_load.latest(), "prefill after kubectl drain")
}

/// `kubectl delete pod` of a decode member: the worker gets SIGTERM, the agent drains the
/// member (the Pod is terminating) while the worker finishes what is in flight and
/// refuses new requests, the member leaves and the operator replaces it; no request fails.
///
/// Precondition: decode at 2 members, Ready.
pub async fn a_member_pod_deleted_directly_drains_on_sigterm_and_is_replaced(
    pools: &mut ExamplePools,
) -> Result<()> {
    let decode = pools.decode_at(2).await?;
    pools
        .decode_load
        .wait_served(&decode, 5, Duration::from_secs(30))
        .await?;
    let victim = decode[1].clone();
    let bed = &pools.bed;
    tokio::task::block_in_place(|| {
        bed.kubectl(&["delete", "pod", "-n", NS, &victim.name, "--timeout=60s"])
    })
    .context("kubectl delete pod")?;
    let after = bed.wait_pool_ready(NS, "decode", 2, POOL_WAIT).await?;
    ensure!(
        !after.iter().any(|m| m.uid == victim.uid),
        "the deleted member is back: {after:?}"
    );
    let old = pools
        .timeline
        .member(&victim.name)
        .context("victim marks")?;
    // The worker exits once nothing is in flight and the Pod object goes right after, so
    // the agent's `drained` condition may not make it onto the Pod; when it does, it must
    // say the drain ended with nothing in flight. The load's count is the proof either way.
    ensure!(
        matches!(old.drained_reason.as_deref(), None | Some("Drained")),
        "{}: a SIGTERM must drain to zero in flight, drained as {:?} ({old:?})",
        victim.name,
        old.drained_reason
    );
    let stats = pools
        .decode_load
        .wait_served(&after, 3, Duration::from_secs(30))
        .await?;
    check::clean(&stats, "decode after a member Pod was deleted")
}
