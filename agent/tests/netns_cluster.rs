//! The real agent binary on simulated hosts (network namespaces with separate data and
//! management subnets) against a real API server: a host whose data link is cut is refused
//! with the NIC message within the connect timeout; members join and turn their readiness
//! gate True; a drain waits for the in-flight count reported over the local API; a group
//! with `spec.weights`: the first member imports the declared source (digest-checked), a
//! later member fetches the set from it over the data network, and a wrong digest is
//! refused with `DigestMismatch`.
//!
//! Needs root (namespaces) and the cached control-plane binaries; skips with a message
//! otherwise.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions};
use hcomm_e2e::hosts::{HostProcess, SimHosts, SimHostsOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "default";
const CONNECT_TIMEOUT_S: u64 = 3;

fn rank_table(entries: &[(String, String, i32)]) -> String {
    // (server id, host ip, device id) in rank order.
    let mut servers: Vec<serde_json::Value> = Vec::new();
    for (rank, (server, ip, dev)) in entries.iter().enumerate() {
        servers.push(json!({"server_id": server, "host_ip": ip, "device": [
            {"device_id": dev.to_string(), "device_ip": ip, "rank_id": rank.to_string()}]}));
    }
    json!({"version": "1.0", "server_count": servers.len().to_string(), "status": "completed",
           "server_list": servers})
    .to_string()
}

async fn create_group(
    client: &kube::Client,
    name: &str,
    members: &[(String, String, i32)],
    weights: Option<serde_json::Value>,
) -> Result<()> {
    let groups: Api<hcomm_crds::HcommGroup> = Api::namespaced(client.clone(), NS);
    let g: hcomm_crds::HcommGroup = serde_json::from_value(json!({
        "apiVersion": "hcomm.io/v1alpha1", "kind": "HcommGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": members.len(), "devicesPerMember": 1,
            "comm": {"backend": "tcp", "connectTimeoutSeconds": CONNECT_TIMEOUT_S, "opTimeoutSeconds": 10},
            "scaling": {"drainTimeoutSeconds": 60},
            // The CRD's subgroup CEL rule fails on an absent list (reported), so send one.
            "subgroups": [{"name": "dp", "scope": "Group"}],
            "weights": weights,
            "template": {"spec": {"containers": [{"name": "worker", "image": "worker"}]}}
        }
    }))?;
    groups
        .create(&PostParams::default(), &g)
        .await
        .context("create group")?;
    let cm_name = format!("{name}-rank-table-1");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": cm_name, "namespace": NS},
        "data": {"rank_table.json": rank_table(members), "epoch": "1"}
    }))?;
    cms.create(&PostParams::default(), &cm)
        .await
        .context("create rank table")?;
    groups
        .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({
            "status": {"replicas": members.len(), "readyReplicas": 0, "epoch": 1, "rankTable": cm_name}
        })))
        .await
        .context("group status")?;
    for (i, (node, _, dev)) in members.iter().enumerate() {
        create_pod(client, name, i, members.len(), node, *dev, 1).await?;
    }
    Ok(())
}

async fn create_pod(
    client: &kube::Client,
    name: &str,
    i: usize,
    world: usize,
    node: &str,
    dev: i32,
    epoch: u64,
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-{i}"), "namespace": NS,
            "labels": {"hcomm.io/group": name, "hcomm.io/member-index": i.to_string(), "hcomm.io/rank": i.to_string()},
            "annotations": {"hcomm.io/devices": dev.to_string()}},
        "spec": {"nodeName": node, "readinessGates": [{"conditionType": "hcomm.io/member-ready"}],
            "containers": [{"name": "worker", "image": "worker", "env": [
                {"name": "RANK_ID", "value": i.to_string()},
                {"name": "RANK_SIZE", "value": world.to_string()},
                {"name": "LOCAL_RANK_SIZE", "value": "1"},
                {"name": "ASCEND_VISIBLE_DEVICES", "value": dev.to_string()},
                {"name": "HCOMM_EPOCH", "value": epoch.to_string()}]}]}
    }))?;
    pods.create(&PostParams::default(), &pod)
        .await
        .context("create pod")?;
    Ok(())
}

/// Scales a group to `members` at `epoch`: a new rank table, the group status, and a Pod
/// for each member from `first_new` on.
async fn scale_group(
    client: &kube::Client,
    name: &str,
    members: &[(String, String, i32)],
    epoch: u64,
    first_new: usize,
) -> Result<()> {
    let cm_name = format!("{name}-rank-table-{epoch}");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": cm_name, "namespace": NS},
        "data": {"rank_table.json": rank_table(members), "epoch": epoch.to_string()}
    }))?;
    cms.create(&PostParams::default(), &cm)
        .await
        .context("create rank table")?;
    let groups: Api<hcomm_crds::HcommGroup> = Api::namespaced(client.clone(), NS);
    groups
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "status": {"replicas": members.len(), "epoch": epoch, "rankTable": cm_name}
            })),
        )
        .await
        .context("group status")?;
    for (i, (node, _, dev)) in members.iter().enumerate().skip(first_new) {
        create_pod(client, name, i, members.len(), node, *dev, epoch).await?;
    }
    Ok(())
}

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

async fn condition(pods: &Api<Pod>, pod: &str, type_: &str) -> Option<(String, String, String)> {
    let p = pods.get_status(pod).await.ok()?;
    p.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        })
}

async fn wait_condition(
    pods: &Api<Pod>,
    pod: &str,
    type_: &str,
    status: &str,
    within: Duration,
) -> Result<(String, String)> {
    let deadline = Instant::now() + within;
    loop {
        if let Some((s, r, m)) = condition(pods, pod, type_).await
            && s == status
        {
            return Ok((r, m));
        }
        if Instant::now() > deadline {
            bail!(
                "{pod}: {type_} did not become {status} within {within:?} (now {:?})",
                condition(pods, pod, type_).await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ask(sock: &PathBuf, line: &str) -> Result<serde_json::Value> {
    let mut s = UnixStream::connect(sock).with_context(|| format!("connect {}", sock.display()))?;
    s.write_all(format!("{line}\n").as_bytes())?;
    let mut out = String::new();
    BufReader::new(s).read_line(&mut out)?;
    Ok(serde_json::from_str(&out)?)
}

/// Each simulated host's weight store (they share one file system).
fn weights_dir(host: usize) -> PathBuf {
    std::env::temp_dir().join(format!("hcomm-it-weights-{}-{host}", std::process::id()))
}

struct Agents {
    _procs: Vec<HostProcess>,
    sockets: Vec<PathBuf>,
}

fn start_agents(hosts: &SimHosts, kubeconfig: &std::path::Path) -> Result<Agents> {
    let mut procs = Vec::new();
    let mut sockets = Vec::new();
    for h in hosts.hosts() {
        let sock = std::env::temp_dir().join(format!(
            "hcomm-it-{}-{}.sock",
            std::process::id(),
            h.index()
        ));
        let weights_dir = weights_dir(h.index());
        let _ = std::fs::remove_dir_all(&weights_dir);
        let mut cmd = h.command(env!("CARGO_BIN_EXE_hcomm-agent"));
        cmd.args([
            "run",
            "--weights-dir",
            &weights_dir.display().to_string(),
            "--weights-port",
            "7512",
            "--node-name",
            h.name(),
            "--data-address",
            &h.data_ip().to_string(),
            "--management-interface",
            h.mgmt_interface(),
            "--cpu-devices",
            "2",
            "--socket",
            &sock.display().to_string(),
            "--metrics-addr",
            "127.0.0.1:0",
            "--poll-interval-ms",
            "300",
            "--retry-backoff-ms",
            "500",
            "--health-interval-secs",
            "1",
            "--shm-min-bytes",
            "1",
        ])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info,kube_client=warn,hyper=warn")
        .stdout(Stdio::null());
        if std::env::var_os("HCOMM_AGENT_TEST_LOGS").is_none() {
            cmd.stderr(Stdio::null());
        }
        procs.push(h.spawn_command(cmd)?);
        sockets.push(sock);
    }
    Ok(Agents {
        _procs: procs,
        sockets,
    })
}

#[test]
fn a_cut_data_link_is_refused_and_members_join_then_drain_after_in_flight_reaches_zero() {
    let hosts = match SimHosts::create(SimHostsOptions::new(3)) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("skipping: cannot create network namespaces: {e}");
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(400), scenario(&hosts))
            .await
            .expect("test deadline")
            .expect("scenario");
    });
}

async fn scenario(hosts: &SimHosts) -> Result<()> {
    let cp = ControlPlane::start(ControlPlaneOptions {
        bind_address: hosts.mgmt_gateway().into(),
        controllers: false,
        ..Default::default()
    })
    .await
    .context("control plane")?;
    cp.install_crds(&hcomm_crds::all_crds()).await?;
    let client = cp.client().await?;
    for h in hosts.hosts() {
        if cp.has_kwok() {
            cp.create_fake_node(h.name(), BTreeMap::new()).await?;
        }
    }
    // The agents run with exactly the RBAC the Helm chart grants: installed with the real
    // helm, and the agents' kubeconfig acts as the chart's agent ServiceAccount. Whatever
    // the chart forgot to grant fails this scenario.
    hcomm_e2e::chart::install(&cp, &["agent.mode=cpu"])?;
    let agent_kubeconfig = hcomm_e2e::chart::kubeconfig_as(&cp, hcomm_e2e::chart::AGENT_USER)?;
    let agents = start_agents(hosts, &agent_kubeconfig)?;
    // Each agent publishes its HcommNode once it is up.
    let nodes: Api<hcomm_crds::HcommNode> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    for h in hosts.hosts() {
        loop {
            if let Ok(Some(n)) = nodes.get_opt(h.name()).await
                && n.status.as_ref().and_then(|s| s.data_address.clone())
                    == Some(h.data_ip().to_string())
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("HcommNode {} not published with its data address", h.name());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // 1. host-2's data link is cut: its member is refused, naming the NIC and the peers.
    hosts.cut_data(2)?;
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
        "hcomm.io/verified",
        "False",
        Duration::from_secs(CONNECT_TIMEOUT_S + 10),
    )
    .await?;
    let took = created.elapsed();
    assert_eq!(reason, "NicUnreachable", "{message}");
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
        condition(&pods, "gcut-2", "hcomm.io/member-ready")
            .await
            .map(|c| c.0),
        Some("True".into())
    );
    hosts.restore_data(2)?;
    pods.delete_collection(
        &Default::default(),
        &kube::api::ListParams::default().labels("hcomm.io/group=gcut"),
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
            "hcomm.io/verified",
            "True",
            Duration::from_secs(30),
        )
        .await?;
        wait_condition(
            &pods,
            p,
            "hcomm.io/weights-synced",
            "True",
            Duration::from_secs(30),
        )
        .await?;
        wait_condition(
            &pods,
            p,
            "hcomm.io/member-ready",
            "True",
            Duration::from_secs(60),
        )
        .await?;
    }
    let a = ask(&agents.sockets[1], r#"{"op":"assignment","pod":"gok-1"}"#)?;
    assert_eq!(a["assignment"]["rank"], 1, "{a}");
    assert_eq!(a["assignment"]["interface"], "data0", "{a}");

    // 3. Drain waits for the worker's in-flight requests.
    assert_eq!(
        ask(
            &agents.sockets[1],
            r#"{"op":"report_inflight","pod":"gok-1","n":2}"#
        )?["ok"],
        true
    );
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    pods.patch(
        "gok-1",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {"hcomm.io/drain-requested": now}}
        })),
    )
    .await?;
    wait_condition(
        &pods,
        "gok-1",
        "hcomm.io/member-ready",
        "False",
        Duration::from_secs(10),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_ne!(
        condition(&pods, "gok-1", "hcomm.io/drained")
            .await
            .map(|c| c.0),
        Some("True".into()),
        "drained while 2 requests were in flight"
    );
    assert_eq!(
        ask(
            &agents.sockets[1],
            r#"{"op":"report_inflight","pod":"gok-1","n":0}"#
        )?["ok"],
        true
    );
    let (reason, _) = wait_condition(
        &pods,
        "gok-1",
        "hcomm.io/drained",
        "True",
        Duration::from_secs(10),
    )
    .await?;
    assert_eq!(reason, "Drained");
    // The other member kept its gate.
    assert_eq!(
        condition(&pods, "gok-0", "hcomm.io/member-ready")
            .await
            .map(|c| c.0),
        Some("True".into())
    );

    // 4. Weights: the first member imports the declared source (digest-checked), a later
    //    member fetches the set from it over the data network, a wrong digest is refused.
    let src = std::env::temp_dir().join(format!("hcomm-it-weights-src-{}", std::process::id()));
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
        "hcomm.io/weights-synced",
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
        "hcomm.io/weights-synced",
        "True",
        Duration::from_secs(60),
    )
    .await?;
    assert!(
        message.contains("fetched from peers")
            && message.contains(&format!("{}:7512", h[0].data_ip())),
        "{reason}: {message}"
    );
    let current = weights_dir(1).join("current");
    let a = ask(&agents.sockets[1], r#"{"op":"assignment","pod":"gw-1"}"#)?;
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
        "hcomm.io/weights-synced",
        "False",
        Duration::from_secs(60),
    )
    .await?;
    assert_eq!(reason, "DigestMismatch", "{message}");
    assert!(message.contains(&digest.to_string()), "{message}");
    assert!(!weights_dir(2).join("current").exists());
    let _ = std::fs::remove_dir_all(&src);

    // 5. `diagnose` on host-0 finds the injected faults: socketIfname pointing at the
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
        ])
        .env_remove("HCCL_SOCKET_IFNAME")
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
    let sockets = agents.sockets.clone();
    drop(agents);
    for s in sockets {
        let _ = std::fs::remove_file(s); // killed agents cannot remove their own
    }
    for i in 0..hosts.hosts().len() {
        let _ = std::fs::remove_dir_all(weights_dir(i));
    }
    drop(cp);
    Ok(())
}
