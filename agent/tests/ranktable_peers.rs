//! A forged rank-table ConfigMap (the tenant's namespace holds it, so the tenant can
//! write it) tries to point the real agent at the node itself, at a link-local service,
//! or — through a device id that becomes a port — at the kubelet's port: the member
//! reports `hcomm.io/verified=False (PeerRefused)` naming the forged server and why, with
//! an Event (`VerificationFailed`, carrying that message), before anything is dialled.
//!
//! One host; each group lists the host's member and a second server `forged` whose
//! `host_ip` or device id is the attack. Needs root (namespaces) and the cached
//! control-plane binaries: without root it is reported as ignored with the reason
//! (`hcomm_e2e::harness`).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use hcomm_crds::contract::{PodConditionType, PodReason};
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::{SimHost, SimHosts, SimHostsOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use support::*;

fn main() {
    harness::run(vec![Test::new(
        "a_forged_rank_table_pointing_at_loopback_link_local_or_a_node_port_is_refused",
        Needs::NetworkNamespaces,
        || {
            let hosts = SimHosts::create(SimHostsOptions::new(1))?;
            harness::block_on(Duration::from_secs(180), scenario(&hosts))
        },
    )])
    .exit();
}

/// Removes the test's files when it ends, pass or fail.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Waits until `pod` is `hcomm.io/verified=False (PeerRefused)`; returns the message.
async fn wait_refused(pods: &Api<Pod>, pod: &str, within: Duration) -> Result<String> {
    let type_ = PodConditionType::Verified.as_str();
    let deadline = Instant::now() + within;
    loop {
        let now = condition(pods, pod, type_).await;
        if let Some((s, r, m)) = &now
            && s == "False"
            && r == PodReason::PeerRefused.as_str()
        {
            return Ok(m.clone());
        }
        if Instant::now() > deadline {
            bail!("{pod}: {type_} not False (PeerRefused) within {within:?}; now {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn scenario(hosts: &SimHosts) -> Result<()> {
    let h: &SimHost = &hosts.hosts()[0];
    let cluster = Cluster::start(hosts).await?;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let secret = temp_path("rtpeers-secret");
    write_secret(&secret)?;
    let mut spec = AgentSpec::new("rtpeers", h, &secret);
    // The agent's default comm port base (29600) plus device 250 would be 29850; with
    // base 10000 it would be the kubelet's 10250.
    spec.extra_args = vec!["--comm-port-base".into(), "10000".into()];
    let _cleanup = Cleanup(vec![
        secret.clone(),
        spec.socket.clone(),
        spec.socket.with_extension("pods"),
        spec.weights_dir.clone(),
    ]);
    let _agent = spawn_agent(h, &cluster.agent_kubeconfig, &spec)?;
    cluster.wait_nodes(&[h], Duration::from_secs(60)).await?;

    let me = (h.name().to_owned(), h.data_ip().to_string(), 0);
    for (group, forged, why) in [
        ("floop", ("forged", "127.0.0.1", 1), "loopback"),
        ("flink", ("forged", "169.254.169.254", 1), "link-local"),
        ("fport", ("forged", "198.18.0.99", 250), "device id 250"),
    ] {
        let forged = (forged.0.to_owned(), forged.1.to_owned(), forged.2);
        create_group(&client, group, &[me.clone(), forged], None).await?;
        let victim = format!("{group}-0");
        let message = wait_refused(&pods, &victim, Duration::from_secs(60)).await?;
        ensure!(
            message.contains("forged") && message.contains(why),
            "{victim}: {message}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = pod_events(&client, &victim).await?;
            if events
                .iter()
                // The verification Event carries the failing check's message.
                .any(|(r, note)| {
                    [PodReason::VerificationFailed, PodReason::PeerRefused]
                        .iter()
                        .any(|x| x.as_str() == r)
                        && note.contains("forged")
                })
            {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "no Event naming the forged server on {victim}: {events:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("{group}: {victim} refused: {message}");
    }
    Ok(())
}
