//! The real agent binary on simulated hosts (network namespaces with separate data and
//! management subnets) against a real API server: a host whose data link is cut is refused
//! with the NIC message within the connect timeout; members join and turn their readiness
//! gate True; a drain waits for the in-flight count reported over the local API; a group
//! with `spec.weights`: the first member imports the declared source (digest-checked), a
//! later member fetches the set from it over the data network, and a wrong digest is
//! refused with `DigestMismatch`.
//!
//! Needs root (namespaces) and the cached control-plane binaries: without root it is
//! reported as ignored with the reason (`hcomm_e2e::harness`).

mod support;

use std::time::{Duration, Instant};

use anyhow::Result;
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::{HostProcess, SimHosts, SimHostsOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::admission::{accept_agent_status_writes, refuse_agent_status_writes};
use support::*;

/// A small deterministic weights directory (a few MiB, several chunks).
fn make_weights(dir: &std::path::Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("shards"))?;
    let big: Vec<u8> = (0..(5u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("shards/model-00001.bin"), &big)?;
    let small: Vec<u8> = (0..(1u32 << 20) + 17).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.join("shards/model-00002.bin"), &small)?;
    std::fs::write(dir.join("config.json"), br#"{"layers": 2}"#)?;
    Ok(())
}

struct Agents {
    _procs: Vec<HostProcess>,
    specs: Vec<AgentSpec>,
}

impl Agents {
    fn socket(&self, i: usize) -> &std::path::Path {
        &self.specs[i].socket
    }

    /// Each simulated host's weight store (they share one file system).
    fn weights_dir(&self, i: usize) -> &std::path::Path {
        &self.specs[i].weights_dir
    }
}

/// The weights step's declared source directory.
fn weights_src() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("hcomm-it-weights-src-{}", std::process::id()))
}

fn start_agents(hosts: &SimHosts, cluster: &Cluster, secret: &std::path::Path) -> Result<Agents> {
    let mut procs = Vec::new();
    let mut specs = Vec::new();
    for h in hosts.hosts() {
        let mut spec = AgentSpec::new("cluster", h, secret);
        // The weights step's declared source is the only local source allowed.
        spec.extra_args = vec![
            "--weights-source-root".into(),
            weights_src().display().to_string(),
        ];
        let _ = std::fs::remove_dir_all(&spec.weights_dir);
        procs.push(spawn_agent(h, &cluster.agent_kubeconfig, &spec)?);
        specs.push(spec);
    }
    Ok(Agents {
        _procs: procs,
        specs,
    })
}

fn main() {
    harness::run(vec![Test::new(
        "a_blackholed_data_link_is_refused_and_members_join_then_drain_after_in_flight_reaches_zero",
        Needs::NetworkNamespaces,
        || {
            let hosts = SimHosts::create(SimHostsOptions::new(3))?;
            harness::block_on(Duration::from_secs(400), scenario(&hosts))
        },
    )])
    .exit();
}

async fn scenario(hosts: &SimHosts) -> Result<()> {
    // The agents run with exactly the RBAC the Helm chart grants (installed with the real
    // helm; the agents' kubeconfig acts as the chart's agent ServiceAccount) and, like the
    // chart's, with a real shared-secret file: whatever the chart forgot fails this scenario.
    let cluster = Cluster::start(hosts).await?;
    let client = cluster.client.clone();
    let secret = temp_path("cluster-secret");
    write_secret(&secret)?;
    let agents = start_agents(hosts, &cluster, &secret)?;
    let all: Vec<_> = hosts.hosts().iter().collect();
    cluster.wait_nodes(&all, Duration::from_secs(60)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // 1. host-2's data link is blackholed (carrier up, nothing answers): its member is
    //    refused, naming the NIC and the peers. (A link cut outright is seen at once as a
    //    NIC that is down: `NoDataNic`, the verification reading the interfaces afresh.)
    hosts.blackhole_data(2)?;
    let members: Vec<(String, String, i32)> = hosts
        .hosts()
        .iter()
        .map(|h| (h.name().to_owned(), h.data_ip().to_string(), 1))
        .collect();
    let created = Instant::now();
    create_group(&client, "gcut", &members, None).await?;
    let (reason, message) = wait_condition(
        &pods,
        "gcut-2",
        hcomm_crds::contract::POD_VERIFIED,
        "False",
        Duration::from_secs(CONNECT_TIMEOUT_S + 10),
    )
    .await?;
    let took = created.elapsed();
    assert_eq!(
        reason,
        hcomm_crds::contract::PodReason::NicUnreachable.as_str(),
        "{message}"
    );
    for part in [
        "data0",
        hosts.hosts()[0].name(),
        &hosts.hosts()[0].data_ip().to_string(),
        "mgmt0",
    ] {
        assert!(message.contains(part), "{part:?} missing in {message}");
    }
    assert!(
        took < Duration::from_secs(CONNECT_TIMEOUT_S + 8),
        "refused after {took:?}"
    );
    assert_ne!(
        condition(&pods, "gcut-2", hcomm_crds::contract::POD_MEMBER_READY)
            .await
            .map(|c| c.0),
        Some("True".into())
    );
    hosts.restore_data(2)?;
    pods.delete_collection(
        &Default::default(),
        &kube::api::ListParams::default()
            .labels(&format!("{}=gcut", hcomm_crds::contract::LABEL_GROUP)),
    )
    .await?;

    // 2. Two healthy members join and open their readiness gates.
    let ok: Vec<(String, String, i32)> = hosts.hosts()[..2]
        .iter()
        .map(|h| (h.name().to_owned(), h.data_ip().to_string(), 0))
        .collect();
    create_group(&client, "gok", &ok, None).await?;
    for p in ["gok-0", "gok-1"] {
        wait_condition(
            &pods,
            p,
            hcomm_crds::contract::POD_VERIFIED,
            "True",
            Duration::from_secs(30),
        )
        .await?;
        wait_condition(
            &pods,
            p,
            hcomm_crds::contract::POD_WEIGHTS_SYNCED,
            "True",
            Duration::from_secs(30),
        )
        .await?;
        wait_condition(
            &pods,
            p,
            hcomm_crds::contract::POD_MEMBER_READY,
            "True",
            Duration::from_secs(60),
        )
        .await?;
    }
    let a = ask(agents.socket(1), r#"{"op":"assignment","pod":"gok-1"}"#)?;
    assert_eq!(a["assignment"]["rank"], 1, "{a}");
    assert_eq!(a["assignment"]["interface"], "data0", "{a}");

    // 3. Drain waits for the worker's in-flight requests.
    assert_eq!(
        ask(
            agents.socket(1),
            r#"{"op":"report_inflight","pod":"gok-1","n":2}"#
        )?["ok"],
        true
    );
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    pods.patch(
        "gok-1",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {(hcomm_crds::contract::ANNOTATION_DRAIN_REQUESTED): now}}
        })),
    )
    .await?;
    wait_condition(
        &pods,
        "gok-1",
        hcomm_crds::contract::POD_MEMBER_READY,
        "False",
        Duration::from_secs(10),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_ne!(
        condition(&pods, "gok-1", hcomm_crds::contract::POD_DRAINED)
            .await
            .map(|c| c.0),
        Some("True".into()),
        "drained while 2 requests were in flight"
    );
    assert_eq!(
        ask(
            agents.socket(1),
            r#"{"op":"report_inflight","pod":"gok-1","n":0}"#
        )?["ok"],
        true
    );
    let (reason, _) = wait_condition(
        &pods,
        "gok-1",
        hcomm_crds::contract::POD_DRAINED,
        "True",
        Duration::from_secs(10),
    )
    .await?;
    assert_eq!(reason, "Drained");
    // The other member kept its gate.
    assert_eq!(
        condition(&pods, "gok-0", hcomm_crds::contract::POD_MEMBER_READY)
            .await
            .map(|c| c.0),
        Some("True".into())
    );

    // 4. Weights: the first member imports the declared source (digest-checked), a later
    //    member fetches the set from it over the data network, a wrong digest is refused.
    let src = weights_src();
    make_weights(&src)?;
    let digest =
        hcomm_agent::weights::manifest_digest(&src, hcomm_agent::weights::DEFAULT_CHUNK_SIZE)?;
    let weights =
        |d: String| json!({"source": src.display().to_string(), "version": "it-v1", "digest": d});
    let h = hosts.hosts();
    let member = |i: usize| (h[i].name().to_owned(), h[i].data_ip().to_string(), 1);
    create_group(
        &client,
        "gw",
        &[member(0)],
        Some(weights(digest.to_string())),
    )
    .await?;
    let (reason, message) = wait_condition(
        &pods,
        "gw-0",
        hcomm_crds::contract::POD_WEIGHTS_SYNCED,
        "True",
        Duration::from_secs(60),
    )
    .await?;
    assert!(
        message.contains("imported from source"),
        "{reason}: {message}"
    );
    scale_group(&client, "gw", &[member(0), member(1)], 2, 1).await?;
    let (reason, message) = wait_condition(
        &pods,
        "gw-1",
        hcomm_crds::contract::POD_WEIGHTS_SYNCED,
        "True",
        Duration::from_secs(60),
    )
    .await?;
    assert!(
        message.contains("fetched from peers")
            && message.contains(&format!("{}:7512", h[0].data_ip())),
        "{reason}: {message}"
    );
    // The member reads its group's own link; versions are shared under versions/<hex>.
    let current = agents.weights_dir(1).join("groups/default_gw/current");
    let a = ask(agents.socket(1), r#"{"op":"assignment","pod":"gw-1"}"#)?;
    assert_eq!(
        a["assignment"]["weights_path"],
        current.display().to_string(),
        "{a}"
    );
    for f in [
        "shards/model-00001.bin",
        "shards/model-00002.bin",
        "config.json",
    ] {
        assert!(
            std::fs::read(current.join(f))? == std::fs::read(src.join(f))?,
            "{f} differs after the fetch"
        );
    }
    let wrong = hcomm_agent::weights::Digest::of(b"not these weights").to_string();
    create_group(&client, "gbad", &[member(2)], Some(weights(wrong))).await?;
    let (reason, message) = wait_condition(
        &pods,
        "gbad-0",
        hcomm_crds::contract::POD_WEIGHTS_SYNCED,
        "False",
        Duration::from_secs(60),
    )
    .await?;
    assert_eq!(
        reason,
        hcomm_crds::contract::PodReason::DigestMismatch.as_str(),
        "{message}"
    );
    assert!(message.contains(&digest.to_string()), "{message}");
    assert!(
        !agents
            .weights_dir(2)
            .join("groups/default_gbad/current")
            .exists()
    );
    assert!(!agents.weights_dir(2).join("current").exists());
    let _ = std::fs::remove_dir_all(&src);

    // 5. Pod condition writes the API server refuses land once it accepts them again: the
    //    agent keeps trying (`member::condition_writer`). It used to try three times within
    //    a second and go on, leaving a joined member out of traffic.
    refuse_agent_status_writes(&cluster, "gref").await?;
    create_group(
        &client,
        "gref",
        &[(h[2].name().to_owned(), h[2].data_ip().to_string(), 0)],
        None,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let refused = condition(&pods, "gref-0", hcomm_crds::contract::POD_VERIFIED).await;
    assert_eq!(refused, None, "the refusal held for 10 s");
    accept_agent_status_writes(&client, "gref").await?;
    wait_condition(
        &pods,
        "gref-0",
        hcomm_crds::contract::POD_MEMBER_READY,
        "True",
        Duration::from_secs(45),
    )
    .await?;

    // 6. `diagnose` on host-0 finds the injected faults: socketIfname pointing at the
    //    management NIC, a device mapping mismatch, and host-1's cut data link.
    hosts.cut_data(1)?;
    let h0 = &hosts.hosts()[0];
    let out = h0
        .command(env!("CARGO_BIN_EXE_hcomm-agent"))
        .args([
            "diagnose",
            "--format",
            "tsv",
            "--socket-ifname",
            "mgmt",
            "--management-interface",
            "mgmt0",
            "--cpu-devices",
            "2",
            "--peers",
            &format!("{}={}", hosts.hosts()[1].name(), hosts.hosts()[1].data_ip()),
            "--devices",
            "0",
            "--visible-devices",
            "1",
            "--probe-timeout-ms",
            "1500",
            "--log-path",
            "/nonexistent",
            "--probe-secret-file",
            &secret.display().to_string(),
        ])
        .env_remove(hcomm_crds::contract::env::SOCKET_IFNAME)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let row = |id: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{id}\t")))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        row("nic-choice").contains("FAIL") && row("nic-choice").contains("mgmt0"),
        "{text}"
    );
    assert!(
        row("device-mapping").contains("FAIL")
            && row("device-mapping").contains("ASCEND_VISIBLE_DEVICES=1"),
        "{text}"
    );
    assert!(
        row("link-down").contains("FAIL") && row("link-down").contains("peer links do not answer"),
        "{text}"
    );
    assert!(
        row("reachability").contains(hosts.hosts()[1].name()),
        "{text}"
    );
    hosts.restore_data(1)?;
    let specs = agents.specs.clone();
    drop(agents);
    for s in specs {
        let _ = std::fs::remove_file(&s.socket); // killed agents cannot remove their own
        let _ = std::fs::remove_dir_all(&s.weights_dir);
    }
    let _ = std::fs::remove_file(&secret);
    drop(cluster);
    Ok(())
}
