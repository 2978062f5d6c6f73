//! The bench's cluster: a real control plane (etcd, kube-apiserver, controller-manager,
//! scheduler, kwok), `n` kwok Nodes advertising 8 NPUs each with the `HcommNode` their
//! agents would publish, and the real `hcomm-operator` as a child process with a known
//! metrics port. Dropping [`Bench`] stops the operator and then the control plane.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use hcomm_crds::HcommNode;
use hcomm_crds::contract::GroupReason;
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions};
use hcomm_e2e::testbed::{binaries, npus};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::args::NPUS_PER_NODE;
use crate::measure::Sample;

/// The namespace of the bench's groups.
pub const NS: &str = "scale-bench";
/// Node names: `bench-node-<i>`.
pub fn node_name(i: u32) -> String {
    format!("bench-node-{i}")
}

/// Nodes created (and NPUs advertised) at once.
const PARALLEL: usize = 16;

/// A running control plane with the nodes and the operator.
pub struct Bench {
    pub cp: ControlPlane,
    pub client: kube::Client,
    operator: Child,
    /// The operator's `/metrics` URL.
    pub operator_metrics: String,
    pub operator_log: PathBuf,
}

impl Bench {
    /// Starts everything; `nodes` kwok Nodes with their `HcommNode`s.
    pub async fn start(nodes: u32) -> Result<Bench> {
        let cp = ControlPlane::start(ControlPlaneOptions {
            kwok: Some(true),
            start_timeout: Duration::from_secs(120),
            ..ControlPlaneOptions::default()
        })
        .await
        .context("control plane")?;
        cp.install_crds(&hcomm_crds::all_crds()).await?;
        let client = cp.client().await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(NS.to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces.create(&PostParams::default(), &ns).await?;
        futures::stream::iter(0..nodes)
            .map(|i| add_node(&cp, client.clone(), i))
            .buffer_unordered(PARALLEL)
            .try_collect::<()>()
            .await?;
        let (operator, operator_metrics, operator_log) = start_operator(&cp)?;
        Ok(Bench {
            cp,
            client,
            operator,
            operator_metrics,
            operator_log,
        })
    }

    /// The operator's process id.
    pub fn operator_pid(&self) -> u32 {
        self.operator.id()
    }

    /// A sample of the apiserver's and the operator's metrics and of the CPU time of every
    /// process on the path: the control plane's components, the bench (and the operator,
    /// which `Sample::take` reads anyway).
    pub async fn sample(&self) -> Result<Sample> {
        let mut watched: Vec<(String, u32)> = self
            .cp
            .components()
            .iter()
            .map(|c| (c.name.clone(), c.pid))
            .collect();
        watched.push(("scale-bench".into(), std::process::id()));
        Sample::take(
            &self.client,
            &self.operator_metrics,
            self.operator_pid(),
            &watched,
        )
        .await
    }

    /// Fails when the operator exited.
    pub fn check_operator(&mut self) -> Result<()> {
        if let Some(status) = self.operator.try_wait()? {
            bail!(
                "hcomm-operator exited ({status}); log: {}",
                self.operator_log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.operator.kill();
        let _ = self.operator.wait();
    }
}

/// One kwok Node with 8 NPUs, and its agent's `HcommNode` (devices, data address,
/// topology: 16 nodes a rack, 4 racks a switch).
async fn add_node(cp: &ControlPlane, client: kube::Client, i: u32) -> Result<()> {
    let name = node_name(i);
    cp.create_fake_node(&name, npus::node_labels()).await?;
    npus::advertise(client.clone(), &name, NPUS_PER_NODE).await?;
    let api: Api<HcommNode> = Api::all(client);
    let node: HcommNode = serde_json::from_value(serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommNode",
        "metadata": {"name": name},
        "spec": {"nodeName": name}
    }))?;
    api.create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("create HcommNode {name}"))?;
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&node_status(i)),
    )
    .await
    .with_context(|| format!("publish HcommNode {name}"))?;
    Ok(())
}

/// The status the agent of node `i` publishes (also republished periodically by the
/// driver, with a fresh `lastUpdated`).
pub fn node_status(i: u32) -> serde_json::Value {
    let devices: Vec<_> = (0..NPUS_PER_NODE)
        .map(|id| {
            serde_json::json!({"id": id, "model": "cpu", "health": GroupReason::Healthy.as_str()})
        })
        .collect();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    serde_json::json!({"status": {
        "devices": devices,
        "dataAddress": format!("10.{}.{}.{}", 100 + i / 65536, (i / 256) % 256, i % 256),
        "topology": {"superPod": "sp0", "rack": format!("rack-{}", i / 16),
                     "switch": format!("switch-{}", i / 64)},
        "lastUpdated": now,
    }})
}

/// Builds (unless told not to, by the caller) and starts the operator on a free port,
/// with the admin kubeconfig, logging to the control plane's state folder.
fn start_operator(cp: &ControlPlane) -> Result<(Child, String, PathBuf)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log_path = cp.state_dir().join("hcomm-operator.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(binaries::find(binaries::OPERATOR)?)
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--identity", "scale-bench", "--lease-namespace", "default"])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env(
            "RUST_LOG",
            std::env::var("HCOMM_BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("start hcomm-operator")?;
    Ok((child, format!("http://127.0.0.1:{port}/metrics"), log_path))
}

/// `cargo build --bins -p hcomm-operator` with the Cargo that runs this program, in the
/// same profile, so the operator measured is this checkout's.
pub fn build_operator() -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--bins", "-p", "hcomm-operator"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().context("cargo build -p hcomm-operator")?;
    if !status.success() {
        bail!("cargo build -p hcomm-operator: {status}");
    }
    Ok(())
}
