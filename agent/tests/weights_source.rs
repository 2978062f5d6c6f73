//! A tenant's group names a local weights source the node's admin did not allow: the
//! real agent refuses it before reading a byte, on the member that would import it,
//! while the member of the same group that holds the weights keeps them.
//!
//! Two hosts, both agents allowing one source root (`--weights-source-root`) holding the
//! right set and a symlink `escape -> /etc`. Host 0's store already holds the set; its
//! chunk server listens on another port than host 1's agent dials, so host 1's member
//! finds no peer serving the set and falls back to the declared source — the import path
//! an attacker aims at. Group `getc` declares `/etc`, group `glink` the symlink out of
//! the root: host 1's member reports `hcomm.io/weights-synced=False
//! (WeightsSourceRefused)` naming the path and why, with an Event; nothing is staged or
//! installed on host 1; host 0's member stays synced on the set.
//! Needs root (namespaces) and the cached control-plane binaries: without root it is
//! reported as ignored with the reason (`hcomm_e2e::harness`).

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use hcomm_agent::weights::generate::{GenerateSpec, generate};
use hcomm_agent::weights::{DEFAULT_CHUNK_SIZE, Digest, WeightStore, manifest_digest};
use hcomm_crds::contract::{PodConditionType, PodReason};
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::{SimHost, SimHosts, SimHostsOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::json;
use support::*;

fn main() {
    harness::run(vec![Test::new(
        "a_source_outside_the_allowed_root_or_through_a_symlink_is_refused_and_the_holder_keeps_serving",
        Needs::NetworkNamespaces,
        || {
            let hosts = SimHosts::create(SimHostsOptions::new(2))?;
            let work = Cleanup::default();
            harness::block_on(Duration::from_secs(180), scenario(&hosts, &work))
        },
    )])
    .exit();
}

/// Paths removed when the test ends, pass or fail.
#[derive(Default)]
struct Cleanup(std::sync::Mutex<Vec<PathBuf>>);

impl Cleanup {
    fn add(&self, p: PathBuf) -> PathBuf {
        let _ = fs::remove_dir_all(&p);
        let _ = fs::remove_file(&p);
        self.0.lock().unwrap().push(p.clone());
        p
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in self.0.lock().unwrap().iter() {
            let _ = fs::remove_dir_all(p);
            let _ = fs::remove_file(p);
        }
    }
}

fn member(h: &SimHost, rank: i32) -> (String, String, i32) {
    (h.name().to_owned(), h.data_ip().to_string(), rank)
}

/// Waits until `pod`'s weights-synced condition has `status` and `reason`; returns its
/// message.
async fn wait_reason(
    pods: &Api<Pod>,
    pod: &str,
    status: &str,
    reason: PodReason,
    within: Duration,
) -> Result<String> {
    let type_ = PodConditionType::WeightsSynced.as_str();
    let deadline = Instant::now() + within;
    loop {
        let now = condition(pods, pod, type_).await;
        if let Some((s, r, m)) = &now
            && s == status
            && r == reason.as_str()
        {
            return Ok(m.clone());
        }
        if Instant::now() > deadline {
            bail!("{pod}: {type_} not {status} ({reason}) within {within:?}; now {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for an Event with `reason` about `pod` whose note contains `text`.
async fn wait_event(
    client: &kube::Client,
    pod: &str,
    reason: PodReason,
    text: &str,
    within: Duration,
) -> Result<String> {
    let deadline = Instant::now() + within;
    loop {
        let events = pod_events(client, pod).await?;
        if let Some((_, note)) = events
            .iter()
            .find(|(r, note)| r == reason.as_str() && note.contains(text))
        {
            return Ok(note.clone());
        }
        if Instant::now() > deadline {
            bail!("no {reason} Event naming {text:?} on {pod}; events: {events:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Entries directly under `<store>/<sub>` (none if it does not exist).
fn entries(store: &Path, sub: &str) -> Vec<String> {
    fs::read_dir(store.join(sub))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn scenario(hosts: &SimHosts, work: &Cleanup) -> Result<()> {
    let h: Vec<&SimHost> = hosts.hosts().iter().collect();
    let cluster = Cluster::start(hosts).await?;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let secret = work.add(temp_path("wsrc-secret"));
    write_secret(&secret)?;

    // The admin's root: the right set, and a symlink out of it.
    let root = work.add(temp_path("wsrc-root"));
    let set = root.join("m");
    generate(
        &set,
        &GenerateSpec {
            size: 2 << 20,
            seed: 7,
            files: 2,
        },
    )?;
    std::os::unix::fs::symlink("/etc", root.join("escape"))?;
    let digest: Digest = manifest_digest(&set, DEFAULT_CHUNK_SIZE)?;

    let specs: Vec<AgentSpec> = h
        .iter()
        .map(|host| {
            let mut s = AgentSpec::new("wsrc", host, &secret);
            work.add(s.weights_dir.clone());
            work.add(s.socket.clone());
            s.log = Some(work.add(temp_path(&format!("wsrc-{}.log", host.index()))));
            s.extra_args = vec!["--weights-source-root".into(), root.display().to_string()];
            if host.index() == 0 {
                // Host 1's agent dials 7512: it finds no peer serving the set.
                s.extra_args
                    .extend(["--weights-port".into(), "7513".into()]);
            }
            s
        })
        .collect();
    WeightStore::open(&specs[0].weights_dir)?.install_dir(&set, &digest, DEFAULT_CHUNK_SIZE)?;
    let _procs = h
        .iter()
        .zip(&specs)
        .map(|(host, spec)| spawn_agent(host, &cluster.agent_kubeconfig, spec))
        .collect::<Result<Vec<_>>>()?;
    cluster.wait_nodes(&h, Duration::from_secs(60)).await?;

    let escape = root.join("escape");
    for (group, source, why) in [
        (
            "getc",
            "/etc".to_string(),
            "outside the allowed source roots",
        ),
        (
            "glink",
            format!("file://{}/ssl", escape.display()),
            "is a symlink",
        ),
    ] {
        let weights = json!({"source": source, "version": "v1", "digest": digest.to_string()});
        create_group(
            &client,
            group,
            &[member(h[0], 0), member(h[1], 0)],
            Some(weights),
        )
        .await
        .with_context(|| format!("group {group}"))?;
        let (holder, victim) = (format!("{group}-0"), format!("{group}-1"));
        let held = wait_reason(
            &pods,
            &holder,
            "True",
            PodReason::WeightsSynced,
            Duration::from_secs(60),
        )
        .await?;
        ensure!(held.contains("already held"), "{holder}: {held}");
        let refused = wait_reason(
            &pods,
            &victim,
            "False",
            PodReason::WeightsSourceRefused,
            Duration::from_secs(60),
        )
        .await?;
        let named = if group == "getc" {
            "/etc".to_string()
        } else {
            escape.display().to_string()
        };
        ensure!(
            refused.contains(&named) && refused.contains(why),
            "{victim}: {refused}"
        );
        let note = wait_event(
            &client,
            &victim,
            PodReason::WeightsSourceRefused,
            &named,
            Duration::from_secs(10),
        )
        .await?;
        eprintln!("{group}: {victim} refused: {refused} (Event: {note})");
        // The holder is untouched, and nothing of the source reached host 1's store.
        let still = condition(&pods, &holder, PodConditionType::WeightsSynced.as_str()).await;
        ensure!(
            still.as_ref().is_some_and(|c| c.0 == "True"),
            "{holder}: {still:?}"
        );
        ensure!(
            entries(&specs[1].weights_dir, "staging").is_empty()
                && entries(&specs[1].weights_dir, "versions").is_empty(),
            "host 1's store holds {:?} / {:?}",
            entries(&specs[1].weights_dir, "staging"),
            entries(&specs[1].weights_dir, "versions")
        );
        let link = specs[0]
            .weights_dir
            .join(format!("groups/{NS}_{group}/current"));
        let l = link.clone();
        let on_disk =
            tokio::task::spawn_blocking(move || manifest_digest(&l, DEFAULT_CHUNK_SIZE)).await??;
        ensure!(on_disk == digest, "{} holds {on_disk}", link.display());
    }
    Ok(())
}
