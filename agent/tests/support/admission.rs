//! The API server refusing the agents' Pod status writes for a while, as an admission
//! webhook or policy, a restarting API server or API Priority and Fairness under load can:
//! a `ValidatingAdmissionPolicy` the test adds and removes.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Cluster, NS};

/// Makes the API server refuse the agents' Pod status writes for the members of `group`
/// (a ValidatingAdmissionPolicy bound by the group's label, matching only the chart's agent
/// ServiceAccount, so the test's own writes pass), and returns once it does: a status write
/// as the agent to a probe Pod of that group (on no node, so no agent runs it) is refused.
pub async fn refuse_agent_status_writes(cluster: &Cluster, group: &str) -> Result<()> {
    let name = policy_name(group);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["pods/status"]}]},
            "matchConditions": [{"name": "the-agent", "expression":
                format!("request.userInfo.username == '{}'", hcomm_e2e::chart::AGENT_USER)}],
            "validations": [{"expression": "false",
                "message": "refused for the test: the agent's Pod status write"}]
        }
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"objectSelector": {"matchLabels":
                {(hcomm_crds::contract::LABEL_GROUP): group}}}}
    }))?;
    let pp = PostParams::default();
    Api::<ValidatingAdmissionPolicy>::all(cluster.client.clone())
        .create(&pp, &policy)
        .await
        .context("create the refusing policy")?;
    Api::<ValidatingAdmissionPolicyBinding>::all(cluster.client.clone())
        .create(&pp, &binding)
        .await
        .context("bind the refusing policy")?;
    let probe = format!("{group}-probe");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": probe, "labels": {(hcomm_crds::contract::LABEL_GROUP): group}},
        "spec": {"containers": [{"name": "probe", "image": "probe"}]}
    }))?;
    pods.create(&pp, &pod)
        .await
        .context("create the probe Pod")?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.agent_kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let as_agent: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, NS);
    let body = json!({"status": {"conditions": [{"type": "example.com/probe", "status": "True"}]}});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match as_agent
            .patch_status(&probe, &PatchParams::default(), &Patch::Strategic(&body))
            .await
        {
            Err(kube::Error::Api(status)) if status.message.contains("refused for the test") => {
                break;
            }
            other => {
                if Instant::now() > deadline {
                    bail!(
                        "the policy did not refuse the agent's status write within 30 s: {other:?}"
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    pods.delete(&probe, &Default::default()).await?;
    Ok(())
}

/// The policy's and its binding's name.
fn policy_name(group: &str) -> String {
    format!("refuse-{group}-agent-status")
}

/// Undoes [`refuse_agent_status_writes`].
pub async fn accept_agent_status_writes(client: &kube::Client, group: &str) -> Result<()> {
    let name = policy_name(group);
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(&name, &Default::default())
        .await?;
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .delete(&name, &Default::default())
        .await?;
    Ok(())
}
