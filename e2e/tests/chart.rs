//! The Helm chart with the real `helm`: lint, render for both modes, refuse bad values,
//! install into a real control plane, and RBAC that allows what hcomm needs and refuses
//! the rest (`kubectl auth can-i` as the chart's ServiceAccounts).
//! Size: one named test per chart behaviour, sharing the render and helm helpers above them.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions, assets};
use serde_yaml::Value;

use hcomm_e2e::chart::CHART;
const NAMESPACE: &str = "hcomm-system";

fn output(mut command: Command) -> Result<Output> {
    let shown = format!("{command:?}");
    command.output().with_context(|| format!("running {shown}"))
}

fn ok(command: Command) -> Result<String> {
    let shown = format!("{command:?}");
    let out = output(command)?;
    if !out.status.success() {
        bail!(
            "{shown} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn helm_cmd(args: &[&str]) -> Result<Command> {
    Ok(hcomm_e2e::chart::helm_command(args)?)
}

fn render(extra: &[&str]) -> Result<Vec<Value>> {
    Ok(hcomm_e2e::chart::render(extra)?)
}

fn find<'a>(docs: &'a [Value], kind: &str, name_suffix: &str) -> Result<&'a Value> {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(name_suffix))
        })
        .with_context(|| format!("no {kind} named *{name_suffix} in the rendered chart"))
}

#[test]
fn the_chart_lints_clean_in_both_modes() -> Result<()> {
    ok(helm_cmd(&["lint", "--strict", CHART])?)?;
    ok(helm_cmd(&[
        "lint",
        "--strict",
        CHART,
        "--set",
        "agent.mode=cpu",
    ])?)?;
    Ok(())
}

#[test]
fn the_default_render_is_an_ascend_install_with_device_mounts() -> Result<()> {
    let docs = render(&[])?;
    let agent = find(&docs, "DaemonSet", "-agent")?;
    let pod = &agent["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], Value::Bool(true));
    let mounts: Vec<&str> = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .context("agent mounts")?
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    for path in [
        "/dev/davinci0",
        "/dev/davinci7",
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/usr/local/Ascend/driver",
        "/dev/shm",
    ] {
        assert!(
            mounts.contains(&path),
            "{path} not mounted into the agent: {mounts:?}"
        );
    }
    assert_eq!(
        pod["nodeSelector"]["accelerator"],
        Value::from("huawei-Ascend910")
    );
    let operator = find(&docs, "Deployment", "-operator")?;
    assert_eq!(operator["spec"]["replicas"], Value::from(2));
    let container = &operator["spec"]["template"]["spec"]["containers"][0];
    assert!(container["livenessProbe"].is_mapping() && container["readinessProbe"].is_mapping());
    assert!(container["resources"]["requests"]["cpu"].is_string());
    assert!(
        container["image"]
            .as_str()
            .is_some_and(|i| i.ends_with("/hcomm-operator:0.1.0"))
    );
    Ok(())
}

#[test]
fn cpu_mode_renders_without_npu_mounts_or_node_selector() -> Result<()> {
    let docs = render(&["--set", "agent.mode=cpu", "--set", "image.tag=dev"])?;
    let agent = find(&docs, "DaemonSet", "-agent")?;
    let pod = &agent["spec"]["template"]["spec"];
    let rendered = serde_yaml::to_string(pod)?;
    assert!(
        !rendered.contains("davinci"),
        "cpu mode mounts NPU devices:\n{rendered}"
    );
    assert!(pod["nodeSelector"].is_null());
    assert!(rendered.contains("--cpu-devices=8"));
    // The flags the chart passes are the agent's own (`hcomm-agent --help`).
    for flag in [
        "--probe-secret-file=/etc/hcomm/secret/probe-secret",
        "--probe-port=7510",
        "--weights-port=7512",
        "--weights-gc-grace-secs=600",
        "--health-interval-secs=10",
        "--socket=/run/hcomm/agent.sock",
        "--pod-sockets-dir=/run/hcomm/pods",
        // Members request the group's NPU resource in cpu mode too; the agent cross-checks
        // what the kubelet allocated (the real-node test found this mount missing).
        "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
    ] {
        assert!(
            rendered.contains(flag),
            "{flag} missing from the agent args:\n{rendered}"
        );
    }
    let agent = agent_container(&["--set", "agent.mode=cpu"])?;
    assert!(
        agent.mounts.iter().any(
            |(path, read_only, host)| path == "/var/lib/kubelet/pod-resources"
                && *read_only
                && host == "/var/lib/kubelet/pod-resources"
        ),
        "the PodResources directory, read-only: {:?}",
        agent.mounts
    );
    assert!(
        pod["containers"][0]["image"]
            .as_str()
            .is_some_and(|i| i.ends_with(":dev"))
    );
    Ok(())
}

/// The agent's container in a render: its args, mounts (path → readOnly) and the
/// hostPath type of each mounted volume.
struct AgentContainer {
    pod: Value,
    args: Vec<String>,
    mounts: Vec<(String, bool, String)>,
}

fn agent_container(extra: &[&str]) -> Result<AgentContainer> {
    let docs = render(extra)?;
    let pod = find(&docs, "DaemonSet", "-agent")?["spec"]["template"]["spec"].clone();
    let container = &pod["containers"][0];
    let args = container["args"]
        .as_sequence()
        .context("agent args")?
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let volumes = pod["volumes"].as_sequence().context("agent volumes")?;
    let mut mounts = Vec::new();
    for m in container["volumeMounts"]
        .as_sequence()
        .context("agent mounts")?
    {
        let name = m["name"].as_str().context("mount name")?;
        let volume = volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .with_context(|| format!("mount {name} has no volume"))?;
        mounts.push((
            m["mountPath"].as_str().context("mountPath")?.to_owned(),
            m["readOnly"] == Value::Bool(true),
            volume["hostPath"]["path"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        ));
    }
    Ok(AgentContainer { pod, args, mounts })
}

#[test]
fn the_local_api_reaches_pods_through_the_csi_driver_unless_host_path_is_chosen() -> Result<()> {
    let docs = render(&[])?;
    let driver = find(&docs, "CSIDriver", "local-api.hcomm.io")?;
    let spec = &driver["spec"];
    assert_eq!(spec["attachRequired"], Value::Bool(false));
    assert_eq!(spec["podInfoOnMount"], Value::Bool(true));
    assert_eq!(spec["fsGroupPolicy"].as_str(), Some("None"));
    assert_eq!(
        spec["volumeLifecycleModes"],
        serde_yaml::from_str::<Value>("[Ephemeral]")?
    );
    let operator = serde_yaml::to_string(&find(&docs, "Deployment", "-operator")?)?;
    assert!(operator.contains("--local-api-volume=csi"), "{operator}");
    let agent = agent_container(&[])?;
    for flag in [
        "--local-api-csi=true",
        "--kubelet-root-dir=/var/lib/kubelet",
        "--csi-socket=/var/lib/kubelet/plugins/local-api.hcomm.io/csi.sock",
        "--kubelet-registration-dir=/var/lib/kubelet/plugins_registry",
    ] {
        assert!(
            agent.args.iter().any(|a| a == flag),
            "{flag}: {:?}",
            agent.args
        );
    }
    // The driver's sockets and the Pods' directories, each at its host path, writable.
    let csi_paths = [
        "/var/lib/kubelet/plugins/local-api.hcomm.io",
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/pods",
    ];
    for path in csi_paths {
        assert!(
            agent
                .mounts
                .iter()
                .any(|(at, ro, host)| at == path && host == path && !ro),
            "{path}: {:?}",
            agent.mounts
        );
    }

    let docs = render(&["--set", "localApi.volume=host-path"])?;
    assert!(find(&docs, "CSIDriver", "local-api.hcomm.io").is_err());
    let operator = serde_yaml::to_string(&find(&docs, "Deployment", "-operator")?)?;
    assert!(
        operator.contains("--local-api-volume=host-path"),
        "{operator}"
    );
    let agent = agent_container(&["--set", "localApi.volume=host-path"])?;
    assert!(agent.args.iter().any(|a| a == "--local-api-csi=false"));
    assert!(
        agent
            .mounts
            .iter()
            .all(|(at, _, _)| !csi_paths.contains(&at.as_str())),
        "{:?}",
        agent.mounts
    );

    let out = output(helm_cmd(&[
        "template",
        "hcomm",
        CHART,
        "--set",
        "localApi.volume=emptyDir",
    ])?)?;
    assert!(
        !out.status.success(),
        "an unknown local-API volume rendered"
    );
    Ok(())
}

/// The host paths the agent reads on a real Ascend node (ASCEND.md §3, §7).
const ASCEND_HOST_FILES: [&str; 7] = [
    "/usr/local/Ascend/driver",
    "/usr/local/Ascend/firmware/version.info",
    "/etc/ascend_install.info",
    "/usr/local/dcmi",
    "/etc/hccn.conf",
    "/usr/local/sbin/npu-smi",
    "/usr/local/Ascend/ascend-toolkit",
];

#[test]
fn ascend_mode_mounts_the_driver_tools_and_version_files_read_only_at_their_host_paths()
-> Result<()> {
    let agent = agent_container(&[])?;
    for path in ASCEND_HOST_FILES {
        let (_, read_only, host) = agent
            .mounts
            .iter()
            .find(|(p, _, _)| p == path)
            .with_context(|| format!("{path} not mounted: {:?}", agent.mounts))?;
        assert!(*read_only, "{path} is mounted writable");
        assert_eq!(host, path, "{path} mounted from another host path");
    }
    // hccn_tool lies under the driver mount; the agent is told where each tool and file is.
    for flag in [
        "--hccn-tool=/usr/local/Ascend/driver/tools/hccn_tool",
        "--hccn-conf=/etc/hccn.conf",
        "--ascend-root=/usr/local/Ascend",
    ] {
        assert!(
            agent.args.iter().any(|a| a == flag),
            "{flag} missing: {:?}",
            agent.args
        );
    }
    assert!(!agent.args.iter().any(|a| a.starts_with("--cpu-devices")));
    let selector = &agent.pod["nodeSelector"];
    assert_eq!(
        selector.as_mapping().map(|m| m.len()),
        Some(1),
        "{selector:?}"
    );
    assert_eq!(
        selector[hcomm_crds::contract::ascend::LABEL_ACCELERATOR],
        Value::from(hcomm_crds::contract::ascend::ACCELERATOR_ASCEND910)
    );
    assert_eq!(
        agent.pod["tolerations"][0]["key"],
        Value::from(hcomm_crds::contract::ascend::RESOURCE_ASCEND910)
    );
    Ok(())
}

#[test]
fn the_ascend_node_selector_tolerations_and_paths_are_values() -> Result<()> {
    let agent = agent_container(&[
        "--set",
        "agent.nodeSelector.accelerator=huawei-Ascend310P",
        "--set",
        "agent.tolerations[0].key=npu",
        "--set",
        "agent.tolerations[0].operator=Exists",
        "--set",
        "agent.ascend.hccnConfPath=/opt/hccn.conf",
        "--set",
        "agent.ascend.toolkitPath=",
    ])?;
    assert_eq!(
        agent.pod["nodeSelector"]["accelerator"],
        Value::from("huawei-Ascend310P")
    );
    assert_eq!(agent.pod["tolerations"][0]["key"], Value::from("npu"));
    assert!(agent.args.iter().any(|a| a == "--hccn-conf=/opt/hccn.conf"));
    assert!(
        agent
            .mounts
            .iter()
            .any(|(p, ro, h)| p == "/opt/hccn.conf" && *ro && h == "/opt/hccn.conf")
    );
    // An empty path mounts nothing (no hostPath type check that would hold the Pod back).
    assert!(
        !agent
            .mounts
            .iter()
            .any(|(p, _, _)| p.contains("ascend-toolkit")),
        "{:?}",
        agent.mounts
    );
    Ok(())
}

#[test]
fn the_agent_is_not_privileged_by_default_and_has_only_net_raw() -> Result<()> {
    for mode in ["ascend", "cpu"] {
        let agent = agent_container(&["--set", &format!("agent.mode={mode}")])?;
        let sc = &agent.pod["containers"][0]["securityContext"];
        assert_eq!(sc["privileged"], Value::Bool(false), "{mode}: {sc:?}");
        assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false), "{mode}");
        assert_eq!(
            sc["capabilities"],
            serde_yaml::from_str::<Value>("{drop: [ALL], add: [NET_RAW]}")?,
            "{mode}"
        );
    }
    // Extra capabilities are the admin's, added to NET_RAW, never replacing it.
    let agent = agent_container(&["--set", "agent.extraCapabilities={DAC_READ_SEARCH,NET_RAW}"])?;
    assert_eq!(
        agent.pod["containers"][0]["securityContext"]["capabilities"]["add"],
        serde_yaml::from_str::<Value>("[NET_RAW, DAC_READ_SEARCH]")?
    );
    Ok(())
}

#[test]
fn privileged_is_an_ascend_opt_in_that_keeps_the_mounts_read_only() -> Result<()> {
    let agent = agent_container(&["--set", "agent.ascend.privileged=true"])?;
    let sc = &agent.pod["containers"][0]["securityContext"];
    assert_eq!(sc["privileged"], Value::Bool(true));
    // The API server refuses privileged with allowPrivilegeEscalation=false.
    assert!(sc["allowPrivilegeEscalation"].is_null(), "{sc:?}");
    for path in ASCEND_HOST_FILES {
        assert!(
            agent.mounts.iter().any(|(p, ro, _)| p == path && *ro),
            "{path} not read-only when privileged"
        );
    }
    // cpu mode has no driver to reach: the value does nothing there.
    let cpu = agent_container(&[
        "--set",
        "agent.mode=cpu",
        "--set",
        "agent.ascend.privileged=true",
    ])?;
    assert_eq!(
        cpu.pod["containers"][0]["securityContext"]["privileged"],
        Value::Bool(false)
    );
    assert!(
        cpu.mounts
            .iter()
            .all(|(p, _, _)| !p.starts_with("/usr/local"))
    );
    Ok(())
}

#[test]
fn bad_ascend_values_fail_at_install_time() -> Result<()> {
    for (set, words) in [
        (
            "agent.ascend.hccnConfPath=etc/hccn.conf",
            "/agent/ascend/hccnConfPath",
        ),
        ("agent.ascend.privileged=yes", "/agent/ascend/privileged"),
        (
            "agent.extraCapabilities={CAP_SYS_ADMIN}",
            "/agent/extraCapabilities",
        ),
    ] {
        let kube_version = assets::kubernetes_version()?;
        let out = output(helm_cmd(&[
            "template",
            "hcomm",
            CHART,
            "--kube-version",
            &kube_version,
            "--set",
            set,
        ])?)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} must be refused");
        assert!(
            stderr.contains(words),
            "{set}: the error should name {words}: {stderr}"
        );
    }
    Ok(())
}

#[test]
fn bad_values_fail_at_install_time() -> Result<()> {
    for (set, words) in [
        ("agent.mode=gpu", "/agent/mode"),
        ("operator.replicas=0", "/operator/replicas"),
        ("agent.socketIfname=eth 0", "/agent/socketIfname"),
        ("agent.dataPort=70000", "/agent/dataPort"),
        ("operator.bogus=1", "bogus"),
        (
            "apiPriority.priorityLevel=Workload High",
            "/apiPriority/priorityLevel",
        ),
    ] {
        let kube_version = assets::kubernetes_version()?;
        let out = output(helm_cmd(&[
            "template",
            "hcomm",
            CHART,
            "--kube-version",
            &kube_version,
            "--set",
            set,
        ])?)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} must be refused");
        assert!(
            stderr.contains("values don't meet the specifications of the schema"),
            "{set}: {stderr}"
        );
        assert!(
            stderr.contains(words),
            "{set}: the error should name {words}: {stderr}"
        );
    }
    Ok(())
}

#[test]
fn the_operator_may_write_volcano_pod_groups_and_nothing_more_of_them() -> Result<()> {
    use hcomm_crds::contract::volcano;
    let docs = render(&[])?;
    let role = find(&docs, "ClusterRole", "-operator-podgroups")?;
    let expected: Value = serde_yaml::from_str(&format!(
        "[{{apiGroups: [{}], resources: [{}], verbs: [get, create, patch]}}]",
        volcano::API_GROUP,
        volcano::PLURAL
    ))?;
    assert_eq!(role["rules"], expected);
    let binding = find(&docs, "ClusterRoleBinding", "-operator-podgroups")?;
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert!(
        binding["subjects"][0]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-operator"))
    );
    Ok(())
}

#[test]
fn flow_schemas_name_the_charts_service_accounts_and_can_be_left_out() -> Result<()> {
    // (FlowSchema, its ServiceAccount, its priority level) of a render, in order.
    fn schemas(extra: &[&str]) -> Result<Vec<(String, String, String)>> {
        let docs = render(extra)?;
        let field = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let mut out = Vec::new();
        for d in docs.iter().filter(|d| d["kind"] == "FlowSchema") {
            let subject = &d["spec"]["rules"][0]["subjects"][0]["serviceAccount"];
            find(
                &docs,
                "ServiceAccount",
                subject["name"].as_str().unwrap_or("?"),
            )?;
            assert_eq!(subject["namespace"].as_str(), Some(NAMESPACE));
            out.push((
                field(&d["metadata"]["name"]),
                field(&subject["name"]),
                field(&d["spec"]["priorityLevelConfiguration"]["name"]),
            ));
        }
        Ok(out)
    }
    let levels = |schemas: Vec<(String, String, String)>| -> Vec<String> {
        schemas.into_iter().map(|(_, _, level)| level).collect()
    };
    let named = schemas(&[])?;
    let named: Vec<(&str, &str, &str)> = named
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            (
                "hcomm-operator-leader-election",
                "hcomm-operator",
                "leader-election"
            ),
            ("hcomm-operator", "hcomm-operator", "workload-high"),
            ("hcomm-agent", "hcomm-agent", "workload-high"),
        ]
    );
    let chosen = schemas(&[
        "--set",
        "apiPriority.priorityLevel=hcomm-serving",
        "--set",
        "apiPriority.leaderElectionPriorityLevel=hcomm-leases",
    ])?;
    assert_eq!(
        levels(chosen),
        ["hcomm-leases", "hcomm-serving", "hcomm-serving"]
    );
    assert!(schemas(&["--set", "apiPriority.enabled=false"])?.is_empty());
    // Without the key at all, as `helm upgrade --reuse-values` renders a release installed
    // before `apiPriority` existed (Helm then uses the old release's values): the
    // defaults, not a template error that fails the upgrade.
    let unset = schemas(&["--set", "apiPriority=null"])?;
    assert_eq!(
        levels(unset),
        ["leader-election", "workload-high", "workload-high"]
    );
    Ok(())
}

#[test]
fn rbac_has_no_wildcards() -> Result<()> {
    for mode in ["ascend", "cpu"] {
        let docs = render(&["--set", &format!("agent.mode={mode}")])?;
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        {
            for rule in doc["rules"].as_sequence().context("rules")? {
                for field in ["apiGroups", "resources", "verbs"] {
                    let items = rule[field].as_sequence().context("rule field")?;
                    assert!(
                        items.iter().all(|i| i.as_str() != Some("*")),
                        "{} has a wildcard in {field}",
                        doc["metadata"]["name"].as_str().unwrap_or_default()
                    );
                }
            }
        }
    }
    Ok(())
}

/// Issue 17: no ClusterRole grants anything on Secrets; the Roles that do are in the
/// release namespace.
#[test]
fn secrets_are_granted_only_by_roles_in_the_release_namespace() -> Result<()> {
    for mode in ["ascend", "cpu"] {
        let docs = render(&["--set", &format!("agent.mode={mode}")])?;
        let mut roles_with_secrets = Vec::new();
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let grants_secrets = doc["rules"]
                .as_sequence()
                .context("rules")?
                .iter()
                .filter_map(|r| r["resources"].as_sequence())
                .flatten()
                .any(|r| r.as_str() == Some("secrets"));
            if !grants_secrets {
                continue;
            }
            assert_eq!(
                doc["kind"], "Role",
                "{mode}: ClusterRole {name} grants Secrets cluster-wide"
            );
            assert_eq!(
                doc["metadata"]["namespace"].as_str(),
                Some(NAMESPACE),
                "{mode}: Role {name} grants Secrets outside the release namespace"
            );
            roles_with_secrets.push(name.to_owned());
        }
        roles_with_secrets.sort();
        assert_eq!(
            roles_with_secrets,
            ["hcomm-agent-group-secrets", "hcomm-operator-group-secrets"],
            "{mode}"
        );
    }
    Ok(())
}

#[test]
fn the_chart_crds_are_the_generated_ones() -> Result<()> {
    let chart_crds = Path::new(CHART).join("crds");
    for crd in hcomm_crds::all_crds() {
        let file = hcomm_crds::crd_file_name(&crd);
        let in_chart = std::fs::read_to_string(chart_crds.join(&file))?;
        assert_eq!(
            in_chart,
            hcomm_crds::crd_yaml(&crd)?,
            "{file} in the chart drifted; run `cargo crdgen`"
        );
    }
    Ok(())
}

fn can_i(
    cp: &ControlPlane,
    service_account: &str,
    verb: &str,
    resource: &str,
    namespace: &str,
) -> Result<bool> {
    // `kubectl auth can-i patch pods/status` would ask about a pod *named* status.
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let mut command = cp.kubectl();
    if !subresource.is_empty() {
        command.arg(format!("--subresource={subresource}"));
    }
    command.args([
        "auth",
        "can-i",
        verb,
        resource,
        "--namespace",
        namespace,
        &format!("--as=system:serviceaccount:{NAMESPACE}:{service_account}"),
    ]);
    let out = output(command)?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl auth can-i said {answer:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_into_a_real_control_plane_with_minimal_rbac() -> Result<()> {
    let options = ControlPlaneOptions {
        controllers: false,
        kwok: Some(false),
        ..Default::default()
    };
    let cp = tokio::time::timeout(
        std::time::Duration::from_secs(240),
        ControlPlane::start(options),
    )
    .await
    .context("control plane did not start within 240 s")??;
    let mut install = helm_cmd(&[
        "install",
        "hcomm",
        CHART,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        "agent.mode=cpu",
        "--timeout",
        "120s",
    ])?;
    install.env("KUBECONFIG", cp.kubeconfig_path());
    ok(install)?;

    let mut get = cp.kubectl();
    get.args([
        "get",
        "crd",
        "hcommgroups.hcomm.io",
        "hcommnodes.hcomm.io",
        "-o",
        "name",
    ]);
    assert_eq!(ok(get)?.lines().count(), 2);
    // The local-API CSI driver, as the API server stored it (its spec is validated there).
    let mut get = cp.kubectl();
    get.args(["get", "csidriver", "local-api.hcomm.io", "-o", "json"]);
    let driver: serde_json::Value = serde_json::from_str(&ok(get)?)?;
    assert_eq!(driver["spec"]["podInfoOnMount"], true, "{driver}");
    assert_eq!(
        driver["spec"]["volumeLifecycleModes"],
        serde_json::json!(["Ephemeral"]),
        "{driver}"
    );
    let mut get = cp.kubectl();
    get.args([
        "get",
        "deployment,daemonset,serviceaccount,service,secret",
        "-n",
        NAMESPACE,
        "-o",
        "name",
    ]);
    let objects = ok(get)?;
    for name in [
        "deployment.apps/hcomm-operator",
        "daemonset.apps/hcomm-agent",
        "serviceaccount/hcomm-operator",
        "serviceaccount/hcomm-agent",
        "service/hcomm-operator-metrics",
        "secret/hcomm-agent",
    ] {
        assert!(
            objects.lines().any(|l| l == name),
            "{name} not installed:\n{objects}"
        );
    }

    // What each component needs is allowed ...
    let allowed = [
        ("hcomm-operator", "create", "pods", "default"),
        ("hcomm-operator", "delete", "pods", "default"),
        (
            "hcomm-operator",
            "patch",
            "hcommgroups.hcomm.io/status",
            "default",
        ),
        ("hcomm-operator", "list", "hcommnodes.hcomm.io", "default"),
        ("hcomm-operator", "create", "configmaps", "default"),
        (
            "hcomm-operator",
            "create",
            "events.events.k8s.io",
            "default",
        ),
        (
            "hcomm-operator",
            "update",
            "leases.coordination.k8s.io",
            NAMESPACE,
        ),
        ("hcomm-agent", "patch", "pods/status", "default"),
        ("hcomm-agent", "get", "pods/status", "default"),
        ("hcomm-agent", "watch", "pods", "default"),
        (
            "hcomm-agent",
            "patch",
            "hcommnodes.hcomm.io/status",
            "default",
        ),
        ("hcomm-agent", "create", "hcommnodes.hcomm.io", "default"),
        ("hcomm-agent", "get", "configmaps", "default"),
        // Issue 17: the groups' Secrets, in the release namespace only.
        ("hcomm-operator", "create", "secrets", NAMESPACE),
        ("hcomm-operator", "get", "secrets", NAMESPACE),
        ("hcomm-operator", "list", "secrets", NAMESPACE),
        ("hcomm-operator", "delete", "secrets", NAMESPACE),
        ("hcomm-agent", "get", "secrets", NAMESPACE),
        // Issue 19: one PodDisruptionBudget per group, applied server-side; the Nodes'
        // cordons are watched.
        (
            "hcomm-operator",
            "create",
            "poddisruptionbudgets.policy",
            "default",
        ),
        (
            "hcomm-operator",
            "patch",
            "poddisruptionbudgets.policy",
            "default",
        ),
        (
            "hcomm-operator",
            "get",
            "poddisruptionbudgets.policy",
            "default",
        ),
        ("hcomm-operator", "watch", "nodes", "default"),
    ];
    // ... and what they do not need is refused.
    let refused = [
        // Budgets go with their group (owner reference); members are never evicted.
        (
            "hcomm-operator",
            "delete",
            "poddisruptionbudgets.policy",
            "default",
        ),
        ("hcomm-operator", "create", "pods/eviction", "default"),
        ("hcomm-operator", "patch", "nodes", "default"),
        (
            "hcomm-agent",
            "patch",
            "poddisruptionbudgets.policy",
            "default",
        ),
        ("hcomm-operator", "delete", "nodes", "default"),
        ("hcomm-operator", "create", "deployments.apps", "default"),
        ("hcomm-operator", "delete", "hcommnodes.hcomm.io", "default"),
        (
            "hcomm-operator",
            "delete",
            "hcommgroups.hcomm.io",
            "default",
        ),
        (
            "hcomm-operator",
            "update",
            "leases.coordination.k8s.io",
            "kube-system",
        ),
        (
            "hcomm-operator",
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            "default",
        ),
        ("hcomm-operator", "patch", "pods/status", "default"),
        ("hcomm-agent", "create", "pods", "default"),
        ("hcomm-agent", "delete", "pods", "default"),
        ("hcomm-agent", "patch", "pods", "default"),
        ("hcomm-agent", "patch", "hcommgroups.hcomm.io", "default"),
        (
            "hcomm-agent",
            "patch",
            "hcommgroups.hcomm.io/status",
            "default",
        ),
        ("hcomm-agent", "list", "secrets", "default"),
        // Issue 17: no Secret outside the release namespace, and the agent only gets one
        // by name there.
        ("hcomm-agent", "get", "secrets", "default"),
        ("hcomm-agent", "get", "secrets", "kube-system"),
        ("hcomm-agent", "list", "secrets", NAMESPACE),
        ("hcomm-agent", "watch", "secrets", NAMESPACE),
        ("hcomm-agent", "create", "secrets", NAMESPACE),
        ("hcomm-operator", "get", "secrets", "default"),
        ("hcomm-operator", "list", "secrets", "default"),
        ("hcomm-operator", "create", "secrets", "default"),
        ("hcomm-operator", "get", "secrets", "kube-system"),
        ("hcomm-operator", "patch", "secrets", NAMESPACE),
        ("hcomm-agent", "delete", "hcommnodes.hcomm.io", "default"),
        (
            "hcomm-agent",
            "update",
            "leases.coordination.k8s.io",
            NAMESPACE,
        ),
    ];
    let mut wrong = Vec::new();
    for (sa, verb, resource, ns) in allowed {
        if !can_i(&cp, sa, verb, resource, ns)? {
            wrong.push(format!(
                "{sa} cannot {verb} {resource} in {ns}, but needs to"
            ));
        }
    }
    for (sa, verb, resource, ns) in refused {
        if can_i(&cp, sa, verb, resource, ns)? {
            wrong.push(format!("{sa} can {verb} {resource} in {ns}, but must not"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    the_api_server_serves_the_operator_and_agents_at_their_own_priority(&cp).await?;
    helm_upgrade_keeps_the_groups_and_rolls_node_by_node(&cp)?;

    let mut uninstall = helm_cmd(&[
        "uninstall",
        "hcomm",
        "--namespace",
        NAMESPACE,
        "--timeout",
        "60s",
    ])?;
    uninstall.env("KUBECONFIG", cp.kubeconfig_path());
    ok(uninstall)?;
    cp.stop()?;
    Ok(())
}

/// The chart's FlowSchemas, on the real API server: each names a priority level the
/// server has (not `Dangling`), and requests made as the operator's and the agents'
/// ServiceAccounts are dispatched at those levels, as the server's own
/// `apiserver_flowcontrol_dispatched_requests_total` counts them (impersonation runs before
/// API Priority and Fairness classifies a request, so `--as` is classified as that account).
async fn the_api_server_serves_the_operator_and_agents_at_their_own_priority(
    cp: &ControlPlane,
) -> Result<()> {
    let schemas = [
        ("hcomm-operator", "workload-high"),
        ("hcomm-operator-leader-election", "leader-election"),
        ("hcomm-agent", "workload-high"),
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for (schema, _) in schemas {
        loop {
            let mut get = cp.kubectl();
            get.args(["get", "flowschema", schema, "-o", "json"]);
            let doc: serde_json::Value = serde_json::from_str(&ok(get)?)?;
            let dangling = doc["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Dangling"))
                .map(|c| c["status"].clone());
            if dangling == Some(serde_json::json!("False")) {
                break;
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "FlowSchema {schema} not classified as not Dangling within 60 s: {doc}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    let operator = format!("--as={}", hcomm_e2e::chart::OPERATOR_USER);
    let agent = format!("--as={}", hcomm_e2e::chart::AGENT_USER);
    // Classified before they are authorized or found: the Lease need not exist (no
    // operator runs here) for its GET to be dispatched; the counters below are the proof.
    for args in [
        vec![operator.as_str(), "get", "pods", "-n", "default"],
        vec![
            operator.as_str(),
            "get",
            "lease",
            "hcomm-operator",
            "-n",
            NAMESPACE,
        ],
        vec![agent.as_str(), "get", "hcommnodes"],
    ] {
        let mut get = cp.kubectl();
        get.args(args);
        output(get)?;
    }
    let mut metrics = cp.kubectl();
    metrics.args(["get", "--raw", "/metrics"]);
    let metrics = ok(metrics)?;
    for (schema, level) in schemas {
        let labels = [
            format!("flow_schema=\"{schema}\""),
            format!("priority_level=\"{level}\""),
        ];
        let dispatched: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
            .filter(|l| labels.iter().all(|label| l.contains(label.as_str())))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        ensure!(
            dispatched >= 1.0,
            "no request dispatched by FlowSchema {schema} at priority level {level}"
        );
    }
    Ok(())
}

/// Issue 19: `helm upgrade` of hcomm itself (new images) on the real apiserver keeps the
/// CRDs and the groups (same object, untouched spec), and rolls the new images out the
/// way `e2e/tests/pools/upgrade.rs` proves safe under load: the agents one node at a time,
/// the operator with a surge so the new one waits beside the leader.
fn helm_upgrade_keeps_the_groups_and_rolls_node_by_node(cp: &ControlPlane) -> Result<()> {
    let group = std::fs::read_to_string(
        hcomm_e2e::testbed::pools::workspace_root().join("examples/decode-pool.yaml"),
    )?;
    let mut apply = cp.kubectl();
    apply.args(["apply", "-n", "default", "-f", "-"]);
    apply.stdin(std::process::Stdio::piped());
    let mut child = apply
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, group.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "kubectl apply of the decode example: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let group_json = |cp: &ControlPlane| -> Result<Value> {
        let mut get = cp.kubectl();
        get.args(["get", "hcommgroup", "decode", "-n", "default", "-o", "json"]);
        Ok(serde_json::from_str(&ok(get)?)?)
    };
    let before = group_json(cp)?;

    let mut upgrade = helm_cmd(&[
        "upgrade",
        "hcomm",
        CHART,
        "--namespace",
        NAMESPACE,
        "--reset-then-reuse-values",
        "--set",
        "image.tag=next",
        "--timeout",
        "120s",
    ])?;
    upgrade.env("KUBECONFIG", cp.kubeconfig_path());
    ok(upgrade)?;

    let after = group_json(cp)?;
    ensure!(
        after["metadata"]["uid"] == before["metadata"]["uid"]
            && after["spec"] == before["spec"]
            && after["metadata"]["generation"] == before["metadata"]["generation"],
        "helm upgrade touched the group: {before:?} → {after:?}"
    );
    let get_json = |kind: &str| -> Result<Value> {
        let mut get = cp.kubectl();
        get.args(["get", kind, "-n", NAMESPACE, "-o", "json"]);
        Ok(serde_json::from_str(&ok(get)?)?)
    };
    let agents = get_json("daemonset/hcomm-agent")?;
    let operator = get_json("deployment/hcomm-operator")?;
    for (what, spec) in [("agent", &agents["spec"]), ("operator", &operator["spec"])] {
        let image = spec["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            image.ends_with(":next"),
            "the {what} image after the upgrade: {image}"
        );
    }
    ensure!(
        agents["spec"]["updateStrategy"]["type"] == "RollingUpdate"
            && agents["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1,
        "the agents must roll one node at a time: {:?}",
        agents["spec"]["updateStrategy"]
    );
    ensure!(
        operator["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 1
            && operator["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0,
        "the new operator must start beside the old one: {:?}",
        operator["spec"]["strategy"]
    );
    let mut delete = cp.kubectl();
    delete.args([
        "delete",
        "hcommgroup",
        "decode",
        "-n",
        "default",
        "--wait=false",
    ]);
    ok(delete)?;
    Ok(())
}

#[test]
fn the_probes_use_the_health_endpoints_on_the_metrics_ports() -> Result<()> {
    let docs = render(&[])?;
    let agent = &find(&docs, "DaemonSet", "-agent")?["spec"]["template"]["spec"]["containers"][0];
    let operator =
        &find(&docs, "Deployment", "-operator")?["spec"]["template"]["spec"]["containers"][0];
    for (container, live, port) in [(agent, "/livez", 7511), (operator, "/healthz", 8080)] {
        assert_eq!(
            container["livenessProbe"]["httpGet"]["path"],
            Value::from(live)
        );
        assert_eq!(
            container["readinessProbe"]["httpGet"]["path"],
            Value::from("/readyz")
        );
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(container[probe]["httpGet"]["port"], Value::from("metrics"));
        }
        assert_eq!(container["ports"][0]["containerPort"], Value::from(port));
    }
    Ok(())
}
