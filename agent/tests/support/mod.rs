//! Shared fixtures for the tests that run the real `hcomm-agent` binary on simulated hosts
//! against a real API server: the control plane with the chart's RBAC, agents started
//! with a real shared-secret file, groups/rank tables/Pods as the operator would write
//! them, and condition/Event waits (each bounded by a deadline).
#![allow(dead_code)] // each test file uses a different subset

pub mod admission;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hcomm_e2e::controlplane::ControlPlane;
use hcomm_e2e::hosts::{HostProcess, SimHost, SimHosts};
use hcomm_e2e::testbed::{AgentArgs, ChartCluster, ChartClusterOptions, wait_nodes_published};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

pub const NS: &str = "default";
pub const CONNECT_TIMEOUT_S: u64 = 3;

/// A per-test temporary path (this process, `label`).
pub fn temp_path(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hcomm-it-{label}-{}", std::process::id()))
}

/// Writes a random shared secret (mode 0600), as the chart's Secret would hold it.
pub fn write_secret(path: &Path) -> Result<()> {
    Ok(hcomm_e2e::testbed::write_secret(path)?)
}

/// The HCCL rank-table JSON for `(server id, host ip, device id)` in rank order, as the
/// operator publishes it for a CPU (tcp) group: no `device_ip` (these hosts have no NPU
/// addresses; a `device_ip` would ask the agent to check the NPU network).
pub fn rank_table(entries: &[(String, String, i32)]) -> String {
    let mut servers: Vec<serde_json::Value> = Vec::new();
    for (rank, (server, ip, dev)) in entries.iter().enumerate() {
        servers.push(json!({"server_id": server, "host_ip": ip, "device": [
            {"device_id": dev.to_string(), "rank_id": rank.to_string()}]}));
    }
    json!({"version": "1.0", "server_count": servers.len().to_string(), "status": "completed",
           "server_list": servers})
    .to_string()
}

/// The group's random Secret in the release namespace, as the operator makes it (issue 17):
/// the agents authenticate the group's domain and weight sync with it.
pub async fn create_group_secret(client: &kube::Client, g: &hcomm_crds::HcommGroup) -> Result<()> {
    use hcomm_crds::contract::secrets;
    let uid = g.metadata.uid.clone().context("group without a UID")?;
    let bytes: [u8; secrets::SECRET_LEN] = rand::random();
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {
            "name": secrets::secret_name(&uid),
            "namespace": hcomm_e2e::chart::RELEASE_NAMESPACE,
            "labels": {
                (secrets::LABEL_SECRET_GROUP_NAMESPACE): NS,
                (secrets::LABEL_SECRET_GROUP_NAME): g.metadata.name.clone(),
                (secrets::LABEL_SECRET_GROUP_UID): uid,
            }
        },
        "data": {(secrets::SECRET_KEY): k8s_openapi::ByteString(bytes.to_vec())}
    }))?;
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        client.clone(),
        hcomm_e2e::chart::RELEASE_NAMESPACE,
    )
    .create(&PostParams::default(), &secret)
    .await
    .context("create the group's Secret")?;
    Ok(())
}

/// Creates a group at epoch 1 with its rank table, status and one Pod per member, as the
/// operator would.
pub async fn create_group(
    client: &kube::Client,
    name: &str,
    members: &[(String, String, i32)],
    weights: Option<serde_json::Value>,
) -> Result<()> {
    let groups: Api<hcomm_crds::HcommGroup> = Api::namespaced(client.clone(), NS);
    let g: hcomm_crds::HcommGroup = serde_json::from_value(json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
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
    let g = groups
        .create(&PostParams::default(), &g)
        .await
        .context("create group")?;
    create_group_secret(client, &g).await?;
    // Named as the operator names it (`<group>-rank-table`, rewritten in place per epoch):
    // the agent reads it by that name, never through the group's status.
    let cm_name = format!("{name}-rank-table");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": cm_name, "namespace": NS},
        "data": {hcomm_crds::rank_table::KEY_RANK_TABLE: rank_table(members), "epoch": "1"}
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

pub async fn create_pod(
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
            "labels": {hcomm_crds::contract::LABEL_GROUP: name, hcomm_crds::contract::LABEL_MEMBER_INDEX: i.to_string(), hcomm_crds::contract::LABEL_RANK: i.to_string()},
            "annotations": {hcomm_crds::contract::ANNOTATION_DEVICES: dev.to_string()}},
        "spec": {"nodeName": node, "readinessGates": [{"conditionType": hcomm_crds::contract::PodConditionType::MemberReady.as_str()}],
            "containers": [{"name": "worker", "image": "worker", "env": [
                {"name": hcomm_crds::contract::env::RANK_ID, "value": i.to_string()},
                {"name": hcomm_crds::contract::env::RANK_SIZE, "value": world.to_string()},
                {"name": hcomm_crds::contract::env::LOCAL_RANK_SIZE, "value": "1"},
                {"name": hcomm_crds::contract::env::VISIBLE_DEVICES, "value": dev.to_string()},
                {"name": hcomm_crds::contract::env::EPOCH, "value": epoch.to_string()}]}]}
    }))?;
    pods.create(&PostParams::default(), &pod)
        .await
        .context("create pod")?;
    Ok(())
}

/// Scales a group to `members` at `epoch`: the rank table rewritten, the group status, and
/// a Pod for each member from `first_new` on.
pub async fn scale_group(
    client: &kube::Client,
    name: &str,
    members: &[(String, String, i32)],
    epoch: u64,
    first_new: usize,
) -> Result<()> {
    let cm_name = format!("{name}-rank-table");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    cms.patch(
        &cm_name,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "data": {hcomm_crds::rank_table::KEY_RANK_TABLE: rank_table(members), "epoch": epoch.to_string()}
        })),
    )
    .await
    .context("rewrite rank table")?;
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

/// A Pod condition as (status, reason, message).
pub async fn condition(
    pods: &Api<Pod>,
    pod: &str,
    type_: &str,
) -> Option<(String, String, String)> {
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

/// Waits until a Pod condition has `status`; returns (reason, message).
pub async fn wait_condition(
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

/// Warning Events (events.k8s.io/v1) about `pod`, as (reason, note).
pub async fn pod_events(client: &kube::Client, pod: &str) -> Result<Vec<(String, String)>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), NS);
    Ok(events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

/// One request/response on the agent's local worker API.
pub fn ask(sock: &Path, line: &str) -> Result<serde_json::Value> {
    let mut s = UnixStream::connect(sock).with_context(|| format!("connect {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("{line}\n").as_bytes())?;
    let mut out = String::new();
    BufReader::new(s).read_line(&mut out)?;
    Ok(serde_json::from_str(&out)?)
}

/// A control plane on the hosts' management gateway with the CRDs, a (kwok) Node per host
/// and the chart installed; plus a kubeconfig acting as the chart's agent ServiceAccount,
/// so the agents run with exactly the RBAC the chart grants.
pub struct Cluster {
    pub cp: ControlPlane,
    pub client: kube::Client,
    pub agent_kubeconfig: PathBuf,
}

impl Cluster {
    /// The kit's cluster (`hcomm_e2e::testbed::ChartCluster`) without controllers: the
    /// tests write member Pods themselves, as the operator would.
    pub async fn start(hosts: &SimHosts) -> Result<Cluster> {
        let cluster = ChartCluster::start(hosts, ChartClusterOptions::default())
            .await
            .context("control plane with the chart")?;
        let client = cluster.cp.client().await?;
        Ok(Cluster {
            cp: cluster.cp,
            client,
            agent_kubeconfig: cluster.agent_kubeconfig,
        })
    }

    /// Waits until every host's agent published its `HcommNode` with its data address.
    pub async fn wait_nodes(&self, hosts: &[&SimHost], within: Duration) -> Result<()> {
        Ok(wait_nodes_published(self.client.clone(), hosts, within, "").await?)
    }
}

/// How one agent is started.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub socket: PathBuf,
    pub weights_dir: PathBuf,
    pub secret_file: PathBuf,
    /// Where its stderr goes (else nowhere, unless `HCOMM_AGENT_TEST_LOGS` is set).
    pub log: Option<PathBuf>,
    pub extra_args: Vec<String>,
}

impl AgentSpec {
    /// Socket and weights store named after `label` and the host index; the store is not
    /// touched (callers may pre-seed it).
    pub fn new(label: &str, host: &SimHost, secret_file: &Path) -> AgentSpec {
        AgentSpec {
            socket: temp_path(&format!("{label}-{}.sock", host.index())),
            weights_dir: temp_path(&format!("{label}-weights-{}", host.index())),
            secret_file: secret_file.to_path_buf(),
            log: None,
            extra_args: Vec::new(),
        }
    }
}

/// Starts `hcomm-agent run` inside `h` with the shared secret file and fast test timings.
pub fn spawn_agent(h: &SimHost, kubeconfig: &Path, spec: &AgentSpec) -> Result<HostProcess> {
    let _ = std::fs::remove_file(&spec.socket);
    let mut cmd = h.command(env!("CARGO_BIN_EXE_hcomm-agent"));
    let args = AgentArgs {
        extra: spec.extra_args.clone(),
        ..AgentArgs::for_host(h, &spec.socket, &spec.weights_dir, &spec.secret_file)
    };
    cmd.args(args.to_args())
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info,kube_client=warn,hyper=warn")
        .stdout(Stdio::null());
    if let Some(log) = &spec.log {
        cmd.stderr(std::fs::File::create(log)?);
    } else if std::env::var_os("HCOMM_AGENT_TEST_LOGS").is_none() {
        cmd.stderr(Stdio::null());
    }
    Ok(h.spawn_command(cmd)?)
}

/// The files one test makes (the shared probe secret, each agent's socket, Pod sockets,
/// store and log, anything else it names), removed when dropped, pass or fail.
pub struct TestFiles {
    label: String,
    /// The shared probe secret file, written at [`TestFiles::new`].
    pub secret: PathBuf,
    paths: Vec<PathBuf>,
}

impl TestFiles {
    /// Files named after `label`; writes the shared secret.
    pub fn new(label: &str) -> Result<TestFiles> {
        let secret = temp_path(&format!("{label}-secret"));
        let files = TestFiles {
            label: label.to_owned(),
            secret: secret.clone(),
            paths: vec![secret],
        };
        write_secret(&files.secret)?;
        Ok(files)
    }

    /// A path of this test named `what`, removed at the end.
    pub fn path(&mut self, what: &str) -> PathBuf {
        let p = temp_path(&format!("{}-{what}", self.label));
        self.paths.push(p.clone());
        p
    }

    /// The agent of `host`: its socket, Pod sockets, store and log (stderr) are this
    /// test's files.
    pub fn agent(&mut self, host: &SimHost) -> AgentSpec {
        let mut spec = AgentSpec::new(&self.label, host, &self.secret);
        let log = self.path(&format!("{}.log", host.index()));
        spec.log = Some(log);
        self.paths.extend([
            spec.socket.clone(),
            spec.socket.with_extension("pods"),
            spec.weights_dir.clone(),
        ]);
        spec
    }
}

impl Drop for TestFiles {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_dir_all(p);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A one-device rank-table entry for `h`'s device 0, named and addressed as the operator
/// names it: (server id, host ip, device id).
pub fn member(h: &SimHost) -> (String, String, i32) {
    (h.name().to_owned(), h.data_ip().to_string(), 0)
}

/// Waits until `pod`'s condition `type_` is `status` with `reason`; returns its message.
pub async fn wait_reason(
    pods: &Api<Pod>,
    pod: &str,
    type_: &str,
    status: &str,
    reason: &str,
    within: Duration,
) -> Result<String> {
    let deadline = Instant::now() + within;
    loop {
        let now = condition(pods, pod, type_).await;
        if let Some((s, r, m)) = &now
            && s == status
            && r == reason
        {
            return Ok(m.clone());
        }
        if Instant::now() > deadline {
            bail!("{pod}: {type_} not {status} ({reason}) within {within:?}; now {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until a Warning Event about `pod` has one of `reasons` and a note containing
/// `needle`; returns the note.
pub async fn wait_event(
    client: &kube::Client,
    pod: &str,
    reasons: &[&str],
    needle: &str,
    within: Duration,
) -> Result<String> {
    let deadline = Instant::now() + within;
    loop {
        let events = pod_events(client, pod).await?;
        if let Some((_, note)) = events
            .iter()
            .find(|(r, note)| reasons.contains(&r.as_str()) && note.contains(needle))
        {
            return Ok(note.clone());
        }
        if Instant::now() > deadline {
            bail!("no Event {reasons:?} naming {needle:?} on {pod} within {within:?}: {events:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
