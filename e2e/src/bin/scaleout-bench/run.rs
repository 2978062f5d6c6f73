//! One measurement: a fresh group with its own weights set, applied with one member,
//! scaled to `1+k`, timed to all members Ready, its member timeline read, then deleted
//! and its weights removed.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::LABEL_GROUP;
use hcomm_e2e::testbed::{self, MemberPod, Testbed, Timeline, binaries};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use crate::args::{Args, Strategy};
use crate::machine;
use hcomm_e2e::bench::Clock;

/// The namespace of every benchmark group.
pub const NS: &str = "default";

/// One (strategy, joiners) measurement.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub rate_mbit: u32,
    pub strategy: Strategy,
    pub joiners: usize,
    pub bytes: u64,
    pub floor_s: f64,
    pub time_s: f64,
    /// First new member Pod seen, after the scale request.
    pub first_pod_s: Option<f64>,
    /// Rebuild: the old member's Pod deleted, after the scale request.
    pub teardown_s: Option<f64>,
    /// Time with no member Ready (Rebuild: old member's gate False → first new one Ready).
    pub outage_s: f64,
    /// Slowest new member (the last whose weights arrived): verified − first seen.
    pub verify_s: Option<f64>,
    /// Slowest new member: weights-synced − verified.
    pub sync_s: Option<f64>,
    /// Slowest new member: ready − weights-synced.
    pub join_s: Option<f64>,
    /// Share of all cores busy during the scale-out (whole machine).
    pub machine_busy: f64,
    /// CPU seconds all agents used during the scale-out.
    pub agent_cpu_s: f64,
    /// Incremental: copies of the set the existing members' chunk servers sent, and the
    /// joiners' (relaying to each other). Ideally 1 and k − 1: every chunk leaves the
    /// existing members once and the joiners pass it on.
    pub copies_sent: Option<(f64, f64)>,
}

impl RunResult {
    pub fn over_floor(&self) -> f64 {
        self.time_s - self.floor_s
    }

    /// All agents' CPU seconds per GiB the joiners received (issue 20's measure of what a
    /// joiner costs). Incremental only: there exactly the `k` joiners fetch the set during
    /// the clock; a rebuild's new member on the first host already holds it, and a
    /// standby fetched before the clock started.
    pub fn cpu_per_gib(&self) -> Option<f64> {
        let received = (self.joiners as u64 * self.bytes) as f64 / f64::from(1u32 << 30);
        (self.strategy == Strategy::Incremental && received > 0.0)
            .then(|| self.agent_cpu_s / received)
    }
}

/// The physical floor: `bytes` over one link of `rate_mbit` Mbit/s (pure).
pub fn floor_secs(bytes: u64, rate_mbit: u32) -> f64 {
    bytes as f64 / (f64::from(rate_mbit) * 1e6 / 8.0)
}

#[allow(clippy::too_many_arguments)]
pub async fn run_one(
    bed: &Testbed,
    timeline: &Timeline,
    args: &Args,
    clock: &Clock,
    rate_mbit: u32,
    strategy: Strategy,
    k: usize,
    seed: u64,
) -> Result<RunResult> {
    // The repeat in the name too: the member timeline is kept by Pod name, and a repeat
    // under the same name read the first run's marks (`--repeat` showed one breakdown
    // five times).
    let run = if args.repeat > 1 {
        format!("-n{seed}")
    } else {
        String::new()
    };
    let group = if args.rates.len() > 1 {
        format!("bench-{}-{k}-r{rate_mbit}{run}", strategy.short())
    } else {
        format!("bench-{}-{k}{run}", strategy.short())
    };
    let source = bed.dir().join("models").join(&group);
    let digest = testbed::weights::generate(&source, args.size_mib, seed)?;
    let bytes = args.size_mib * 1024 * 1024;
    let floor_s = floor_secs(bytes, rate_mbit);
    clock.say(format!(
        "{group}: {} MiB weights (seed {seed}, {digest}); applying with 1 member",
        args.size_mib
    ));
    bed.kubectl_apply(&group_manifest(
        &group,
        strategy,
        k,
        &source,
        &digest,
        args.connect_timeout_s,
    )?)?;
    let before = bed.wait_pool_ready(NS, &group, 1, args.timeout()).await?;
    if strategy == Strategy::Standby {
        clock.say(format!("{group}: waiting for {k} warm standby member(s)"));
        bed.wait_standby_warm(NS, &group, k, args.timeout()).await?;
    }
    // Let the first member's start-up (import, health probes) settle.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // `ip netns exec` execs the agent, so these are the agents' own pids.
    let agents: Vec<u32> = (0..bed.hosts().len())
        .filter_map(|i| bed.agent_pid(i))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == binaries::AGENT)
        })
        .collect();
    ensure!(
        agents.len() == bed.hosts().len(),
        "could not find every agent's pid for the CPU accounting"
    );
    let cpu0 = machine::machine_cpu();
    let agents0 = machine::process_cpu_s(&agents);
    let served0 = served_bytes(bed);
    clock.say(format!("{group}: kubectl scale --replicas={}", 1 + k));
    let t0 = Instant::now();
    bed.scale(&group, (1 + k) as u32)?;
    // Part of the time measured, as for a user: kubectl's start, discovery and the write.
    let kubectl_s = t0.elapsed().as_secs_f64();
    // Looked at as the group's status changes (a watch): the clock stops within the reads
    // that follow the operator's write of the Ready count.
    let after = bed
        .wait_pool_ready_watching(NS, &group, 1 + k, args.timeout())
        .await?;
    let elapsed = t0.elapsed();
    let cpu1 = machine::machine_cpu();
    let agents1 = machine::process_cpu_s(&agents);
    let served1 = served_bytes(bed);

    let nodes: std::collections::BTreeSet<&str> = after.iter().map(|m| m.node.as_str()).collect();
    ensure!(
        nodes.len() == after.len(),
        "members share a host (every member should have its own): {after:?}"
    );
    let new: Vec<&MemberPod> = after
        .iter()
        .filter(|m| !before.iter().any(|b| b.uid == m.uid))
        .collect();
    match strategy {
        Strategy::Incremental | Strategy::Standby => ensure!(
            new.len() == k,
            "incremental: the first member must be kept; before {before:?}, after {after:?}"
        ),
        Strategy::Rebuild => ensure!(
            new.len() == 1 + k,
            "rebuild: every member must be new; before {before:?}, after {after:?}"
        ),
    }
    // The watch may trail the list by a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    let marks = loop {
        let marks: Vec<_> = new
            .iter()
            .filter_map(|m| timeline.member(&m.name))
            .collect();
        if (marks.len() == new.len() && marks.iter().all(|m| m.ready.is_some()))
            || Instant::now() > deadline
        {
            break marks;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let start = timeline.offset(t0);
    // The slowest joiner: the last whose weights arrived.
    let slowest = marks
        .iter()
        .max_by_key(|m| m.synced.unwrap_or(Duration::MAX));
    let secs = |a: Option<Duration>, b: Option<Duration>| Some(b?.saturating_sub(a?).as_secs_f64());
    // A promoted standby verified, synced and joined before the scale request: only its
    // gate is part of this scale-out.
    let joined_before = strategy == Strategy::Standby;
    let slowest = slowest.filter(|_| !joined_before);
    let verify_s = slowest.and_then(|m| secs(m.created, m.verified));
    let sync_s = slowest.and_then(|m| secs(m.verified, m.synced));
    let join_s = slowest.and_then(|m| secs(m.synced, m.ready));
    // Serving gap: from the old member's gate going False (its drain request) to the
    // first new member's gate True; zero when the old member kept serving.
    let old_gate_off = before
        .first()
        .and_then(|b| timeline.member(&b.name)?.drain_requested)
        .filter(|d| *d >= start);
    let first_ready = marks.iter().filter_map(|m| m.ready).min();
    // The last joiner's readiness gate as the Pod watch saw it; the clock stopped later,
    // when the group's status counted it Ready too and the wait's reads confirmed it.
    if let Some(last) = marks.iter().filter_map(|m| m.ready).max() {
        clock.say(format!(
            "{group}: kubectl scale took {:.3} s; the last joiner's member-ready seen at {:.3} s, the group Ready at {:.3} s",
            kubectl_s,
            last.saturating_sub(start).as_secs_f64(),
            elapsed.as_secs_f64()
        ));
    }
    let outage_s = match (old_gate_off, first_ready) {
        (Some(off), Some(on)) => on.saturating_sub(off).as_secs_f64(),
        _ => 0.0,
    };
    let first_pod_s = marks
        .iter()
        .filter_map(|m| m.created)
        .min()
        .filter(|_| !joined_before)
        .map(|c| c.saturating_sub(start).as_secs_f64());
    let teardown_s = match strategy {
        Strategy::Incremental | Strategy::Standby => None,
        Strategy::Rebuild => before
            .first()
            .and_then(|b| timeline.member(&b.name)?.deleted)
            .map(|d| d.saturating_sub(start).as_secs_f64()),
    };
    let copies_sent = (strategy == Strategy::Incremental)
        .then(|| {
            let old: Vec<&str> = before.iter().map(|m| m.node.as_str()).collect();
            copies_sent(bed, &served0, &served1, bytes, &old)
        })
        .flatten();
    let result = RunResult {
        rate_mbit,
        strategy,
        joiners: k,
        bytes,
        floor_s,
        time_s: elapsed.as_secs_f64(),
        first_pod_s,
        teardown_s,
        outage_s,
        verify_s,
        sync_s,
        join_s,
        machine_busy: machine::busy_between(cpu0, cpu1),
        agent_cpu_s: agents1 - agents0,
        copies_sent,
    };

    if let Some(dir) = &args.timeline_svg {
        let path = dir.join(format!(
            "scaleout-{group}-{rate_mbit}mbit-{}mib.svg",
            args.size_mib
        ));
        let members = before
            .iter()
            .chain(new.iter().copied())
            .filter_map(|m| Some((m.name.clone(), timeline.member(&m.name)?.since(start))))
            .collect();
        let title = format!(
            "{strategy} scale-out 1 → {} at {rate_mbit} Mbit/s, {} MiB: seconds since kubectl scale",
            1 + k,
            args.size_mib
        );
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        std::fs::write(&path, testbed::timeline_svg::render_svg(&title, &members))
            .with_context(|| format!("write {}", path.display()))?;
        clock.say(format!("{group}: timeline written to {}", path.display()));
    }
    clock.say(format!("{group}: deleting"));
    delete_group(bed, &group, args.timeout()).await?;
    if !args.keep_weights {
        remove_weights(bed, &source, &digest, &group);
    }
    Ok(result)
}

/// The agents' counter of chunk bytes sent (`agent/src/metrics.rs`).
const SERVED_BYTES: &str = "hcomm_agent_weights_served_bytes_total";

/// Chunk bytes each host's chunk server has sent so far (`None`: its agent did not say).
fn served_bytes(bed: &Testbed) -> Vec<Option<f64>> {
    (0..bed.hosts().len())
        .map(|i| {
            let text = bed.agent_metrics(i).ok()?;
            hcomm_e2e::bench::metric(&text, SERVED_BYTES)
        })
        .collect()
}

/// Copies of a `bytes`-byte set sent between two readings of [`served_bytes`], by the
/// hosts in `old` (the existing members') and by the others; `None` if a host did not say.
fn copies_sent(
    bed: &Testbed,
    before: &[Option<f64>],
    after: &[Option<f64>],
    bytes: u64,
    old: &[&str],
) -> Option<(f64, f64)> {
    let (mut members, mut joiners) = (0.0, 0.0);
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        let sent = (*a)? - (*b)?;
        let name = bed.hosts().host(i).ok()?.name();
        if old.contains(&name) {
            members += sent;
        } else {
            joiners += sent;
        }
    }
    let set = bytes as f64;
    Some((members / set, joiners / set))
}

/// The decode example's `HcommGroup`, renamed, with one member of one device, the
/// strategy (with `k` warm standby members for [`Strategy::Standby`]), room for every
/// joiner at once (`maxJoining`, `maxReplicas`), the connect timeout, and the weights
/// pointed at `source`.
fn group_manifest(
    group: &str,
    strategy: Strategy,
    k: usize,
    source: &Path,
    digest: &str,
    connect_timeout_s: u32,
) -> Result<String> {
    use serde::Deserialize as _;
    let path = testbed::pools::workspace_root().join("examples/decode-pool.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let mut doc = serde_yaml::Deserializer::from_str(&text)
        .map(serde_json::Value::deserialize)
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("parse examples/decode-pool.yaml")?
        .into_iter()
        .find(|d| d["kind"] == "HcommGroup")
        .context("no HcommGroup in examples/decode-pool.yaml")?;
    doc["metadata"]["name"] = group.into();
    doc["metadata"]["namespace"] = NS.into();
    let spec = &mut doc["spec"];
    spec["replicas"] = 1.into();
    let max = spec["maxReplicas"].as_i64().unwrap_or(0).max(17);
    spec["maxReplicas"] = max.into();
    spec["devicesPerMember"] = 1.into();
    spec["scaling"]["strategy"] = strategy.crd().into();
    spec["scaling"]["maxJoining"] = 16.into();
    if strategy == Strategy::Standby {
        spec["scaling"]["standby"] = k.into();
    }
    spec["comm"]["connectTimeoutSeconds"] = connect_timeout_s.into();
    spec["weights"] = serde_json::json!({
        "source": source.display().to_string(),
        "version": format!("{group}-v1"),
        "digest": digest,
    });
    Ok(serde_json::to_string_pretty(&doc)?)
}

/// Deletes the group and waits until it and all its Pods are gone.
async fn delete_group(bed: &Testbed, group: &str, within: Duration) -> Result<()> {
    bed.kubectl(&["delete", "hcg", group, "-n", NS, "--wait=false"])?;
    let client = bed.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let groups: Api<HcommGroup> = Api::namespaced(client, NS);
    let deadline = Instant::now() + within;
    loop {
        let left = pods
            .list(&ListParams::default().labels(&format!("{LABEL_GROUP}={group}")))
            .await
            .context("list pods")?
            .items
            .len();
        let exists = groups.get_opt(group).await.context("get group")?.is_some();
        if left == 0 && !exists {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{group}: {left} Pods left (group exists: {exists}) after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The kubelet stops the worker processes of deleted Pods.
    let prefix = format!("{NS}/{group}-");
    while bed.workers().values().any(|p| p.pod.starts_with(&prefix)) {
        ensure!(Instant::now() < deadline, "{group}: worker processes left");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Frees the disk a finished run used: the source folder and the set in every host's
/// store (no later run uses that digest).
fn remove_weights(bed: &Testbed, source: &Path, digest: &str, group: &str) {
    let _ = std::fs::remove_dir_all(source);
    let hex = digest.trim_start_matches("sha256:");
    for i in 0..bed.hosts().len() {
        let store = bed.weights_dir(i);
        let _ = std::fs::remove_dir_all(store.join("groups").join(format!("{NS}_{group}")));
        let _ = std::fs::remove_dir_all(store.join("versions").join(hex));
        let _ = std::fs::remove_dir_all(store.join("staging").join(hex));
        let _ = std::fs::remove_file(store.join("manifests").join(format!("{hex}.json")));
    }
}
