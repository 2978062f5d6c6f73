//! A control plane that outlives the process that started it
//! (`cargo devcluster up`), found again through a state file in its state
//! folder (`devcluster.json`) by `status` and `down`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::info;

use super::Component;
use super::error::{Error, Result};
use super::health::{anonymous_client, http_get, kube_get};
use super::process::{cmdline_contains, is_alive, stop_pid};

/// The state file's name inside the state folder.
pub const STATE_FILE: &str = "devcluster.json";

/// What is known of a detached control plane.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DevCluster {
    /// Its state folder.
    pub state_dir: PathBuf,
    /// The apiserver URL.
    pub server: String,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The CA that signed the components' serving certificates.
    pub ca_cert: PathBuf,
    /// The components, in start order.
    pub components: Vec<Component>,
}

/// The health of one component.
#[derive(Debug, Clone)]
pub struct ComponentHealth {
    /// The component.
    pub component: Component,
    /// Whether its process runs.
    pub running: bool,
    /// Ok, or why its health endpoint failed.
    pub health: std::result::Result<(), String>,
}

impl DevCluster {
    /// Reads the state file from `state_dir`; `None` when there is none.
    pub fn load(state_dir: &Path) -> Result<Option<Self>> {
        let path = state_dir.join(STATE_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Io {
                    action: "read",
                    path,
                    source,
                });
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| Error::State {
                path,
                message: error.to_string(),
            })
    }

    /// Writes the state file.
    pub fn save(&self) -> Result<()> {
        let path = self.state_dir.join(STATE_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|error| Error::State {
            path: path.clone(),
            message: error.to_string(),
        })?;
        std::fs::write(&path, text).map_err(Error::io("write", &path))
    }

    /// Whether this component's pid is alive and still ours (its command
    /// line names our state folder, so a reused pid is not mistaken for it).
    pub fn is_running(&self, component: &Component) -> bool {
        is_alive(component.pid)
            && cmdline_contains(component.pid, &self.state_dir.display().to_string())
    }

    /// Whether any component still runs.
    pub fn any_running(&self) -> bool {
        self.components.iter().any(|c| self.is_running(c))
    }

    /// Probes every component's health endpoint.
    pub async fn health(&self) -> Vec<ComponentHealth> {
        let mut out = Vec::new();
        for component in &self.components {
            let running = self.is_running(component);
            let health = if running {
                self.probe(component).await
            } else {
                Err("not running".to_owned())
            };
            out.push(ComponentHealth {
                component: component.clone(),
                running,
                health,
            });
        }
        out
    }

    async fn probe(&self, component: &Component) -> std::result::Result<(), String> {
        let url = &component.health_url;
        if let Some(rest) = url.strip_prefix("http://") {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let addr = authority
                .parse()
                .map_err(|e| format!("bad health url {url}: {e}"))?;
            return http_get(addr, &format!("/{path}")).await.map(drop);
        }
        let (base, path) = url
            .strip_prefix("https://")
            .and_then(|rest| rest.split_once('/'))
            .map(|(authority, path)| (format!("https://{authority}"), format!("/{path}")))
            .ok_or_else(|| format!("bad health url {url}"))?;
        let client = if component.name == "kube-apiserver" {
            // /readyz needs credentials on the apiserver.
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&self.kubeconfig).map_err(|e| e.to_string())?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| e.to_string())?;
            kube::Client::try_from(config).map_err(|e| e.to_string())?
        } else {
            anonymous_client(&base, &self.ca_cert).map_err(|e| e.to_string())?
        };
        let probe = kube_get(&client, &path);
        match tokio::time::timeout(Duration::from_secs(5), probe).await {
            Ok(result) => result.map(drop),
            Err(_) => Err("timed out".to_owned()),
        }
    }

    /// Stops every component (newest first) and verifies none is left; the
    /// state file goes, the state folder (logs) stays.
    pub fn stop(&self) -> Result<()> {
        for component in self.components.iter().rev() {
            if self.is_running(component) {
                info!(component = %component.name, pid = component.pid, "stopping");
                stop_pid(&component.name, component.pid, Duration::from_secs(10))?;
            }
        }
        if let Some(left) = self
            .components
            .iter()
            .find(|c| is_alive(c.pid) && self.is_running(c))
        {
            return Err(Error::Unkillable {
                component: left.name.clone(),
                pid: left.pid,
            });
        }
        let path = self.state_dir.join(STATE_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io {
                action: "remove",
                path,
                source,
            }),
        }
    }
}
