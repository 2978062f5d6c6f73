//! Driving pools the way a user does: `kubectl apply` of the example manifests,
//! `kubectl scale`, and waiting on what `kubectl get hcg` shows.

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use hcomm_crds::HcommGroup;
use hcomm_crds::contract::LABEL_GROUP;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use super::{Error, Result, Testbed};

/// The example manifests the demo applies, relative to the workspace root.
pub const EXAMPLE_MANIFESTS: [&str; 2] =
    ["examples/prefill-pool.yaml", "examples/decode-pool.yaml"];

/// The workspace root (for the example manifests).
pub fn workspace_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
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
    /// The node.
    pub node: String,
    /// Pod Ready (every readiness gate True).
    pub ready: bool,
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
        let mut all = String::new();
        for file in EXAMPLE_MANIFESTS {
            let path = workspace_root().join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(Error::io(format!("read {}", path.display())))?;
            all.push_str(&point_weights_at(&text, weights_source, digest));
            all.push_str("\n---\n");
        }
        self.kubectl_apply(&all)
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
                rank: p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(hcomm_crds::contract::LABEL_RANK).cloned())
                    .unwrap_or_default(),
                node: p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
                ready: is_ready(&p),
            })
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(members)
    }

    /// Waits until `group` has exactly `replicas` member Pods, all Ready, and its status
    /// says so (`readyReplicas`).
    pub async fn wait_pool_ready(
        &self,
        namespace: &str,
        group: &str,
        replicas: usize,
        within: Duration,
    ) -> Result<Vec<MemberPod>> {
        let groups: Api<HcommGroup> = Api::namespaced(self.client().await?, namespace);
        let deadline = Instant::now() + within;
        loop {
            let members = self.members(namespace, group).await?;
            let status_ready = groups
                .get_opt(group)
                .await
                .ok()
                .flatten()
                .and_then(|g| g.status)
                .map(|s| (s.ready_replicas, s.replicas));
            if members.len() == replicas
                && members.iter().all(|m| m.ready)
                && status_ready == Some((replicas as i32, replicas as i32))
            {
                return Ok(members);
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "{group}: {replicas} Ready members (now {members:?}, status ready/replicas {status_ready:?})"
                    ),
                    after: within,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
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
    fn only_the_weights_source_and_digest_are_repointed() {
        let text = "spec:\n  weights:\n    source: /var/lib/hcomm/models/demo\n    version: v1\n    digest: sha256:00\n";
        let out = point_weights_at(text, Path::new("/tmp/m"), "sha256:ab");
        assert_eq!(
            out,
            "spec:\n  weights:\n    source: /tmp/m\n    version: v1\n    digest: \"sha256:ab\""
        );
    }
}
