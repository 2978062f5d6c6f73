//! What the process kubelet runs for a Pod (pure): the container's program mapped to a
//! workspace binary, its arguments, and its environment with the downward API resolved,
//! and paths under volume mounts rewritten to where the process finds them — `hostPath`
//! volumes under the simulated host's root folder, CSI volumes at the view the process
//! kubelet made of their published directory ([`super::csi_volumes`]) — so a worker that
//! would open `/run/hcomm/agent.sock` in its container opens its own Pod's agent socket on
//! its own host here (`subPath` and `subPathExpr` are honoured, with `$(VAR)` from the
//! container's environment as a kubelet expands it). A read-only mount cannot be enforced
//! on a process without its own mount namespace; the agent's caller check, which the
//! process kubelet makes real with per-Pod cgroups, still applies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

/// One container to run as a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The container's name.
    pub container: String,
    /// The binary.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment (only this, plus `PATH`).
    pub env: Vec<(String, String)>,
}

/// The kubelet's root directory on a simulated host (its `--root-dir`).
pub fn kubelet_root(host_root: &Path) -> PathBuf {
    host_root.join("var/lib/kubelet")
}

/// Where a kubelet publishes the CSI volume `volume` of the Pod with `uid`.
pub fn csi_target(host_root: &Path, uid: &str, volume: &str) -> PathBuf {
    kubelet_root(host_root)
        .join("pods")
        .join(uid)
        .join("volumes/kubernetes.io~csi")
        .join(volume)
        .join("mount")
}

/// The launches for `pod` on a host whose root folder is `host_root`, its CSI volumes
/// published and seen at `csi_views` (volume name → path): one per container whose
/// `command[0]` names a known program. Containers the testbed cannot run (other images)
/// are left to kwok's fake status, and are listed in the second value.
pub fn plan(
    pod: &Pod,
    host_root: &Path,
    csi_views: &BTreeMap<String, PathBuf>,
    programs: &BTreeMap<String, PathBuf>,
) -> (Vec<Launch>, Vec<String>) {
    let Some(spec) = pod.spec.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    let mounts = volume_paths(pod, host_root, csi_views);
    let mut launches = Vec::new();
    let mut skipped = Vec::new();
    for c in &spec.containers {
        let program = c
            .command
            .as_ref()
            .and_then(|cmd| cmd.first())
            .and_then(|p| programs.get(p.rsplit('/').next().unwrap_or(p)));
        let Some(program) = program else {
            skipped.push(c.name.clone());
            continue;
        };
        let plain_env: BTreeMap<String, String> = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.clone(), env_value(pod, e)?)))
            .collect();
        let container_mounts = mounts_of(c, &mounts, &plain_env);
        let rewrite = |v: &str| rewrite_path(v, &container_mounts);
        let mut args: Vec<String> = c
            .command
            .iter()
            .flatten()
            .skip(1)
            .chain(c.args.iter().flatten())
            .map(|a| rewrite(a))
            .collect();
        args.retain(|a| !a.is_empty());
        let env = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.clone(), rewrite(&env_value(pod, e)?))))
            .collect();
        launches.push(Launch {
            container: c.name.clone(),
            program: program.clone(),
            args,
            env,
        });
    }
    (launches, skipped)
}

/// `volume name → path` of the Pod's volumes a process can see: hostPath volumes under
/// `host_root`, CSI volumes at their views.
fn volume_paths(
    pod: &Pod,
    host_root: &Path,
    csi_views: &BTreeMap<String, PathBuf>,
) -> BTreeMap<String, PathBuf> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            let path = match (&v.host_path, &v.csi) {
                (Some(h), _) => host_root.join(h.path.trim_start_matches('/')),
                (None, Some(_)) => csi_views.get(&v.name)?.clone(),
                (None, None) => return None,
            };
            Some((v.name.clone(), path))
        })
        .collect()
}

/// `(mount path in the container, path the process sees)` for the container's volume
/// mounts, with `subPath`/`subPathExpr` appended, longest mount path first so nested mounts
/// win. A
/// `subPathExpr` naming a variable the container lacks, or leaving the volume (`..`, an
/// absolute path), is not mounted at all, as a kubelet refuses to start such a container.
fn mounts_of(
    c: &Container,
    host: &BTreeMap<String, PathBuf>,
    env: &BTreeMap<String, String>,
) -> Vec<(String, PathBuf)> {
    let mut m: Vec<(String, PathBuf)> = c
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|vm| {
            let base = host.get(&vm.name)?.clone();
            let sub = match (&vm.sub_path_expr, &vm.sub_path) {
                (Some(expr), _) => expand(expr, env)?,
                (None, Some(sub)) => sub.clone(),
                (None, None) => String::new(),
            };
            if sub.starts_with('/') || sub.split('/').any(|p| p == "..") {
                return None;
            }
            let path = if sub.is_empty() { base } else { base.join(sub) };
            Some((vm.mount_path.clone(), path))
        })
        .collect();
    m.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    m
}

/// `$(VAR)` in a `subPathExpr` replaced by the variable's value; None when one is unset.
fn expand(expr: &str, env: &BTreeMap<String, String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(start) = rest.find("$(") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find(')')? + start;
        out.push_str(env.get(&rest[start + 2..end])?);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// `value` with a leading container mount path replaced by the path the process sees.
fn rewrite_path(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount, path) in mounts {
        let mount = mount.trim_end_matches('/');
        if let Some(rest) = value.strip_prefix(mount)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{}{rest}", path.display());
        }
    }
    value.to_owned()
}

/// A variable's value: literal, or the downward API fields a kubelet resolves.
fn env_value(pod: &Pod, e: &k8s_openapi::api::core::v1::EnvVar) -> Option<String> {
    if let Some(v) = &e.value {
        return Some(v.clone());
    }
    let field = e
        .value_from
        .as_ref()?
        .field_ref
        .as_ref()?
        .field_path
        .as_str();
    let meta = &pod.metadata;
    let status = pod.status.as_ref();
    let indexed = |map: &Option<BTreeMap<String, String>>, prefix: &str| {
        let key = field.strip_prefix(prefix)?.strip_suffix("']")?;
        map.as_ref()?.get(key).cloned()
    };
    match field {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => pod.spec.as_ref()?.node_name.clone(),
        "spec.serviceAccountName" => pod.spec.as_ref()?.service_account_name.clone(),
        "status.podIP" => status?.pod_ip.clone(),
        "status.hostIP" => status?.host_ip.clone(),
        f if f.starts_with("metadata.labels['") => indexed(&meta.labels, "metadata.labels['"),
        f if f.starts_with("metadata.annotations['") => {
            indexed(&meta.annotations, "metadata.annotations['")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "decode-2-e3", "namespace": "default", "uid": "u-1",
                         "labels": {(hcomm_crds::contract::LABEL_RANK): "2"}},
            "spec": {"nodeName": "host-1",
                "volumes": [{"name": "sock", "hostPath": {"path": "/run/hcomm"}},
                            {"name": "rt", "configMap": {"name": "decode-rank-table"}}],
                "containers": [
                    {"name": "worker", "image": "hcomm/example-worker",
                     "command": ["/usr/local/bin/hcomm-worker"], "args": ["--step-ms", "20"],
                     "volumeMounts": [{"name": "sock", "mountPath": "/run/hcomm"},
                                      {"name": "rt", "mountPath": hcomm_crds::rank_table::MOUNT_DIR}],
                     "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['hcomm.io/rank']"}}},
                        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        {"name": hcomm_crds::contract::env::AGENT_SOCKET, "value": "/run/hcomm/agent.sock"},
                        {"name": hcomm_crds::contract::env::RANK_TABLE_FILE, "value": hcomm_crds::rank_table::RANK_TABLE_FILE},
                        {"name": "OTHER", "value": "/run/hcommx"}]},
                    {"name": "sidecar", "image": "envoy"}]},
            "status": {"podIP": "10.244.0.7", "hostIP": "198.19.0.10"}
        }))
        .unwrap()
    }

    #[test]
    fn known_programs_run_with_the_downward_api_and_host_paths_resolved() {
        let programs = BTreeMap::from([("hcomm-worker".to_owned(), PathBuf::from("/bin/w"))]);
        let (launches, skipped) = plan(
            &pod(),
            Path::new("/tmp/tb/host-1"),
            &BTreeMap::new(),
            &programs,
        );
        assert_eq!(skipped, vec!["sidecar".to_owned()]);
        let l = &launches[0];
        assert_eq!(l.program, PathBuf::from("/bin/w"));
        assert_eq!(l.args, vec!["--step-ms", "20"]);
        let env: BTreeMap<_, _> = l.env.iter().cloned().collect();
        assert_eq!(env["POD_NAME"], "decode-2-e3");
        assert_eq!(env["POD_IP"], "10.244.0.7");
        assert_eq!(env["RANK"], "2");
        assert!(
            !env.contains_key("SECRET"),
            "unsupported sources are left out"
        );
        assert_eq!(
            env[hcomm_crds::contract::env::AGENT_SOCKET],
            "/tmp/tb/host-1/run/hcomm/agent.sock"
        );
        // Not a hostPath mount, and a mere prefix of a name is not a path prefix.
        assert_eq!(
            env[hcomm_crds::contract::env::RANK_TABLE_FILE],
            hcomm_crds::rank_table::RANK_TABLE_FILE
        );
        assert_eq!(env["OTHER"], "/run/hcommx");
    }

    #[test]
    fn a_sub_path_expr_mount_resolves_to_the_pods_own_directory() {
        let mut p = pod();
        let spec = p.spec.as_mut().unwrap();
        spec.volumes.as_mut().unwrap()[0]
            .host_path
            .as_mut()
            .unwrap()
            .path = "/run/hcomm/pods".into();
        let c = &mut spec.containers[0];
        c.volume_mounts.as_mut().unwrap()[0].sub_path_expr = Some("$(UID)".into());
        c.env.as_mut().unwrap().push(
            serde_json::from_value(serde_json::json!(
                {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}))
            .unwrap(),
        );
        let programs = BTreeMap::from([("hcomm-worker".to_owned(), PathBuf::from("/bin/w"))]);
        let (launches, _) = plan(&p, Path::new("/tmp/tb/host-1"), &BTreeMap::new(), &programs);
        let env: BTreeMap<_, _> = launches[0].env.iter().cloned().collect();
        assert_eq!(
            env[hcomm_crds::contract::env::AGENT_SOCKET],
            "/tmp/tb/host-1/run/hcomm/pods/u-1/agent.sock"
        );
        // An unset variable or a path out of the volume mounts nothing.
        for expr in ["$(NOPE)", "../$(UID)"] {
            let mut q = p.clone();
            q.spec.as_mut().unwrap().containers[0]
                .volume_mounts
                .as_mut()
                .unwrap()[0]
                .sub_path_expr = Some(expr.into());
            let (launches, _) = plan(&q, Path::new("/tmp/tb/host-1"), &BTreeMap::new(), &programs);
            let env: BTreeMap<_, _> = launches[0].env.iter().cloned().collect();
            assert_eq!(
                env[hcomm_crds::contract::env::AGENT_SOCKET],
                "/run/hcomm/agent.sock",
                "{expr}"
            );
        }
    }

    #[test]
    fn a_csi_volume_mount_resolves_to_its_view_and_an_unpublished_one_to_nothing() {
        let mut p = pod();
        p.spec.as_mut().unwrap().volumes.as_mut().unwrap()[0] = serde_json::from_value(
            serde_json::json!({"name": "sock", "csi": {"driver": "local-api.hcomm.io", "readOnly": true}}),
        )
        .unwrap();
        let programs = BTreeMap::from([("hcomm-worker".to_owned(), PathBuf::from("/bin/w"))]);
        let views = BTreeMap::from([("sock".to_owned(), PathBuf::from("/tmp/tb/v/u-1/sock"))]);
        let (launches, _) = plan(&p, Path::new("/tmp/tb/host-1"), &views, &programs);
        let env: BTreeMap<_, _> = launches[0].env.iter().cloned().collect();
        assert_eq!(
            env[hcomm_crds::contract::env::AGENT_SOCKET],
            "/tmp/tb/v/u-1/sock/agent.sock"
        );
        let (launches, _) = plan(&p, Path::new("/tmp/tb/host-1"), &BTreeMap::new(), &programs);
        let env: BTreeMap<_, _> = launches[0].env.iter().cloned().collect();
        assert_eq!(
            env[hcomm_crds::contract::env::AGENT_SOCKET],
            "/run/hcomm/agent.sock"
        );
        assert_eq!(
            csi_target(Path::new("/tb/h"), "u-1", "sock"),
            PathBuf::from("/tb/h/var/lib/kubelet/pods/u-1/volumes/kubernetes.io~csi/sock/mount")
        );
    }

    #[test]
    fn a_pod_without_known_programs_is_left_alone() {
        let (launches, skipped) = plan(&pod(), Path::new("/r"), &BTreeMap::new(), &BTreeMap::new());
        assert!(launches.is_empty());
        assert_eq!(skipped.len(), 2);
    }
}
