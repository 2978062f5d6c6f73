//! Test support for the operator against a real control plane: the operator as a child
//! process, a stand-in for the node agent (HcommNode inventories, Pod conditions), one for
//! the Ascend device plugin ([`device_plugin`]), and waits with deadlines.
//! Size: one kit (cluster, stand-ins, operator process, waits) that every operator test
//! binary shares; split, each part would be a module of a few dozen lines.

#![allow(dead_code)]

pub mod device_plugin;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hcomm_crds::contract::{
    LABEL_GROUP, POD_DRAINED, POD_JOINED, POD_MEMBER_READY, POD_VERIFIED, POD_WEIGHTS_SYNCED,
};
use hcomm_crds::{HcommGroup, HcommNode};
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Deadline of one awaited condition.
pub const WAIT: Duration = Duration::from_secs(60);
/// One control plane at a time: the machine has 2 cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs a test body on a fresh runtime, one at a time, with a deadline.
pub fn run<F, Fut>(deadline: Duration, body: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(error) = hcomm_e2e::harness::block_on(deadline, body()) {
        panic!("test failed: {error:#}");
    }
}

/// A control plane with the hcomm CRDs and a namespace for the test.
pub struct Cluster {
    pub cp: ControlPlane,
    pub client: kube::Client,
    pub namespace: String,
    pub device_plugin: device_plugin::DevicePlugin,
}

impl Cluster {
    pub async fn start(namespace: &str) -> Result<Self> {
        let cp = ControlPlane::start(ControlPlaneOptions {
            kwok: Some(true),
            start_timeout: Duration::from_secs(120),
            ..ControlPlaneOptions::default()
        })
        .await?;
        cp.install_crds(&hcomm_crds::all_crds()).await?;
        let client = cp.client().await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces.create(&PostParams::default(), &ns).await?;
        Ok(Self {
            device_plugin: device_plugin::DevicePlugin::start(client.clone(), namespace),
            cp,
            client,
            namespace: namespace.to_owned(),
        })
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn groups(&self) -> Api<HcommGroup> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// A kwok Node advertising `devices` NPUs (served by the device-plugin stand-in) plus
    /// the `HcommNode` its agent would publish.
    pub async fn add_node(
        &self,
        name: &str,
        rack: &str,
        switch: &str,
        devices: i32,
        ip: &str,
    ) -> Result<()> {
        self.cp.create_fake_node(name, BTreeMap::new()).await?;
        self.device_plugin
            .add_node(self.client.clone(), name, u32::try_from(devices)?)
            .await?;
        let api: Api<HcommNode> = Api::all(self.client.clone());
        let node: HcommNode = serde_json::from_value(serde_json::json!({
            "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommNode",
            "metadata": {"name": name},
            "spec": {"nodeName": name}
        }))?;
        api.create(&PostParams::default(), &node).await?;
        let devices: Vec<_> = (0..devices)
            .map(|id| serde_json::json!({"id": id, "model": "cpu", "health": hcomm_crds::contract::GroupReason::Healthy.as_str()}))
            .collect();
        let status = serde_json::json!({"status": {
            "devices": devices,
            "dataAddress": ip,
            "topology": {"superPod": "sp0", "rack": rack, "switch": switch}
        }});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    /// Publishes `node`'s link tests as its agent's probe loop would: one result per peer,
    /// the peer named by its rank-table server id (its data address), taken now.
    /// `results` = (peer data address, reachable, latency in µs when reachable).
    pub async fn set_link_tests(&self, node: &str, results: &[(&str, bool, i64)]) -> Result<()> {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let tests: Vec<_> = results
            .iter()
            .map(|(peer, reachable, latency)| {
                let mut t = serde_json::json!({
                    "peer": peer, "peerAddress": peer, "interface": "data0",
                    "reachable": reachable, "time": now,
                });
                if *reachable {
                    t["latencyMicros"] = (*latency).into();
                } else {
                    t["error"] = format!("connect to {peer}:29499 timed out after 5s").into();
                }
                t
            })
            .collect();
        let api: Api<HcommNode> = Api::all(self.client.clone());
        let patch = serde_json::json!({"status": {"linkTests": tests, "lastUpdated": now}});
        api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("set link tests of {node}"))?;
        Ok(())
    }

    /// Applies a group manifest.
    pub async fn apply_group(&self, manifest: serde_json::Value) -> Result<HcommGroup> {
        let group: HcommGroup = serde_json::from_value(manifest)?;
        let name = group.metadata.name.clone().unwrap_or_default();
        Ok(self
            .groups()
            .patch(
                &name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&group),
            )
            .await?)
    }

    /// `kubectl scale hcg/<name> --replicas=<n>`.
    pub fn kubectl_scale(&self, name: &str, replicas: i32) -> Result<()> {
        let output = self
            .cp
            .kubectl()
            .args([
                "scale",
                &format!("hcg/{name}"),
                &format!("--replicas={replicas}"),
                "-n",
                &self.namespace,
            ])
            .output()?;
        if !output.status.success() {
            bail!("kubectl scale: {}", String::from_utf8_lossy(&output.stderr));
        }
        Ok(())
    }

    /// The group's member Pods, by name.
    pub async fn members(&self, group: &str) -> Result<BTreeMap<String, Pod>> {
        let pods = self
            .pods()
            .list(&ListParams::default().labels(&format!("{LABEL_GROUP}={group}")))
            .await?;
        Ok(pods
            .items
            .into_iter()
            .filter_map(|p| Some((p.metadata.name.clone()?, p)))
            .collect())
    }

    /// Sets Pod conditions as the agent would (status subresource, merged by type).
    pub async fn set_conditions(&self, pod: &str, conditions: &[(&str, &str, &str)]) -> Result<()> {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let list: Vec<_> = conditions
            .iter()
            .map(|(type_, status, reason)| {
                serde_json::json!({"type": type_, "status": status, "reason": reason,
                                   "message": "set by the test agent", "lastTransitionTime": now})
            })
            .collect();
        let patch = serde_json::json!({"status": {"conditions": list}});
        self.pods()
            .patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .with_context(|| format!("set conditions on {pod}"))?;
        Ok(())
    }

    /// The agent's happy path: once the Pod runs, verified → synced → joined → ready.
    pub async fn make_ready(&self, pod: &str) -> Result<()> {
        let pods = self.pods();
        wait_until(&format!("{pod} Running"), || async {
            let p = pods.get_opt(pod).await.ok()??;
            (p.status?.phase? == "Running").then_some(())
        })
        .await?;
        self.set_conditions(
            pod,
            &[
                (
                    POD_VERIFIED,
                    "True",
                    hcomm_crds::contract::PodReason::Verified.as_str(),
                ),
                (POD_WEIGHTS_SYNCED, "True", "Synced"),
                (
                    POD_JOINED,
                    "True",
                    hcomm_crds::contract::PodReason::Joined.as_str(),
                ),
                (POD_MEMBER_READY, "True", "Serving"),
            ],
        )
        .await
    }

    /// Makes every member of `group` that is not draining Ready.
    pub async fn make_all_ready(&self, group: &str) -> Result<()> {
        for (name, pod) in self.members(group).await? {
            let draining =
                pod.metadata.annotations.as_ref().is_some_and(|a| {
                    a.contains_key(hcomm_crds::contract::ANNOTATION_DRAIN_REQUESTED)
                });
            if !draining && pod.metadata.deletion_timestamp.is_none() {
                self.make_ready(&name).await?;
            }
        }
        Ok(())
    }

    /// The agent finishes a drain: gate False, then drained True.
    pub async fn finish_drain(&self, pod: &str) -> Result<()> {
        self.set_conditions(pod, &[(POD_MEMBER_READY, "False", "Draining")])
            .await?;
        self.set_conditions(pod, &[(POD_DRAINED, "True", "Drained")])
            .await
    }

    /// Waits until the group's status satisfies `check`.
    pub async fn wait_group(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&HcommGroup) -> bool,
    ) -> Result<HcommGroup> {
        let groups = self.groups();
        wait_until(what, || async {
            let g = groups.get_opt(name).await.ok()??;
            check(&g).then_some(g)
        })
        .await
    }
}

/// Polls `probe` until it returns `Some`, within [`WAIT`].
pub async fn wait_until<T, F, Fut>(what: &str, probe: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if started.elapsed() > WAIT {
            bail!("timed out after {:?} waiting for {what}", WAIT);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The condition `type_` of a group, as (status, reason, message).
pub fn group_condition_message(
    group: &HcommGroup,
    type_: &str,
) -> Option<(String, String, String)> {
    let c = group
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The condition `type_` of a group, as (status, reason).
pub fn group_condition(group: &HcommGroup, type_: &str) -> Option<(String, String)> {
    let c = group
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

/// The operator binary, running as a child process.
pub struct Operator {
    pub identity: String,
    pub metrics: SocketAddr,
    child: Child,
    pub log: PathBuf,
}

impl Operator {
    pub fn start(cluster: &Cluster, identity: &str) -> Result<Self> {
        Self::start_as(cluster, identity, cluster.cp.kubeconfig_path(), "default")
    }

    /// Starts the operator with its own kubeconfig (e.g. one impersonating the chart's
    /// ServiceAccount) and its Lease in `lease_namespace`.
    pub fn start_as(
        cluster: &Cluster,
        identity: &str,
        kubeconfig: &std::path::Path,
        lease_namespace: &str,
    ) -> Result<Self> {
        Self::start_with(cluster, identity, kubeconfig, lease_namespace, &[])
    }

    /// [`Operator::start_as`] with `extra` flags (e.g. `--log-format json`).
    pub fn start_with(
        cluster: &Cluster,
        identity: &str,
        kubeconfig: &std::path::Path,
        lease_namespace: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let metrics: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let log = cluster
            .cp
            .state_dir()
            .join(format!("operator-{identity}-{port}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_hcomm-operator"))
            .args([
                "--metrics-addr",
                &metrics.to_string(),
                "--identity",
                identity,
            ])
            .args([
                "--lease-namespace",
                lease_namespace,
                "--lease-name",
                "hcomm-operator",
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn,hcomm_operator=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        Ok(Self {
            identity: identity.to_owned(),
            metrics,
            child,
            log,
        })
    }

    /// SIGKILL: no chance to release the Lease or finish anything.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`, ...) to the process, with `kill`.
    pub fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()?;
        anyhow::ensure!(
            status.success(),
            "kill -{signal} {}: {status}",
            self.child.id()
        );
        Ok(())
    }

    /// Waits up to `deadline` for the process to exit; its exit status.
    pub async fn exited(&mut self, deadline: Duration) -> Result<std::process::ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if started.elapsed() > deadline {
                bail!("{} still running after {deadline:?}", self.identity);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The operator's `/metrics`, once the server answers.
    pub async fn metrics_text(&self) -> Result<String> {
        wait_until(&format!("{} metrics", self.identity), || async {
            http_get(self.metrics, "/metrics").await.ok()
        })
        .await
    }

    /// The value of an unlabelled metric, once the server answers.
    pub async fn metric(&self, name: &str) -> Result<f64> {
        let text = self.metrics_text().await?;
        hcomm_e2e::bench::metric(&text, name)
            .with_context(|| format!("no metric {name} in\n{text}"))
    }

    /// Everything the operator logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.0 GET; returns the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP body")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {head}");
    }
    Ok(body.to_owned())
}

/// A group manifest: `replicas` members of `dpm` devices.
pub fn group_manifest(
    name: &str,
    replicas: i32,
    dpm: i32,
    drain_timeout: i32,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "role": "decode", "devicesPerMember": dpm,
            "comm": {"backend": "tcp", "socketIfname": "=data0"},
            "scaling": {"drainTimeoutSeconds": drain_timeout},
            "template": {
                "metadata": {"labels": {"app": "worker"}},
                "spec": {"containers": [{"name": "worker", "image": "hcomm/reference-worker:0.1.0"}]}
            }
        }
    })
}
