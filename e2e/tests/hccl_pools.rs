//! The example pools on `backend: hccl`, with the HCCL conformance simulator as every
//! host's CANN runtime (`TestbedOptions::hccl_runtime`), under load: what HCCL faults do
//! to a pool, and the worker library's Python package as a member's engine against the
//! real agents. Needs root (the simulator's ranks talk over the hosts' NPU fabric); under
//! the harness, so without it the scenarios are reported ignored.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::contract::PodReason;
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::pools::workspace_root;
use hcomm_e2e::testbed::suite::{Scenario, Suite};
use hcomm_e2e::testbed::{CommPatch, ExamplePools, binaries, timeline};

/// Hosts: prefill 2 + decode up to 3 members, one device each, two devices per host.
const HOSTS: usize = 4;
/// The pools' `opTimeoutSeconds`: how long a hung collective runs before the backend
/// aborts its communicator (HCCL's own default, 120 s, would only slow the test).
const OP_TIMEOUT_SECONDS: u32 = 5;
const SCENARIO_DEADLINE: Duration = Duration::from_secs(300);

fn main() {
    let scenarios: Vec<(&str, Scenario)> = vec![
        (
            "a_joiner_whose_hccl_collective_hangs_is_failed_and_replaced_while_the_pools_serve",
            |p| {
                Box::pin(a_joiner_whose_hccl_collective_hangs_is_failed_and_replaced(
                    p,
                ))
            },
        ),
        (
            "pytest_as_a_members_engine_follows_epochs_reports_load_and_drains_on_the_real_agents",
            |p| Box::pin(pytest_as_a_members_engine(p)),
        ),
    ];
    let suite = Suite {
        hosts: HOSTS,
        comm: CommPatch {
            backend: hcomm_crds::Backend::Hccl,
            op_timeout_seconds: Some(OP_TIMEOUT_SECONDS),
        },
        deadline: SCENARIO_DEADLINE,
    };
    suite
        .run(scenarios, |rt, pools| {
            rt.block_on(async {
                let violations = pools
                    .bed
                    .hccl_runtime()
                    .map(|rt| rt.violations())
                    .unwrap_or_default();
                let (decode, prefill) = pools.stop().await?;
                decode
                    .ensure_clean("decode, whole run")
                    .map_err(anyhow::Error::msg)?;
                prefill
                    .ensure_clean("prefill, whole run")
                    .map_err(anyhow::Error::msg)?;
                ensure!(
                    violations.is_empty(),
                    "the HCCL simulator recorded violations:\n{violations}"
                );
                anyhow::Ok(())
            })
        })
        .exit();
}

/// A joiner's NPU hangs its first collective (the simulator's `hang_op=0`: the check
/// all-reduce its worker runs on the new epoch's HCCL communicator). Past the op timeout
/// the backend aborts that communicator before any device buffer is freed (the simulator
/// records a use after free or a free under a running collective as a violation; there
/// is none); the worker, which never served, tells its agent it cannot serve; its join
/// fails with that reason at once (not at the worker-ready timeout); the operator
/// replaces it, and the replacement builds the next epoch with the serving members and
/// serves. No request fails: the serving members keep serving throughout.
async fn a_joiner_whose_hccl_collective_hangs_is_failed_and_replaced(
    pools: &mut ExamplePools,
) -> Result<()> {
    let before = pools.decode_at(2).await?;
    let runtime = pools
        .bed
        .hccl_runtime()
        .context("the testbed runs the HCCL simulator")?;
    runtime.inject_once("decode-2-", "hang_op=0");
    let t = Instant::now();
    pools.bed.scale("decode", 3)?;
    // From the Pod watch: the failed joiner is deleted at once, so a poll may miss it.
    // The first decode-2-* member that ends, ends this wait: a verification refusal or a
    // join failed for another reason is reported as what it is.
    let failed_prefix = format!("{}: ", PodReason::JoinFailed.as_str());
    let (failed, message) = loop {
        let members = pools.timeline.members();
        let ended = members
            .iter()
            .filter(|(name, _)| name.starts_with("decode-2-"))
            .find_map(|(name, m)| {
                let why = m.join_failed.as_ref().or(m.refused.as_ref())?;
                Some((name.clone(), why.clone()))
            });
        if let Some((name, why)) = ended {
            let message = why
                .strip_prefix(&failed_prefix)
                .with_context(|| format!("{name} ended otherwise than by a failed join: {why}"))?;
            break (name, message.to_owned());
        }
        if t.elapsed() >= POOL_WAIT {
            anyhow::bail!(
                "no decode-2-* join failed within {POOL_WAIT:?}; injected faults no Pod has \
                 started with: {:?}\n{}{}",
                runtime.pending_faults(),
                timeline::render(&members, |_| String::new()),
                hcomm_e2e::testbed::logs::worker_log_tails(
                    &pools.bed.dir().join("logs"),
                    NS,
                    "decode-2-",
                    6
                )
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let failed_after = t.elapsed();
    eprintln!("hccl hang: {failed} failed its join after {failed_after:?}: {message}");
    ensure!(
        message.contains("cannot serve") && message.contains("HCCL"),
        "{failed}: the join failure should carry the worker's reason: {message:?}"
    );
    // The worker waited one op timeout, not the agent's worker-ready timeout (600 s).
    ensure!(
        failed_after < Duration::from_secs(60),
        "{failed} failed only after {failed_after:?}"
    );
    let members = pools.decode_at(3).await?;
    ensure!(
        members.iter().all(|m| m.name != failed),
        "{failed} still a Ready member: {members:?}"
    );
    for b in &before {
        ensure!(
            members.iter().any(|m| m.name == b.name),
            "{} was replaced too; only the joiner should be: {members:?}",
            b.name
        );
    }
    eprintln!(
        "hccl hang: decode at 3 again after {:?}: {}",
        t.elapsed(),
        members
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let replacement = members
        .iter()
        .find(|m| !before.iter().any(|b| b.name == m.name))
        .context("a replacement member")?;
    pools
        .decode_load
        .wait_served(
            std::slice::from_ref(replacement),
            5,
            Duration::from_secs(30),
        )
        .await?;
    pools
        .decode_load
        .latest()
        .ensure_clean("decode, hung joiner")
        .map_err(anyhow::Error::msg)?;
    pools.decode_at(2).await?;
    Ok(())
}

/// The group the Python engine runs in.
const PY: &str = "pyengine";

/// The worker library's Python package as the engine of a group's members, against the
/// real agents: the container is `python3 -m pytest agent/worker/python/testbed/
/// test_as_a_member.py` (on HCCL, through the simulator). The group grows 2 → 3 and
/// shrinks back: every member builds, switches to and all-reduces on each epoch it is
/// placed in (sums 2, then 3, then 2 for the members that stay); the agent opens a
/// member's gate only after its `serving`; the member scaled in hears `drain_requested`,
/// drains, and the agent finishes its drain only after the engine's last load report
/// (in flight 0, sent 2 s after the drain began); that engine's pytest passes.
async fn pytest_as_a_members_engine(pools: &mut ExamplePools) -> Result<()> {
    let bed = &pools.bed;
    let out = bed.dir().join("pytest");
    std::fs::create_dir_all(&out)?;
    binaries::on_path("python3").context("python3 (with pytest) is needed")?;
    let lib = binaries::find("libhcomm_worker.so")?;
    bed.kubectl_apply(&python_group(&lib, &out))?;
    let two = bed.wait_pool_ready(NS, PY, 2, POOL_WAIT).await?;
    bed.scale(PY, 3)?;
    bed.wait_pool_ready(NS, PY, 3, POOL_WAIT).await?;
    bed.scale(PY, 2)?;
    let t = Instant::now();
    // The member scaled in, and when its drain finished, from the Pod watch: the operator
    // deletes a drained member at once, so a poll of the Pods may never see it drained.
    let timeline = &pools.timeline;
    let (victim, drained_seen) = loop {
        let drained = timeline.members().into_iter().find_map(|(name, m)| {
            let at = m.drained.filter(|_| m.group == PY)?;
            Some((name, at, m.drained_reason.unwrap_or_default()))
        });
        if let Some((name, at, reason)) = drained {
            ensure!(
                reason == PodReason::Drained.as_str(),
                "{name} drained with {reason}, not after its engine reported 0 in flight"
            );
            let unix =
                std::time::UNIX_EPOCH + Duration::from_millis(timeline.origin_unix_ms()) + at;
            break (name, unix);
        }
        ensure!(t.elapsed() < POOL_WAIT, "no {PY} member drained");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    bed.wait_members(NS, PY, 2, POOL_WAIT).await?;
    let victim_notes = notes(&out, &victim)?;
    let reported_zero = victim_notes
        .iter()
        .find(|n| n["event"] == "reported" && n["in_flight"] == 0)
        .and_then(|n| n["t"].as_f64())
        .with_context(|| format!("{victim} never reported 0 in flight: {victim_notes:?}"))?;
    let seen = drained_seen
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    // A drain that did not wait would finish 2 s before the last report; half a second
    // covers the report's own round trip before the engine noted it.
    ensure!(
        seen + 0.5 >= reported_zero,
        "{victim}'s drain finished (seen at {seen:.2}) before its engine reported 0 in flight \
         (at {reported_zero:.2}): the agent did not wait for the load report"
    );
    ensure!(
        victim_notes.iter().any(|n| n["event"] == "done"),
        "{victim}: {victim_notes:?}"
    );
    let log = bed
        .dir()
        .join("logs")
        .join(format!("{NS}_{victim}_engine.log"));
    // The engine notes `done` before pytest prints its summary line: wait for the line.
    let t = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).with_context(|| format!("{}", log.display()))?;
        if text.contains(" passed") || text.contains(" failed") || text.contains(" error") {
            break text;
        }
        ensure!(
            t.elapsed() < Duration::from_secs(30),
            "{victim}'s pytest printed no summary within 30 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(
        text.contains("1 passed") && !text.contains(" failed"),
        "{victim}'s pytest did not pass:\n{text}"
    );
    // The members that stay saw 3, then 2 again; each epoch's sum its size.
    for m in two.iter().filter(|m| m.name != victim) {
        let t = Instant::now();
        loop {
            let worlds: Vec<u64> = notes(&out, &m.name)?
                .iter()
                .filter(|n| n["event"] == "switched")
                .map(|n| {
                    ensure!(n["sum"].as_f64() == n["world"].as_f64(), "{}: {n}", m.name);
                    Ok(n["world"].as_u64().unwrap_or(0))
                })
                .collect::<Result<_>>()?;
            if worlds.ends_with(&[2]) && worlds.contains(&3) {
                eprintln!("pytest engine {}: epoch sizes {worlds:?}", m.name);
                break;
            }
            ensure!(
                t.elapsed() < Duration::from_secs(60),
                "{}: epoch sizes {worlds:?}, want …3…, 2",
                m.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    bed.kubectl(&["delete", "hcg", PY, "-n", NS, "--wait=false"])?;
    bed.wait_members(NS, PY, 0, POOL_WAIT).await?;
    Ok(())
}

/// The lines `$out/<pod>.jsonl` the engine wrote, up to its first `done`.
fn notes(out: &std::path::Path, pod: &str) -> Result<Vec<serde_json::Value>> {
    let path = out.join(format!("{pod}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut lines = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: {line}", path.display()))?;
        let done = v["event"] == "done";
        lines.push(v);
        if done {
            break;
        }
    }
    Ok(lines)
}

/// The group whose engine is the Python package's member test (HCCL, one NPU a member,
/// the gate held until the engine says `serving`).
fn python_group(lib: &std::path::Path, out: &std::path::Path) -> String {
    let python = workspace_root().join("agent/worker/python");
    let test = python.join("testbed/test_as_a_member.py");
    format!(
        r#"apiVersion: hcomm.io/v1alpha1
kind: HcommGroup
metadata:
  name: {PY}
  namespace: {NS}
spec:
  replicas: 2
  maxReplicas: 4
  role: generic
  devicesPerMember: 1
  comm:
    backend: hccl
    socketIfname: "data"
    connectTimeoutSeconds: 120
    opTimeoutSeconds: {OP_TIMEOUT_SECONDS}
  scaling:
    strategy: Incremental
    drainTimeoutSeconds: 60
  template:
    metadata:
      annotations:
        hcomm.io/worker-readiness: local-api
    spec:
      containers:
        - name: engine
          image: python:3.11
          command: ["python3"]
          args: ["-m", "pytest", "-q", "-p", "no:cacheprovider", "{test}"]
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: PYTHONPATH
              value: "{python}"
            - name: HCOMM_WORKER_LIB
              value: "{lib}"
            - name: HCOMM_PYTEST_OUT
              value: "{out}"
"#,
        test = test.display(),
        python = python.display(),
        lib = lib.display(),
        out = out.display(),
    )
}
