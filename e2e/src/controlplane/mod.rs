//! A real local Kubernetes control plane for tests, the demo and
//! `cargo devcluster`.
//!
//! [`ControlPlane::start`] runs etcd and kube-apiserver (and, by default,
//! kube-controller-manager, kube-scheduler and kwok) as child processes on
//! free ports, with their own PKI, RBAC authorization (`Node,RBAC`) and
//! ServiceAccount token signing, and waits until each is healthy. Dropping it
//! (also while a test panics) stops every process and removes its temporary
//! state; a run killed outright (SIGKILL, CI timeout) is cleaned up by the
//! next `start` on the machine.
//!
//! ```no_run
//! # async fn demo() -> hcomm_e2e::controlplane::Result<()> {
//! use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions};
//! let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
//! cp.install_crds(&hcomm_crds::all_crds()).await?;
//! cp.create_fake_node("npu-node-0", Default::default()).await?;
//! let client = cp.client().await?;
//! # drop(client); Ok(()) }
//! ```
//!
//! Binaries: see [`assets`] (`KUBEBUILDER_ASSETS`, else built once with Go
//! into `$HCOMM_CACHE_DIR`). kwok runs with the stages in
//! `e2e/k8s/kwok/stages.yaml`: unlike kwok's stock pod stage (which writes
//! every readiness-gate condition True itself), a Pod with readiness gates
//! stays Ready=False until the gates' owner sets their conditions True, and
//! Ready follows them both ways, as with a kubelet. Deleted Pods go at once.
//!
//! Flow: `assets` (binaries) → `certs` (PKI) → `kubeconfig` → `start`
//! (components, in dependency order, each awaited by `health`) → `cluster`
//! (what tests do with it) → `detached` (devcluster); `process` supervises.

pub mod assets;
mod certs;
mod cluster;
pub mod detached;
mod error;
mod health;
mod kubeconfig;
mod process;
pub mod progress;
mod start;
mod statedir;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::{info, warn};

pub use assets::{
    Binaries, KEDA_CRDS, KEDA_RBAC, Needs, cache_root, keda, kubernetes_version, prometheus,
};
pub use certs::Pki;
pub use cluster::{KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE};
pub use error::{Error, Result};
pub(crate) use health::http_get;
pub use kubeconfig::CONTEXT;
pub use process::is_alive;
pub(crate) use process::log_tail;
/// The Services' ClusterIP range every control plane here serves.
pub use start::SERVICE_CIDR;
pub(crate) use start::free_ports;

use process::Supervised;

/// When set, a temporary state folder (logs, PKI, etcd data) is kept after
/// the control plane stops, for debugging.
pub const KEEP_STATE_ENV: &str = "HCOMM_E2E_KEEP_STATE";

/// How to start a [`ControlPlane`].
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// Address the apiserver listens on and is reached at (it is in the
    /// serving certificate's SANs). Default 127.0.0.1; the demo binds the
    /// management bridge so agents in network namespaces reach it.
    pub bind_address: IpAddr,
    /// Start kube-controller-manager and kube-scheduler. Default true.
    pub controllers: bool,
    /// Start kwok: `Some(true)` requires it, `Some(false)` skips it, `None`
    /// (default) starts it when it can be found or built.
    pub kwok: Option<bool>,
    /// Folder for PKI, etcd data, kubeconfigs and logs. Default: a new
    /// temporary folder, removed when the control plane stops (unless
    /// `HCOMM_E2E_KEEP_STATE` is set); a given folder is kept.
    pub state_dir: Option<PathBuf>,
    /// Deadline for each component to become healthy. Default 60 s.
    pub start_timeout: Duration,
    /// The Pod CIDR kwok hands addresses out of. Default 10.244.0.0/16; two control
    /// planes whose Pod addresses are routed on one machine (two testbeds) need distinct
    /// ones.
    pub pod_cidr: Option<String>,
}

impl Default for ControlPlaneOptions {
    fn default() -> Self {
        Self {
            bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            controllers: true,
            kwok: None,
            state_dir: None,
            start_timeout: Duration::from_secs(60),
            pod_cidr: None,
        }
    }
}

/// One running component, as shown by `devcluster status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Component {
    /// e.g. `kube-apiserver`.
    pub name: String,
    /// Process id (also its process group id).
    pub pid: u32,
    /// Its log file.
    pub log: PathBuf,
    /// Its health endpoint.
    pub health_url: String,
}

/// A running local control plane. Stops everything when dropped.
#[derive(Debug)]
pub struct ControlPlane {
    state_dir: PathBuf,
    owns_state_dir: bool,
    server: String,
    kubeconfig_path: PathBuf,
    kubeconfig: kube::config::Kubeconfig,
    pki: Pki,
    binaries: Binaries,
    /// In start order; stopped in reverse.
    processes: Vec<Supervised>,
    components: Vec<Component>,
}

impl ControlPlane {
    /// Starts a control plane and waits until every component is healthy.
    /// On error, whatever was started is stopped again.
    pub async fn start(options: ControlPlaneOptions) -> Result<Self> {
        start::start(options).await
    }

    /// The apiserver's URL, e.g. `https://127.0.0.1:41234`.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// The admin kubeconfig (`system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The folder holding PKI, etcd data, kubeconfigs and logs.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The PKI files (CA, serving and client certificates).
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The binaries in use.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// The running components, in start order.
    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// The pids of every component process.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(Supervised::pid).collect()
    }

    /// Whether kwok runs, so fake Nodes become Ready.
    pub fn has_kwok(&self) -> bool {
        self.binaries.kwok.is_some()
    }

    /// A `kubectl` command with `KUBECONFIG` set to the admin kubeconfig.
    pub fn kubectl(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.binaries.kubectl);
        command.env("KUBECONFIG", &self.kubeconfig_path);
        command
    }

    /// Stops every component (SIGTERM, then SIGKILL after a grace period)
    /// and removes a temporary state folder.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    /// Leaves the components running and returns what `devcluster` needs to
    /// find and stop them later; the state folder is kept.
    pub fn detach(mut self) -> Result<detached::DevCluster> {
        let state = self.state();
        state.save()?;
        for process in std::mem::take(&mut self.processes) {
            process.detach();
        }
        self.owns_state_dir = false;
        Ok(state)
    }

    /// What a later process needs to find and stop these components.
    fn state(&self) -> detached::DevCluster {
        detached::DevCluster {
            state_dir: self.state_dir.clone(),
            server: self.server.clone(),
            kubeconfig: self.kubeconfig_path.clone(),
            ca_cert: self.pki.ca_cert.clone(),
            components: self.components.clone(),
        }
    }

    fn shutdown(&mut self) -> Result<()> {
        if !self.processes.is_empty() {
            info!(state_dir = %self.state_dir.display(), "stopping control plane");
        }
        // etcd and kube-apiserver go last, in that order.
        let stopped_any = !self.processes.is_empty();
        let result = process::stop_all(&mut self.processes, 2, Duration::from_secs(10));
        if stopped_any {
            // Nothing runs any more, so nothing is left for a later reaper.
            // (After `detach` nothing was stopped, and the file must stay.)
            let _ = std::fs::remove_file(self.state_dir.join(detached::STATE_FILE));
        }
        if self.owns_state_dir && std::env::var_os(KEEP_STATE_ENV).is_some() {
            self.owns_state_dir = false;
            info!(state_dir = %self.state_dir.display(), "keeping state dir ({KEEP_STATE_ENV} is set)");
        } else if self.owns_state_dir {
            self.owns_state_dir = false;
            if let Err(error) = std::fs::remove_dir_all(&self.state_dir) {
                warn!(state_dir = %self.state_dir.display(), %error, "could not remove state dir");
            }
        }
        result
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            warn!(%error, "control plane did not stop cleanly");
        }
    }
}
