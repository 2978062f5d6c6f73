//! Weight sync through the real agents, with faults: real `hcomm-agent` processes in
//! network namespaces whose data links are shaped with `tc`, a real API server, groups and
//! Pods as the operator writes them. A generated 256 MiB set is synced to one joiner, then
//! another 256 MiB set to three joiners at once; each time one source agent is SIGKILLed
//! midway and another serves corrupt chunks. Every joiner must end with
//! `hcomm.io/weights-synced=True`, its group link holding exactly the group's digest
//! (recomputed from disk), and the Warning Events `WeightsSourceLost` (naming the killed
//! source) and `CorruptWeightsChunk` (naming the corrupt one) must exist.
//!
//! Sources are members that already hold the set: their stores are seeded before the
//! agents start (S0 by the store's own verified install, S1 by hard links to it), so only
//! the joiners transfer. The corrupt source S2 holds files of the right names and lengths
//! whose every chunk starts with garbage, i.e. its disk went bad after install; it runs
//! with `--weights-verify-on-serve false` (the default, said outright: with `true` the
//! server re-hashes each chunk before sending and would withdraw (answer `Missing`) instead
//! of sending garbage, and joiners would never see a corrupt chunk). The groups' `source` is a URL the
//! agent cannot import, so a sync can only succeed from peers.
//!
//! Sizing: data links at 200 Mbit/s make one 256 MiB copy take ~11 s on a joiner's
//! downlink, long enough to kill a source ~30 % in; the whole test takes about a minute.
//! Needs root (namespaces, tc) and the cached control-plane binaries: without root it is
//! reported as ignored with the reason (`hcomm_e2e::harness`).

mod support;

use std::fs;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use hcomm_agent::weights::generate::{GenerateSpec, generate};
use hcomm_agent::weights::{DEFAULT_CHUNK_SIZE, Digest, Manifest, WeightStore, manifest_digest};
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::{HostProcess, Shaping, SimHost, SimHosts, SimHostsOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::json;
use support::*;

/// Bytes of each generated set.
const SET_BYTES: u64 = 256 << 20;
/// Data-link rate (each direction, every host).
const RATE_MBIT: u32 = 200;
/// Share of one copy's transfer time after which a source is killed.
const KILL_AT: f64 = 0.3;
/// Hosts: three sources, then three joiners.
const SOURCES: usize = 3;
const JOINERS: usize = 3;
const KILLED_IN_PHASE_1: usize = 1;
const KILLED_IN_PHASE_2: usize = 0;
const CORRUPT: usize = 2;

/// One copy's transfer time on a shaped link.
fn copy_time() -> Duration {
    Duration::from_secs_f64(SET_BYTES as f64 * 8.0 / (f64::from(RATE_MBIT) * 1e6))
}

fn main() {
    harness::run(vec![Test::new(
        "synced_weights_survive_a_killed_source_and_a_corrupt_one_for_one_and_three_joiners",
        Needs::NetworkNamespaces,
        || {
            let hosts = SimHosts::create(
                SimHostsOptions::new(SOURCES + JOINERS).data_shaping(Shaping::rate(RATE_MBIT)),
            )?;
            let work = TempPaths::default();
            harness::block_on(Duration::from_secs(300), scenario(&hosts, &work))
        },
    )])
    .exit();
}

/// Paths removed when the test ends, pass or fail.
#[derive(Default)]
struct TempPaths(std::sync::Mutex<Vec<PathBuf>>);

impl TempPaths {
    fn add(&self, p: PathBuf) -> PathBuf {
        let _ = fs::remove_dir_all(&p);
        let _ = fs::remove_file(&p);
        self.0.lock().unwrap().push(p.clone());
        p
    }
}

impl Drop for TempPaths {
    fn drop(&mut self) {
        for p in self.0.lock().unwrap().iter() {
            let _ = fs::remove_dir_all(p);
            let _ = fs::remove_file(p);
        }
    }
}

/// A generated set, installed and verified in `store`; returns its digest.
fn seed_source(store: &WeightStore, src: &Path, seed: u64) -> Result<Digest> {
    generate(
        src,
        &GenerateSpec {
            size: SET_BYTES,
            seed,
            files: 4,
        },
    )?;
    let digest = manifest_digest(src, DEFAULT_CHUNK_SIZE)?;
    store.install_dir(src, &digest, DEFAULT_CHUNK_SIZE)?;
    fs::remove_dir_all(src)?;
    Ok(digest)
}

/// Gives `to` the set `digest` of store `from`: hard links (an identical holder), or
/// (`corrupt`) files of the same names and lengths whose every chunk starts with 4 KiB
/// of garbage (sparse otherwise) — a disk gone bad after the set was verified.
fn copy_set(from: &Path, to: &Path, digest: &Digest, corrupt: bool) -> Result<()> {
    let manifest_rel = PathBuf::from("manifests").join(format!("{}.json", digest.hex()));
    let bytes = fs::read(from.join(&manifest_rel))?;
    let manifest = Manifest::parse(&bytes)?;
    fs::create_dir_all(to.join("manifests"))?;
    fs::write(to.join(&manifest_rel), &bytes)?;
    let version = PathBuf::from("versions").join(digest.hex());
    for f in &manifest.files {
        let (src, dst) = (
            from.join(&version).join(&f.path),
            to.join(&version).join(&f.path),
        );
        fs::create_dir_all(dst.parent().expect("a file has a parent"))?;
        if !corrupt {
            fs::hard_link(&src, &dst)?;
            continue;
        }
        let out = fs::File::create(&dst)?;
        out.set_len(f.size)?;
        let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 131 + 7) as u8).collect();
        for offset in (0..f.size).step_by(manifest.chunk_size as usize) {
            let n = garbage.len().min((f.size - offset) as usize);
            out.write_all_at(&garbage[..n], offset)?;
        }
        fs::set_permissions(&dst, fs::Permissions::from_mode(f.mode))?;
    }
    Ok(())
}

/// How many times the agent logged the start of a peer fetch.
fn fetches_started(log: &Path) -> usize {
    fs::read_to_string(log)
        .map(|s| s.matches("fetching weights").count())
        .unwrap_or(0)
}

/// Waits until every log shows `n` fetches started (bounded).
async fn wait_fetching(logs: &[&Path], n: usize, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while logs.iter().any(|l| fetches_started(l) < n) {
        if Instant::now() > deadline {
            bail!("joiners did not start fetching within {within:?}: {logs:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn wait_socket(p: &Path, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while !p.exists() {
        if Instant::now() > deadline {
            bail!(
                "agent socket {} did not appear within {within:?}",
                p.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn member(h: &SimHost) -> (String, String, i32) {
    (h.name().to_owned(), h.data_ip().to_string(), 0)
}

fn weights(digest: &Digest, version: &str) -> serde_json::Value {
    // No declared source (peers only): a sync can only succeed from peers.
    json!({"source": "", "version": version,
           "digest": digest.to_string()})
}

/// Asserts a joiner's outcome: synced, its group link (given as the worker's
/// `weights_path`) holds exactly `digest` rebuilt from disk.
async fn check_joiner(
    pods: &Api<Pod>,
    pod: &str,
    agent: &AgentSpec,
    group: &str,
    digest: &Digest,
    within: Duration,
) -> Result<String> {
    let (_, message) = wait_condition(
        pods,
        pod,
        hcomm_crds::contract::POD_WEIGHTS_SYNCED,
        "True",
        within,
    )
    .await?;
    ensure!(message.contains("fetched from peers"), "{pod}: {message}");
    let link = agent
        .weights_dir
        .join(format!("groups/{NS}_{group}/current"));
    let a = ask(
        &agent.socket,
        &format!(r#"{{"op":"assignment","pod":"{pod}"}}"#),
    )?;
    ensure!(
        a["assignment"]["weights_path"] == link.display().to_string(),
        "{pod}: {a}"
    );
    let l = link.clone();
    let on_disk =
        tokio::task::spawn_blocking(move || manifest_digest(&l, DEFAULT_CHUNK_SIZE)).await??;
    ensure!(
        on_disk == *digest,
        "{pod}: {} holds {on_disk}, the group's digest is {digest}",
        link.display()
    );
    Ok(message)
}

/// The Warning Events of `pods`: whether one with `reason` names `addr`.
async fn event_names(
    client: &kube::Client,
    pods: &[String],
    reason: &str,
    addr: &str,
) -> Result<bool> {
    for p in pods {
        if pod_events(client, p)
            .await?
            .iter()
            .any(|(r, note)| r == reason && note.contains(addr))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

async fn wait_event(
    client: &kube::Client,
    pods: &[String],
    reason: &str,
    addr: &str,
    within: Duration,
) -> Result<()> {
    let deadline = Instant::now() + within;
    while !event_names(client, pods, reason, addr).await? {
        if Instant::now() > deadline {
            let mut all = Vec::new();
            for p in pods {
                all.push((p.clone(), pod_events(client, p).await?));
            }
            bail!("no {reason} Event naming {addr} on {pods:?}; events: {all:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

async fn scenario(hosts: &SimHosts, work: &TempPaths) -> Result<()> {
    let started = Instant::now();
    let h: Vec<&SimHost> = hosts.hosts().iter().collect();
    let cluster = Cluster::start(hosts).await?;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let secret = work.add(temp_path("faults-secret"));
    write_secret(&secret)?;

    // Agents' stores; the sources' are seeded before they start.
    let specs: Vec<AgentSpec> = h
        .iter()
        .map(|host| {
            let mut s = AgentSpec::new("faults", host, &secret);
            work.add(s.weights_dir.clone());
            work.add(s.socket.clone());
            s.log = Some(work.add(temp_path(&format!("faults-{}.log", host.index()))));
            if host.index() == CORRUPT {
                s.extra_args = vec!["--weights-verify-on-serve".into(), "false".into()];
            }
            s
        })
        .collect();
    let s0 = WeightStore::open(&specs[0].weights_dir)?;
    let (set_a, set_b) = {
        let (src_a, src_b) = (
            work.add(temp_path("faults-src-a")),
            work.add(temp_path("faults-src-b")),
        );
        let s = s0.clone();
        tokio::task::spawn_blocking(move || -> Result<(Digest, Digest)> {
            Ok((seed_source(&s, &src_a, 1)?, seed_source(&s, &src_b, 2)?))
        })
        .await??
    };
    for d in [&set_a, &set_b] {
        copy_set(&specs[0].weights_dir, &specs[1].weights_dir, d, false)?;
        copy_set(&specs[0].weights_dir, &specs[CORRUPT].weights_dir, d, true)?;
    }
    eprintln!(
        "sets seeded in {:.1}s: A {set_a}, B {set_b}",
        started.elapsed().as_secs_f64()
    );

    let mut procs: Vec<Option<HostProcess>> = Vec::new();
    for (host, spec) in h.iter().zip(&specs) {
        procs.push(Some(spawn_agent(host, &cluster.agent_kubeconfig, spec)?));
    }
    cluster.wait_nodes(&h, Duration::from_secs(60)).await?;
    let addr = |i: usize| format!("{}:7512", h[i].data_ip());
    let deadline = copy_time() * 4 + Duration::from_secs(30);

    // Phase 1: one joiner (J0) of group "one" fetches set A from S0, S1, S2; S1 is killed
    // ~30 % in, S2's chunks are corrupt.
    let j0 = SOURCES;
    let one: Vec<_> = h[..=j0].iter().map(|x| member(x)).collect();
    create_group(&client, "one", &one, Some(weights(&set_a, "a")))
        .await
        .context("group one")?;
    let log = |i: usize| specs[i].log.clone().expect("logged");
    wait_fetching(&[&log(j0)], 1, Duration::from_secs(60)).await?;
    let t1 = Instant::now();
    tokio::time::sleep(copy_time().mul_f64(KILL_AT)).await;
    procs[KILLED_IN_PHASE_1] = None; // SIGKILL and reap
    eprintln!(
        "phase 1: killed S{KILLED_IN_PHASE_1} {:.1}s into the fetch",
        t1.elapsed().as_secs_f64()
    );
    let joiner_pod = format!("one-{j0}");
    let msg = check_joiner(&pods, &joiner_pod, &specs[j0], "one", &set_a, deadline).await?;
    eprintln!(
        "phase 1: {joiner_pod} synced in {:.1}s: {msg}",
        t1.elapsed().as_secs_f64()
    );
    let p1 = [joiner_pod];
    wait_event(
        &client,
        &p1,
        hcomm_crds::contract::PodReason::WeightsSourceLost.as_str(),
        &addr(KILLED_IN_PHASE_1),
        Duration::from_secs(10),
    )
    .await?;
    wait_event(
        &client,
        &p1,
        hcomm_crds::contract::PodReason::CorruptWeightsChunk.as_str(),
        &addr(CORRUPT),
        Duration::from_secs(10),
    )
    .await?;

    // Phase 2: S1 comes back (same store); three joiners of group "three" fetch set B at
    // once, from the sources and from each other; S0 is killed ~30 % in.
    procs[KILLED_IN_PHASE_1] = Some(spawn_agent(
        h[KILLED_IN_PHASE_1],
        &cluster.agent_kubeconfig,
        &specs[KILLED_IN_PHASE_1],
    )?);
    wait_socket(&specs[KILLED_IN_PHASE_1].socket, Duration::from_secs(30)).await?;
    let three: Vec<_> = h.iter().map(|x| member(x)).collect();
    create_group(&client, "three", &three, Some(weights(&set_b, "b")))
        .await
        .context("group three")?;
    let logs: Vec<PathBuf> = (SOURCES..SOURCES + JOINERS).map(log).collect();
    let wanted: Vec<usize> = (SOURCES..SOURCES + JOINERS)
        .map(|i| if i == j0 { 2 } else { 1 })
        .collect();
    let deadline_start = Instant::now() + Duration::from_secs(60);
    for (l, n) in logs.iter().zip(&wanted) {
        wait_fetching(
            &[l],
            *n,
            deadline_start.saturating_duration_since(Instant::now()),
        )
        .await?;
    }
    let t2 = Instant::now();
    tokio::time::sleep(copy_time().mul_f64(KILL_AT)).await;
    procs[KILLED_IN_PHASE_2] = None;
    eprintln!(
        "phase 2: killed S{KILLED_IN_PHASE_2} {:.1}s into the fetch",
        t2.elapsed().as_secs_f64()
    );
    let joiner_pods: Vec<String> = (SOURCES..SOURCES + JOINERS)
        .map(|i| format!("three-{i}"))
        .collect();
    for (i, pod) in (SOURCES..).zip(&joiner_pods) {
        let msg = check_joiner(&pods, pod, &specs[i], "three", &set_b, deadline).await?;
        eprintln!(
            "phase 2: {pod} synced after {:.1}s: {msg}",
            t2.elapsed().as_secs_f64()
        );
    }
    wait_event(
        &client,
        &joiner_pods,
        hcomm_crds::contract::PodReason::WeightsSourceLost.as_str(),
        &addr(KILLED_IN_PHASE_2),
        Duration::from_secs(10),
    )
    .await?;
    wait_event(
        &client,
        &joiner_pods,
        hcomm_crds::contract::PodReason::CorruptWeightsChunk.as_str(),
        &addr(CORRUPT),
        Duration::from_secs(10),
    )
    .await?;

    // J0 now serves two groups with different sets: each group's link kept its own set,
    // and the versions are stored once each.
    let j0_store = &specs[j0].weights_dir;
    for (group, digest) in [("one", &set_a), ("three", &set_b)] {
        let target = fs::canonicalize(j0_store.join(format!("groups/{NS}_{group}/current")))?;
        ensure!(
            target == fs::canonicalize(j0_store.join("versions").join(digest.hex()))?,
            "J0's link of group {group} points at {}",
            target.display()
        );
    }
    ensure!(fs::read_dir(j0_store.join("versions"))?.count() == 2);
    eprintln!("total {:.1}s", started.elapsed().as_secs_f64());
    drop(procs);
    drop(cluster);
    Ok(())
}
