//! Issue 17, point 2, against real agents and a real API server: the agents read their
//! groups' Secrets (as the operator makes them, in the release namespace) as the chart's
//! agent ServiceAccount, and a node's chunk server serves a group only its own weights.
//!
//! Two hosts; host 0's store holds set A (group `ga`) and set B (group `gb`). Group `ga`
//! has a member on each host: host 1's member fetches A from host 0 with `ga`'s secret.
//! Then, from outside (the test process, as an attacker on the data network who knows
//! what a member of `gb` knows): `gb`'s valid identity and secret asking host 0 for A →
//! refused, `not authorized`; `ga`'s name with `gb`'s secret, or with the old
//! UID-derived secret → refused; `ga` with a made-up UID (a deleted incarnation) →
//! refused. After the attacks `ga`'s members are still synced and `ga`'s own secret still
//! fetches A from host 0: nothing lost.
//! Needs root (namespaces) and the cached control-plane binaries: without root it is
//! reported as ignored with the reason (`hcomm_e2e::harness`).

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hcomm_agent::weights::generate::{GenerateSpec, generate};
use hcomm_agent::weights::{
    DEFAULT_CHUNK_SIZE, Digest, FetchRequest, GroupId, GroupSecret, Progress, WeightStore, fetch,
    manifest_digest,
};
use hcomm_crds::contract::{PodConditionType, secrets};
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::{SimHost, SimHosts, SimHostsOptions};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use serde_json::json;
use support::*;

fn main() {
    harness::run(vec![Test::new(
        "a_member_of_another_group_a_wrong_secret_or_a_deleted_incarnation_gets_no_weights_and_the_group_keeps_them",
        Needs::NetworkNamespaces,
        || {
            let hosts = SimHosts::create(SimHostsOptions::new(2))?;
            harness::block_on(Duration::from_secs(180), scenario(&hosts))
        },
    )])
    .exit();
}

/// The group's identity and the secret the operator (here: the stand-in) made for it.
async fn identity(client: &kube::Client, group: &str) -> Result<(GroupId, GroupSecret)> {
    let g = Api::<hcomm_crds::HcommGroup>::namespaced(client.clone(), NS)
        .get(group)
        .await?;
    let uid = g.metadata.uid.context("no UID")?;
    let s = Api::<Secret>::namespaced(client.clone(), hcomm_e2e::chart::RELEASE_NAMESPACE)
        .get(&secrets::secret_name(&uid))
        .await?;
    let bytes = s
        .data
        .unwrap_or_default()
        .remove(secrets::SECRET_KEY)
        .context("no key")?
        .0;
    Ok((GroupId::new(NS, group, &uid), GroupSecret::new(bytes)))
}

async fn wait_synced(pods: &Api<Pod>, pod: &str, within: Duration) -> Result<String> {
    let type_ = PodConditionType::WeightsSynced.as_str();
    Ok(wait_condition(pods, pod, type_, "True", within).await?.1)
}

/// Fetches `digest` from `source` into a fresh store, as `group` with `secret`.
async fn fetch_as(
    source: SocketAddr,
    digest: Digest,
    group: &GroupId,
    secret: &GroupSecret,
    dir: &std::path::Path,
) -> Result<(), hcomm_agent::weights::WeightsError> {
    let _ = std::fs::remove_dir_all(dir);
    let store = WeightStore::open(dir)?;
    let mut req = FetchRequest::new(digest, vec![source], store, secret.clone());
    req.group = group.clone();
    req.timeouts.connect = Duration::from_secs(3);
    req.timeouts.stall = Duration::from_secs(20);
    fetch(req, Progress::new()).await.map(|_| ())
}

async fn scenario(hosts: &SimHosts) -> Result<()> {
    let h: Vec<&SimHost> = hosts.hosts().iter().collect();
    let cluster = Cluster::start(hosts).await?;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut files = TestFiles::new("wsec")?;
    let sets = files.path("sets");
    let fetched = files.path("fetched");
    let mut digests = Vec::new();
    for (name, seed) in [("a", 11), ("b", 12)] {
        let dir = sets.join(name);
        generate(
            &dir,
            &GenerateSpec {
                size: 2 << 20,
                seed,
                files: 2,
            },
        )?;
        digests.push((dir.clone(), manifest_digest(&dir, DEFAULT_CHUNK_SIZE)?));
    }
    let (set_a, set_b) = (digests[0].1, digests[1].1);
    let specs: Vec<AgentSpec> = h.iter().map(|host| files.agent(host)).collect();
    let store0 = WeightStore::open(&specs[0].weights_dir)?;
    for (dir, d) in &digests {
        store0.install_dir(dir, d, DEFAULT_CHUNK_SIZE)?;
    }
    let _procs = h
        .iter()
        .zip(&specs)
        .map(|(host, spec)| spawn_agent(host, &cluster.agent_kubeconfig, spec))
        .collect::<Result<Vec<_>>>()?;
    cluster.wait_nodes(&h, Duration::from_secs(60)).await?;

    // The legitimate path: ga's member on host 1 fetches A from host 0 with ga's secret.
    let weights = |d: Digest| json!({"source": "", "version": "v1", "digest": d.to_string()});
    create_group(
        &client,
        "ga",
        &[member(h[0]), member(h[1])],
        Some(weights(set_a)),
    )
    .await?;
    create_group(&client, "gb", &[member(h[0])], Some(weights(set_b))).await?;
    let held = wait_synced(&pods, "ga-0", Duration::from_secs(60)).await?;
    let got = wait_synced(&pods, "ga-1", Duration::from_secs(60)).await?;
    ensure!(got.contains("fetched from peers"), "ga-1: {got}");
    wait_synced(&pods, "gb-0", Duration::from_secs(60)).await?;
    eprintln!("ga-0: {held}\nga-1: {got}");

    let (ga, ga_secret) = identity(&client, "ga").await?;
    let (gb, gb_secret) = identity(&client, "gb").await?;
    ensure!(ga_secret != gb_secret, "two groups share a secret");
    let source = SocketAddr::new(h[0].data_ip().into(), 7512);

    // A member of gb (valid identity, valid secret) asks for ga's weights.
    let e = fetch_as(source, set_a, &gb, &gb_secret, &fetched)
        .await
        .expect_err("gb must not get ga's weights")
        .to_string();
    ensure!(
        e.contains("not authorized") && e.contains("default/gb"),
        "the refusal names the cause and the group: {e}"
    );
    // ga's name with gb's secret, or with the secret the agents used to derive from the UID.
    let derived = GroupSecret::new(format!("hcomm-group-uid:{}", ga.uid).into_bytes());
    for wrong in [&gb_secret, &derived] {
        let e = fetch_as(source, set_a, &ga, wrong, &fetched)
            .await
            .expect_err("a wrong secret must be refused");
        ensure!(e.category() == "auth", "{e}");
    }
    // A member of a deleted incarnation of ga (another UID), even with ga's secret.
    let stale = GroupId::new(NS, "ga", "00000000-0000-0000-0000-000000000000");
    let e = fetch_as(source, set_a, &stale, &ga_secret, &fetched)
        .await
        .expect_err("a deleted incarnation must be refused");
    ensure!(e.category() == "auth", "{e}");
    ensure!(
        WeightStore::open(&fetched)?.current()?.is_none(),
        "nothing reached the attacker's store"
    );

    // Nothing lost: ga's members are still synced, and ga's own secret still fetches A.
    for pod in ["ga-0", "ga-1", "gb-0"] {
        wait_synced(&pods, pod, Duration::from_secs(5)).await?;
    }
    fetch_as(source, set_a, &ga, &ga_secret, &fetched)
        .await
        .context("ga's own fetch after the attacks")?;
    ensure!(WeightStore::open(&fetched)?.current()? == Some(set_a));
    Ok(())
}
