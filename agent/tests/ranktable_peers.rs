//! A forged rank-table ConfigMap (the tenant's namespace holds it, so the tenant can
//! write it) tries to point the real agent at the node itself, at a link-local service,
//! through a device id that becomes a port at the kubelet's port, or at a routable host
//! that runs no member of the group: the member reports
//! `hcomm.io/verified=False (PeerRefused)` naming the forged server and why, with an Event
//! (`VerificationFailed`, carrying that message), before anything is dialled. A member
//! verified against a clean table and handed a forged one at a later epoch refuses that
//! epoch the same way and keeps serving at its own.
//!
//! One host; each forged group lists the host's member and a second server `forged` (with
//! a Pod on a node `forged` that runs no agent) whose `host_ip` or device id is the
//! attack. Needs root (namespaces) and the cached control-plane binaries: without root it
//! is reported as ignored with the reason (`hcomm_e2e::harness`).

mod support;

use std::time::Duration;

use anyhow::{Result, ensure};
use hcomm_crds::contract::{PodConditionType, PodReason};
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::{SimHost, SimHosts, SimHostsOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use support::*;

fn main() {
    harness::run(vec![Test::new(
        "a_forged_rank_table_pointing_at_loopback_link_local_a_node_port_or_a_stranger_is_refused_at_every_epoch",
        Needs::NetworkNamespaces,
        || {
            let hosts = SimHosts::create(SimHostsOptions::new(1))?;
            harness::block_on(Duration::from_secs(240), scenario(&hosts))
        },
    )])
    .exit();
}

const WAIT: Duration = Duration::from_secs(60);

fn forged(ip: &str, device: i32) -> (String, String, i32) {
    ("forged".to_owned(), ip.to_owned(), device)
}

async fn scenario(hosts: &SimHosts) -> Result<()> {
    let h: &SimHost = &hosts.hosts()[0];
    let cluster = Cluster::start(hosts).await?;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut files = TestFiles::new("rtpeers")?;
    let mut spec = files.agent(h);
    // The agent's default comm port base (29600) plus device 250 would be 29850; with
    // base 10000 it would be the kubelet's 10250.
    spec.extra_args = vec!["--comm-port-base".into(), "10000".into()];
    let _agent = spawn_agent(h, &cluster.agent_kubeconfig, &spec)?;
    cluster.wait_nodes(&[h], WAIT).await?;

    let me = member(h);
    let verified = PodConditionType::Verified.as_str();
    let refused = PodReason::PeerRefused.as_str();
    for (group, forged, why) in [
        ("floop", forged("127.0.0.1", 1), "loopback"),
        ("flink", forged("169.254.169.254", 1), "link-local"),
        ("fport", forged("198.18.0.99", 250), "device id 250"),
        // A routable address on the data network, but no member's node publishes it.
        (
            "fhost",
            forged("198.18.0.99", 1),
            "not the address of a node running a member",
        ),
    ] {
        create_group(&client, group, &[me.clone(), forged], None).await?;
        let victim = format!("{group}-0");
        let message = wait_reason(&pods, &victim, verified, "False", refused, WAIT).await?;
        ensure!(
            message.contains("forged") && message.contains(why),
            "{victim}: {message}"
        );
        // The verification Event carries the failing check's message.
        let reasons = [PodReason::VerificationFailed, PodReason::PeerRefused].map(|r| r.as_str());
        wait_event(
            &client,
            &victim,
            &reasons,
            "forged",
            Duration::from_secs(10),
        )
        .await?;
        eprintln!("{group}: {victim} refused: {message}");
    }

    // A later epoch: verified and serving against a clean table, then handed one naming a
    // stranger. The member refuses that epoch before dialling and keeps serving its own.
    let ready = PodConditionType::MemberReady.as_str();
    create_group(&client, "fepoch", std::slice::from_ref(&me), None).await?;
    wait_condition(&pods, "fepoch-0", ready, "True", WAIT).await?;
    scale_group(&client, "fepoch", &[me, forged("198.18.0.99", 1)], 2, 1).await?;
    let joined = PodConditionType::Joined.as_str();
    let rejoin = PodReason::RejoinFailed.as_str();
    let message = wait_reason(&pods, "fepoch-0", joined, "True", rejoin, WAIT).await?;
    ensure!(
        message.contains("epoch 2")
            && message.contains("forged")
            && message.contains("not the address of a node running a member"),
        "fepoch-0: {message}"
    );
    wait_event(
        &client,
        "fepoch-0",
        &[refused],
        "forged",
        Duration::from_secs(10),
    )
    .await?;
    let (reason, _) = wait_condition(&pods, "fepoch-0", ready, "True", WAIT).await?;
    ensure!(
        reason == PodReason::MemberReady.as_str(),
        "fepoch-0 stopped serving: {reason}"
    );
    eprintln!("fepoch: epoch 2 refused, still serving at epoch 1: {message}");
    Ok(())
}
