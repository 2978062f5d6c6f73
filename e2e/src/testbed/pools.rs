//! Driving pools the way a user does: `kubectl apply` of the example manifests,
//! `kubectl scale`, and reading the members as `kubectl get pods` shows them (the waits on
//! them are in `pool_waits`).

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;

use hcomm_crds::contract::{
    ANNOTATION_DRAIN_REQUESTED, LABEL_GROUP, LABEL_STANDBY, POD_MEMBER_READY, PodReason,
    STANDBY_TRUE,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde::Deserialize as _;

use super::{CommPatch, Error, Result, Testbed};

/// The example manifests the demo applies, relative to the workspace root.
pub const EXAMPLE_MANIFESTS: [&str; 2] =
    ["examples/prefill-pool.yaml", "examples/decode-pool.yaml"];

/// The workspace root (for the example manifests).
pub fn workspace_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// What [`Testbed::apply_pool_copy`] changes in an example pool.
#[derive(Debug, Clone)]
pub struct PoolCopy<'a> {
    /// The example file, relative to the workspace root.
    pub example: &'a str,
    /// The copy's group and Service name.
    pub name: &'a str,
    pub replicas: u32,
    pub devices_per_member: u32,
    pub weights_source: &'a Path,
    pub digest: &'a str,
}

/// A group's members as `kubectl get pods -l hcomm.io/group=<name>` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberPod {
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// `hcomm.io/rank`.
    pub rank: String,
    /// The member index (`hcomm.io/member-index`), when labelled.
    pub index: Option<i32>,
    /// The revision it was made from (`hcomm.io/revision`).
    pub revision: String,
    /// The node.
    pub node: String,
    /// Pod Ready (every readiness gate True).
    pub ready: bool,
    /// Labelled a warm standby by the operator (`hcomm.io/standby`).
    pub standby: bool,
    /// Its agent holds it as a warm standby: joined, the gate False for `Standby`.
    pub warm: bool,
    /// The operator asked it to drain (`hcomm.io/drain-requested`).
    pub draining: bool,
}

impl Testbed {
    /// `kubectl apply -f -` of `manifests` (YAML text).
    pub fn kubectl_apply(&self, manifests: &str) -> Result<String> {
        let mut child = self
            .cp
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::io("run kubectl apply"))?;
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(manifests.as_bytes())
            .map_err(Error::io("write to kubectl"))?;
        let out = child
            .wait_with_output()
            .map_err(Error::io("wait for kubectl"))?;
        kubectl_result("apply", out)
    }

    /// `kubectl <args>`.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = self
            .cp
            .kubectl()
            .args(args)
            .output()
            .map_err(Error::io(format!("run kubectl {}", args.join(" "))))?;
        kubectl_result(&args.join(" "), out)
    }

    /// Applies the example prefill and decode pools with their weights pointed at
    /// `weights_source` with `digest` (the examples name a path on real nodes).
    pub fn apply_examples(&self, weights_source: &Path, digest: &str) -> Result<String> {
        self.apply_examples_on(weights_source, digest, &CommPatch::default())
    }

    /// [`Testbed::apply_examples`] with the examples' `comm` changed as `comm` says.
    pub fn apply_examples_on(
        &self,
        weights_source: &Path,
        digest: &str,
        comm: &CommPatch,
    ) -> Result<String> {
        let mut all = String::new();
        for file in EXAMPLE_MANIFESTS {
            let path = workspace_root().join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(Error::io(format!("read {}", path.display())))?;
            let text = point_weights_at(&text, weights_source, digest);
            let text = comm.apply(&text);
            all.push_str(&self.on_these_hosts(&text));
            all.push_str("\n---\n");
        }
        self.kubectl_apply(&all)
    }

    /// Applies a copy of an example pool under another name (for a scenario that needs a
    /// group of its own): the `HcommGroup` and its Service renamed, the Service selecting
    /// the new group, `replicas` and `devicesPerMember` set (`maxReplicas` raised to `replicas` if below),
    /// the weights repointed.
    pub fn apply_pool_copy(&self, copy: &PoolCopy<'_>) -> Result<String> {
        let path = workspace_root().join(copy.example);
        let text = std::fs::read_to_string(&path)
            .map_err(Error::io(format!("read {}", path.display())))?;
        let text = point_weights_at(&text, copy.weights_source, copy.digest);
        self.kubectl_apply(&renamed_pool(&self.on_these_hosts(&text), copy)?)
    }

    /// The examples name the data NICs `data*` (`socketIfname: "data"`), as the namespace
    /// hosts have them; loopback hosts have only `lo`.
    fn on_these_hosts(&self, text: &str) -> String {
        if self.hosts.is_isolated() {
            text.to_owned()
        } else {
            socket_ifname(text, "lo")
        }
    }

    /// `kubectl scale hcg/<group> --replicas=<n>`.
    pub fn scale(&self, group: &str, replicas: u32) -> Result<String> {
        self.kubectl(&[
            "scale",
            &format!("hcg/{group}"),
            &format!("--replicas={replicas}"),
        ])
    }

    /// The group's member Pods, by name.
    pub async fn members(&self, namespace: &str, group: &str) -> Result<Vec<MemberPod>> {
        let pods: Api<Pod> = Api::namespaced(self.client().await?, namespace);
        let list = pods
            .list(&ListParams::default().labels(&format!("{LABEL_GROUP}={group}")))
            .await
            .map_err(Error::kube(format!("list pods of {group}")))?;
        let mut members: Vec<MemberPod> = list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| MemberPod {
                name: p.metadata.name.clone().unwrap_or_default(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                rank: label(&p, hcomm_crds::contract::LABEL_RANK).unwrap_or_default(),
                index: label(&p, hcomm_crds::contract::LABEL_MEMBER_INDEX)
                    .and_then(|i| i.parse().ok()),
                revision: label(&p, hcomm_crds::contract::LABEL_REVISION).unwrap_or_default(),
                node: p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
                ready: is_ready(&p),
                standby: label(&p, LABEL_STANDBY).is_some_and(|v| v == STANDBY_TRUE),
                warm: held_as_standby(&p),
                draining: p
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(ANNOTATION_DRAIN_REQUESTED)),
            })
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(members)
    }
}

/// Whether the agent holds the Pod's readiness gate False as a warm standby.
fn held_as_standby(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == POD_MEMBER_READY
                    && c.status == "False"
                    && c.reason.as_deref() == Some(PodReason::Standby.as_str())
            })
        })
}

/// A Pod condition as (status, reason, message), when the Pod has it.
pub fn condition_of(p: &Pod, type_: &str) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// A label's value.
fn label(p: &Pod, key: &str) -> Option<String> {
    p.metadata.labels.as_ref()?.get(key).cloned()
}

/// The Pod's `Ready` condition is True (every readiness gate is).
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn kubectl_result(what: &str, out: std::process::Output) -> Result<String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Io {
            what: format!("kubectl {what}"),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
        })
    }
}

/// The example's documents with the group and its Service renamed to `copy.name` (pure).
fn renamed_pool(text: &str, copy: &PoolCopy<'_>) -> Result<String> {
    use serde_yaml::Value;
    let invalid = |what: String| Error::Io {
        what: format!("copy of {}", copy.example),
        source: std::io::Error::other(what),
    };
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let mut v = Value::deserialize(doc).map_err(|e| invalid(e.to_string()))?;
        let kind = v
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        v["metadata"]["name"] = copy.name.into();
        match kind.as_str() {
            "HcommGroup" => {
                v["spec"]["replicas"] = copy.replicas.into();
                v["spec"]["devicesPerMember"] = copy.devices_per_member.into();
                // The example's bound raised to the copy's size (never lowered).
                let max = v["spec"]["maxReplicas"].as_u64().unwrap_or(0);
                if max < u64::from(copy.replicas) {
                    v["spec"]["maxReplicas"] = copy.replicas.into();
                }
            }
            "Service" => v["spec"]["selector"][LABEL_GROUP] = copy.name.into(),
            other => return Err(invalid(format!("unexpected kind {other:?}"))),
        }
        out.push(serde_yaml::to_string(&v).map_err(|e| invalid(e.to_string()))?);
    }
    Ok(out.join("---\n"))
}

/// The manifest text with every `socketIfname:` set to `ifname` (pure).
fn socket_ifname(text: &str, ifname: &str) -> String {
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            if trimmed.starts_with("socketIfname:") {
                format!("{indent}socketIfname: \"{ifname}\"")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The manifest text with the weights' `source:` and `digest:` replaced.
fn point_weights_at(text: &str, dir: &Path, digest: &str) -> String {
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            if trimmed.starts_with("source:") {
                format!("{indent}source: {}", dir.display())
            } else if trimmed.starts_with("digest:") {
                format!("{indent}digest: \"{digest}\"")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_copy_renames_the_group_and_its_service_selector() {
        let text = std::fs::read_to_string(workspace_root().join("examples/decode-pool.yaml"))
            .expect("example");
        let copy = PoolCopy {
            example: "examples/decode-pool.yaml",
            name: "spare",
            replicas: 3,
            devices_per_member: 2,
            weights_source: Path::new("/m"),
            digest: "sha256:ab",
        };
        let out = renamed_pool(&text, &copy).expect("copy");
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&out)
            .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
            .collect();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["metadata"]["name"], "spare");
        assert_eq!(docs[0]["spec"]["replicas"], 3);
        assert_eq!(docs[0]["spec"]["devicesPerMember"], 2);
        assert_eq!(docs[0]["spec"]["role"], "decode");
        assert_eq!(docs[1]["metadata"]["name"], "spare");
        assert_eq!(docs[1]["spec"]["selector"][LABEL_GROUP], "spare");
    }

    #[test]
    fn loopback_hosts_get_lo_as_the_socket_interface() {
        let text = "spec:\n  comm:\n    backend: tcp\n    socketIfname: \"data\"\n";
        assert_eq!(
            socket_ifname(text, "lo"),
            "spec:\n  comm:\n    backend: tcp\n    socketIfname: \"lo\""
        );
    }

    #[test]
    fn only_the_weights_source_and_digest_are_repointed() {
        let text = "spec:\n  weights:\n    source: /var/lib/hcomm/models/demo\n    version: v1\n    digest: sha256:00\n";
        let out = point_weights_at(text, Path::new("/tmp/m"), "sha256:ab");
        assert_eq!(
            out,
            "spec:\n  weights:\n    source: /tmp/m\n    version: v1\n    digest: \"sha256:ab\""
        );
    }
}
