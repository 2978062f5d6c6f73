//! Kubeconfig files for the control plane's clients.
//!
//! One file per client identity (admin for people, tests and kwok; one each
//! for kube-controller-manager and kube-scheduler), all pointing at the
//! apiserver's bind address and trusting the harness CA. Certificates are
//! referenced by absolute path, so kubectl, Go clients and kube-rs read the
//! same file.

use std::path::Path;

use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};

use super::certs::CertPair;
use super::error::{Error, Result};

/// The context, cluster and user name in every file the harness writes.
pub const CONTEXT: &str = "hcomm-e2e";

/// Builds a kubeconfig for `server` trusting `ca`, authenticating with `client`.
pub(crate) fn build(server: &str, ca: &Path, client: &CertPair) -> Kubeconfig {
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: CONTEXT.to_owned(),
            cluster: Some(Cluster {
                server: Some(server.to_owned()),
                certificate_authority: Some(ca.display().to_string()),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: CONTEXT.to_owned(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(client.cert.display().to_string()),
                client_key: Some(client.key.display().to_string()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: CONTEXT.to_owned(),
            context: Some(Context {
                cluster: CONTEXT.to_owned(),
                user: Some(CONTEXT.to_owned()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(CONTEXT.to_owned()),
        kind: Some("Config".to_owned()),
        api_version: Some("v1".to_owned()),
        ..Kubeconfig::default()
    }
}

/// Writes `kubeconfig` to `path` as YAML.
pub(crate) fn write(path: &Path, kubeconfig: &Kubeconfig) -> Result<()> {
    let yaml = serde_yaml::to_string(kubeconfig).map_err(|error| Error::Kubeconfig {
        path: path.to_owned(),
        message: error.to_string(),
    })?;
    std::fs::write(path, yaml).map_err(Error::io("write kubeconfig", path))
}

/// The URL of a server at `ip:port` (IPv6 in brackets).
pub(crate) fn https_url(ip: std::net::IpAddr, port: u16) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => format!("https://{v4}:{port}"),
        std::net::IpAddr::V6(v6) => format!("https://[{v6}]:{port}"),
    }
}
