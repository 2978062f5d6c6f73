//! What tests do with a running control plane: clients, CRDs, fake Nodes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::KubeConfigOptions;
use kube::runtime::wait::{Condition, await_condition, conditions};
use tracing::info;

use super::ControlPlane;
use super::error::{Error, Result};

/// The annotation that makes kwok manage a Node (`key=value`).
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Its value.
pub const KWOK_NODE_VALUE: &str = "fake";
/// The field manager of the harness' server-side applies.
const FIELD_MANAGER: &str = "hcomm-e2e";
/// Deadline for CRDs to become Established and Nodes Ready.
const WAIT: Duration = Duration::from_secs(30);

impl ControlPlane {
    /// The admin's client configuration.
    pub async fn config(&self) -> Result<kube::Config> {
        kube::Config::from_custom_kubeconfig(self.kubeconfig.clone(), &KubeConfigOptions::default())
            .await
            .map_err(|error| Error::Kubeconfig {
                path: self.kubeconfig_path.clone(),
                message: error.to_string(),
            })
    }

    /// A client with admin rights (`system:masters`).
    pub async fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.config().await?).map_err(Error::kube("build admin client"))
    }

    /// A client that impersonates `user` (and `groups`) with the admin's
    /// credentials, so RBAC decides as it would for that user, e.g.
    /// `system:serviceaccount:<namespace>:<name>` with group
    /// `system:serviceaccounts`.
    pub async fn client_impersonating(&self, user: &str, groups: &[&str]) -> Result<kube::Client> {
        let mut config = self.config().await?;
        config.auth_info.impersonate = Some(user.to_owned());
        if !groups.is_empty() {
            config.auth_info.impersonate_groups =
                Some(groups.iter().map(|g| (*g).to_owned()).collect());
        }
        kube::Client::try_from(config)
            .map_err(Error::kube(format!("build client impersonating {user}")))
    }

    /// Applies the CRDs (server-side apply) and waits until each is Established.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client().await?);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(crd))
                .await
                .map_err(Error::kube(format!("apply CRD {name}")))?;
        }
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let what = format!("CRD {name} Established");
            wait_for(&api, &name, conditions::is_crd_established(), &what).await?;
            info!(crd = %name, "established");
        }
        Ok(())
    }

    /// Creates a Node that kwok manages and waits until it is Ready. Pods
    /// scheduled to it reach Running without a container runtime.
    pub async fn create_fake_node(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
    ) -> Result<Node> {
        if !self.has_kwok() {
            return Err(Error::MissingBinary {
                binary: "kwok",
                reason: "this control plane runs without kwok, so no fake Node becomes Ready"
                    .to_owned(),
            });
        }
        let mut labels = labels;
        labels
            .entry("kubernetes.io/hostname".to_owned())
            .or_insert_with(|| name.to_owned());
        labels
            .entry("type".to_owned())
            .or_insert_with(|| "kwok".to_owned());
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([(
                    KWOK_NODE_ANNOTATION.to_owned(),
                    KWOK_NODE_VALUE.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let api: Api<Node> = Api::all(self.client().await?);
        api.create(&PostParams::default(), &node)
            .await
            .map_err(Error::kube(format!("create Node {name}")))?;
        wait_for(&api, name, is_node_ready(), &format!("Node {name} Ready")).await
    }
}

impl ControlPlane {
    /// Waits until the ServiceAccount controller created `default/default`.
    pub(crate) async fn wait_for_default_service_account(&self, timeout: Duration) -> Result<()> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client().await?, "default");
        let exists = |sa: Option<&ServiceAccount>| sa.is_some();
        wait_within(
            timeout,
            &api,
            "default",
            exists,
            "ServiceAccount default/default",
        )
        .await
        .map(drop)
    }
}

/// Node condition Ready=True.
pub fn is_node_ready() -> impl Condition<Node> {
    |node: Option<&Node>| {
        node.and_then(|n| n.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }
}

/// Watches `name` until `condition` holds, within [`WAIT`]; returns the object.
async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    condition: impl Condition<K>,
    what: &str,
) -> Result<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    wait_within(WAIT, api, name, condition, what).await
}

/// Watches `name` until `condition` holds, within `timeout`; returns the object.
async fn wait_within<K>(
    timeout: Duration,
    api: &Api<K>,
    name: &str,
    condition: impl Condition<K>,
    what: &str,
) -> Result<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let started = Instant::now();
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(Some(object))) => Ok(object),
        Ok(Ok(None)) => Err(Error::Timeout {
            what: format!("{what} (object deleted)"),
            waited: started.elapsed(),
        }),
        Ok(Err(error)) => Err(Error::Timeout {
            what: format!("{what} (watch failed: {error})"),
            waited: started.elapsed(),
        }),
        Err(_) => Err(Error::Timeout {
            what: what.to_owned(),
            waited: started.elapsed(),
        }),
    }
}
