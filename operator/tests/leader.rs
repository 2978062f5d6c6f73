//! Leader election between operator processes against a real control plane: a paused
//! leader (SIGSTOP) is replaced only after the Lease went unrenewed for its duration, steps
//! down without writing when it resumes, and a leader stopped gracefully (SIGTERM) hands
//! over at once. One writer at a time shows in the Lease's transitions (exactly one per
//! handover), the leadership metric and `/readyz`.

mod support;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use hcomm_operator::leader::{LEASE_DURATION, RENEW_EVERY};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::Api;
use support::{Cluster, Operator, http_get, run, wait_until};

async fn lease(cluster: &Cluster) -> Result<LeaseSpec> {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    leases
        .get("hcomm-operator")
        .await?
        .spec
        .context("lease without spec")
}

async fn wait_holder(cluster: &Cluster, who: &Operator) -> Result<LeaseSpec> {
    wait_until(&format!("{} holds the lease", who.identity), || async {
        let spec = lease(cluster).await.ok()?;
        (spec.holder_identity.as_deref() == Some(who.identity.as_str())).then_some(spec)
    })
    .await
    .with_context(|| who.log_tail())
}

/// Waits until `/readyz` answers 200 with a body containing `part`.
async fn wait_ready(op: &Operator, part: &str) -> Result<String> {
    wait_until(&format!("{} ready as {part}", op.identity), || async {
        let body = http_get(op.metrics, "/readyz").await.ok()?;
        body.contains(part).then_some(body)
    })
    .await
    .with_context(|| op.log_tail())
}

#[test]
fn a_paused_leader_is_replaced_after_the_lease_duration_and_a_stopped_one_at_once() {
    run(Duration::from_secs(240), || async {
        let cluster = Cluster::start("leader").await?;
        let mut a = Operator::start(&cluster, "op-a")?;
        wait_holder(&cluster, &a).await?;
        wait_ready(&a, "leader, caches synced").await?;
        let mut b = Operator::start(&cluster, "op-b")?;
        let body = wait_ready(&b, "standby").await?;
        ensure!(body.contains("op-a"), "{body}");
        ensure!(b.metric("hcomm_operator_leader").await? == 0.0);
        ensure!(a.metric("hcomm_operator_leader").await? == 1.0);
        let t0 = lease(&cluster).await?.lease_transitions.unwrap_or(0);

        // The leader freezes: the standby waits out the Lease as its own clock sees it.
        a.signal("STOP")?;
        let paused = Instant::now();
        let spec = wait_holder(&cluster, &b).await?;
        let took = paused.elapsed();
        ensure!(
            took + RENEW_EVERY + Duration::from_secs(1) >= LEASE_DURATION,
            "op-b took over {took:?} after the pause"
        );
        ensure!(spec.lease_transitions == Some(t0 + 1), "{spec:?}");
        ensure!(b.metric("hcomm_operator_leader").await? == 1.0);
        wait_ready(&b, "leader, caches synced").await?;

        // It resumes: past its renew deadline, it steps down and exits without writing.
        a.signal("CONT")?;
        let status = a.exited(Duration::from_secs(20)).await?;
        ensure!(!status.success(), "op-a exited with {status}");
        let log = std::fs::read_to_string(&a.log)?;
        ensure!(log.contains("stepping down"), "{}", a.log_tail());
        let spec = lease(&cluster).await?;
        ensure!(
            spec.holder_identity.as_deref() == Some("op-b")
                && spec.lease_transitions == Some(t0 + 1),
            "{spec:?}"
        );

        // A graceful stop releases the Lease: the next standby takes over at once.
        let c = Operator::start(&cluster, "op-c")?;
        wait_ready(&c, "standby").await?;
        b.signal("TERM")?;
        let stopped = Instant::now();
        let spec = wait_holder(&cluster, &c).await?;
        let took = stopped.elapsed();
        ensure!(
            took < LEASE_DURATION / 2,
            "op-c took over {took:?} after op-b's SIGTERM"
        );
        ensure!(spec.lease_transitions == Some(t0 + 2), "{spec:?}");
        let status = b.exited(Duration::from_secs(20)).await?;
        ensure!(status.success(), "op-b exited with {status}");
        ensure!(std::fs::read_to_string(&b.log)?.contains("released leader lease"));
        ensure!(c.metric("hcomm_operator_leader").await? == 1.0);
        Ok(())
    });
}
