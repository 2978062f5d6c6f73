//! The Helm chart in tests: install `charts/hcomm` into a test control plane with the real
//! `helm`, and act as one of its ServiceAccounts, so a component can be run with exactly
//! the RBAC the chart grants.

use std::path::PathBuf;
use std::process::Command;

use crate::controlplane::{ControlPlane, assets};

/// The namespace tests install the chart into.
pub const RELEASE_NAMESPACE: &str = "hcomm-system";
/// The operator's ServiceAccount as a user name, as the chart creates it.
pub const OPERATOR_USER: &str = "system:serviceaccount:hcomm-system:hcomm-operator";
/// The agent's ServiceAccount as a user name, as the chart creates it.
pub const AGENT_USER: &str = "system:serviceaccount:hcomm-system:hcomm-agent";

/// Why installing the chart or writing a kubeconfig failed.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// helm could not be found or built.
    #[error("helm: {0}")]
    Helm(#[from] crate::controlplane::Error),
    /// helm ran and failed.
    #[error("helm install failed: {0}")]
    Install(String),
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The kubeconfig could not be read or written.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// `helm template` failed, or its output is not YAML.
    #[error("helm template {args:?}: {why}")]
    Template { args: Vec<String>, why: String },
}

/// `helm` with `args`, its caches and config kept in one directory under the system's
/// temporary directory (never the user's own helm setup).
pub fn helm_command(args: &[&str]) -> Result<Command, ChartError> {
    let home = std::env::temp_dir().join("hcomm-helm-home");
    let mut command = Command::new(assets::helm()?);
    command
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    Ok(command)
}

/// The chart's directory.
pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/hcomm");

/// `helm template` of the chart into [`RELEASE_NAMESPACE`] with `extra` arguments, as for
/// the Kubernetes version the tests run (helm's built-in default is older than the chart's
/// `kubeVersion`): one YAML value per rendered document.
pub fn render(extra: &[&str]) -> Result<Vec<serde_yaml::Value>, ChartError> {
    use serde::Deserialize;
    let failed = |why: String| ChartError::Template {
        args: extra.iter().map(|a| a.to_string()).collect(),
        why,
    };
    let kube_version = assets::kubernetes_version()?;
    let out = helm_command(&["template", "hcomm", CHART, "--namespace", RELEASE_NAMESPACE])?
        .args(["--kube-version", &kube_version])
        .args(extra)
        .output()?;
    if !out.status.success() {
        return Err(failed(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc).map_err(|e| failed(e.to_string()))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// `helm install hcomm charts/hcomm -n hcomm-system` with `--set` values.
pub fn install(cp: &ControlPlane, sets: &[&str]) -> Result<(), ChartError> {
    let chart = CHART;
    let home = cp.state_dir().join("helm");
    let mut command = Command::new(assets::helm()?);
    command
        .args([
            "install",
            "hcomm",
            chart,
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
        ])
        .args(["--timeout", "120s"])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    for set in sets {
        command.args(["--set", set]);
    }
    let out = command.output()?;
    if !out.status.success() {
        return Err(ChartError::Install(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(())
}

/// Writes a copy of the admin kubeconfig that acts as `user` (the `as:` field, as
/// `kubectl --as` does) and returns its path.
pub fn kubeconfig_as(cp: &ControlPlane, user: &str) -> Result<PathBuf, ChartError> {
    let mut config = kube::config::Kubeconfig::read_from(cp.kubeconfig_path())
        .map_err(|e| ChartError::Kubeconfig(e.to_string()))?;
    for named in &mut config.auth_infos {
        named
            .auth_info
            .get_or_insert_with(Default::default)
            .impersonate = Some(user.to_owned());
    }
    let file = user.rsplit(':').next().unwrap_or("user");
    let path = cp.state_dir().join(format!("{file}.as.kubeconfig"));
    let yaml = serde_yaml::to_string(&config).map_err(|e| ChartError::Kubeconfig(e.to_string()))?;
    std::fs::write(&path, yaml)?;
    Ok(path)
}
