//! The Helm chart with the real `helm`: lint, render for both modes, refuse bad values,
//! install into a real control plane, and RBAC that allows what hcomm needs and refuses
//! the rest (`kubectl auth can-i` as the chart's ServiceAccounts).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail};
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions, assets};
use serde::Deserialize;
use serde_yaml::Value;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/hcomm");
const NAMESPACE: &str = "hcomm-system";

fn helm() -> Result<PathBuf> {
    assets::helm().context("finding or building helm")
}

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
    let mut command = Command::new(helm()?);
    command.args(args);
    // Keep helm's own caches and config inside the test's reach.
    let home = std::env::temp_dir().join("hcomm-helm-home");
    command.env("HELM_CACHE_HOME", home.join("cache"));
    command.env("HELM_CONFIG_HOME", home.join("config"));
    command.env("HELM_DATA_HOME", home.join("data"));
    Ok(command)
}

/// Renders the chart as for the Kubernetes version the tests run (helm's built-in default
/// is older than the chart's `kubeVersion`).
fn render(extra: &[&str]) -> Result<Vec<Value>> {
    let kube_version = assets::kubernetes_version()?;
    let mut args = vec![
        "template",
        "hcomm",
        CHART,
        "--namespace",
        NAMESPACE,
        "--kube-version",
        &kube_version,
    ];
    args.extend_from_slice(extra);
    let text = ok(helm_cmd(&args)?)?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
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
    ] {
        assert!(
            rendered.contains(flag),
            "{flag} missing from the agent args:\n{rendered}"
        );
    }
    assert!(
        pod["containers"][0]["image"]
            .as_str()
            .is_some_and(|i| i.ends_with(":dev"))
    );
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
    ];
    // ... and what they do not need is refused.
    let refused = [
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
