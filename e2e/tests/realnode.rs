//! hcomm on real nodes (issue 43): every host runs a real kubelet and containerd
//! (`hcomm_e2e::realnode`), Pods are containers on a CNI network, images are built here,
//! NPUs come from a device plugin registered with the kubelet. One testbed (two hosts,
//! two NPUs each) shared by the scenarios, one at a time. Runs under
//! `hcomm_e2e::harness`: without root every scenario is reported ignored with the reason.
//!
//! Before `hcomm_kubelet`'s gRPC servers took any `:authority`, the first scenario failed:
//! the kubelet's plugin watcher sends the escaped socket path, the agent's server reset
//! the stream, CSINode listed no driver and the Pod stayed in ContainerCreating.
//!
//! Size: three scenarios on one testbed, with the group, load, helm and wait helpers they
//! share.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::ascend::{ANNOTATION_ASCEND_910_CONFIGURATION, RESOURCE_ASCEND910};
use hcomm_crds::contract::{
    ANNOTATION_WORKER_READINESS, LABEL_GROUP, POD_MEMBER_READY, WORKER_READINESS_LOCAL_API,
};
use hcomm_e2e::harness::{self, Needs, Shared, Test};
use hcomm_e2e::realnode::image::ImageSpec;
use hcomm_e2e::testbed::{Nodes, Testbed, TestbedOptions, WORKER_IMAGE};
use hcomm_kubelet::PodResourcesClient;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

/// A shell image for the plain Pods of these tests: `/bin/sh` and `sleep`.
const SHELL_IMAGE: &str = "hcomm-testbed/shell:1";
const NAMESPACE: &str = "default";
/// The longest one scenario may take (each wait inside has its own, shorter deadline).
const SCENARIO_DEADLINE: Duration = Duration::from_secs(600);

type Scenario = fn(
    &mut Testbed,
)
    -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>>;

fn main() {
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime"),
    );
    let shared: Shared<Testbed> = Shared::default();
    let scenarios: [(&str, Scenario); 3] = [
        (
            "the_agents_csi_driver_registers_with_a_real_kubelet_and_a_pod_mounts_its_volume",
            |bed| Box::pin(csi_driver_registers_and_a_pod_mounts_its_volume(bed)),
        ),
        (
            "members_on_real_nodes_get_npus_from_the_kubelet_and_their_workers_serve",
            |bed| Box::pin(members_get_npus_from_the_kubelet_and_serve(bed)),
        ),
        // Last: it replaces the testbed's agent and operator processes for good.
        (
            "the_charts_agent_daemonset_and_operator_run_in_containers_and_serve_a_group",
            |bed| Box::pin(the_charts_workloads_run_in_containers(bed)),
        ),
    ];
    let tests = scenarios
        .into_iter()
        .map(|(name, scenario)| {
            let (rt, shared) = (rt.clone(), shared.clone());
            Test::new(name, Needs::NetworkNamespaces, move || {
                shared.with(
                    || rt.block_on(start()),
                    |bed| rt.block_on(bed.stop()),
                    |bed| {
                        rt.block_on(async {
                            tokio::time::timeout(SCENARIO_DEADLINE, scenario(bed))
                                .await
                                .map_err(|_| {
                                    anyhow::anyhow!("not done within {SCENARIO_DEADLINE:?}")
                                })?
                        })
                    },
                )
            })
        })
        .collect();
    let conclusion = harness::run_in_order(tests);
    if let Some(bed) = shared.teardown() {
        rt.block_on(bed.stop());
    }
    conclusion.exit();
}

async fn start() -> anyhow::Result<Testbed> {
    let bed = Testbed::start(TestbedOptions {
        hosts: 2,
        devices_per_host: 2,
        nodes: Nodes::Kubelet,
        ..TestbedOptions::default()
    })
    .await
    .context("a testbed on real nodes")?;
    let shell = bed.dir().join("images/shell.tar");
    ImageSpec::programs(
        SHELL_IMAGE,
        &[
            (PathBuf::from("/bin/sh"), "/bin/sh"),
            (PathBuf::from("/bin/sleep"), "/bin/sleep"),
        ],
    )?
    .write_archive(&shell)?;
    for node in bed.real_nodes() {
        node.import(&shell)?;
    }
    Ok(bed)
}

async fn csi_driver_registers_and_a_pod_mounts_its_volume(bed: &mut Testbed) -> anyhow::Result<()> {
    let bed: &Testbed = bed;
    let client = bed.client().await?;
    let csinodes: Api<CSINode> = Api::all(client.clone());
    for node in bed.real_nodes() {
        wait_for(Duration::from_secs(30), "the driver in CSINode", || async {
            let drivers = csinodes
                .get_opt(node.name())
                .await?
                .map(|c| c.spec.drivers)
                .unwrap_or_default();
            Ok(drivers
                .iter()
                .any(|d| d.name == hcomm_crds::local_api::CSI_DRIVER))
        })
        .await
        .with_context(|| format!("kubelet log: {}", node.kubelet_log().display()))?;
    }

    // A Pod with the local-API volume, read-only as the driver requires: the kubelet
    // starts its container only once the agent has published the volume.
    let node = &bed.real_nodes()[0];
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "csi-mount", "namespace": NAMESPACE},
        "spec": {
            "nodeName": node.name(),
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "c",
                "image": SHELL_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "test -d /run/hcomm && exec sleep 3600"],
                "volumeMounts": [{"name": "api", "mountPath": "/run/hcomm", "readOnly": true}],
            }],
            "volumes": [{"name": "api", "csi": {"driver": hcomm_crds::local_api::CSI_DRIVER, "readOnly": true}}],
        },
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pod = pods.create(&PostParams::default(), &pod).await?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    wait_for(
        Duration::from_secs(60),
        "the Pod's container running",
        || async {
            let p = pods.get("csi-mount").await?;
            let running = p
                .status
                .and_then(|s| s.container_statuses)
                .unwrap_or_default()
                .iter()
                .any(|c| {
                    c.state.as_ref().is_some_and(|s| s.running.is_some()) && c.restart_count == 0
                });
            Ok(running)
        },
    )
    .await?;
    let published = node
        .kubelet_root()
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~csi/api/mount");
    ensure!(
        published.is_dir(),
        "the agent published the volume at {}",
        published.display()
    );
    pods.delete("csi-mount", &DeleteParams::default()).await?;
    wait_for(
        Duration::from_secs(30),
        "the volume unpublished",
        || async { Ok(!published.exists()) },
    )
    .await
}

async fn members_get_npus_from_the_kubelet_and_serve(bed: &mut Testbed) -> anyhow::Result<()> {
    let bed: &Testbed = bed;
    let client = bed.client().await?;
    // The kubelet's device manager, not a status patch, advertises the NPUs.
    let nodes: Api<Node> = Api::all(client.clone());
    for node in bed.real_nodes() {
        wait_for(
            Duration::from_secs(30),
            "the NPUs in allocatable",
            || async {
                let n = nodes.get(node.name()).await?;
                let allocatable = n
                    .status
                    .and_then(|s| s.allocatable)
                    .and_then(|a| a.get(RESOURCE_ASCEND910).map(|q| q.0.clone()));
                Ok(allocatable.as_deref() == Some("2"))
            },
        )
        .await?;
    }

    let ready = run_group(bed, "real").await?;
    for pod in &ready {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let node = bed
            .real_nodes()
            .iter()
            .find(|n| n.name() == node_name)
            .context("a member on a real node")?;
        // The kubelet allocated the member's NPU and says so; the plugin's annotation agrees.
        let kubelet = PodResourcesClient::new(
            node.kubelet_root().join("pod-resources/kubelet.sock"),
            Duration::from_secs(5),
        );
        let allocated: Vec<String> = kubelet
            .list()
            .await?
            .into_iter()
            .filter(|p| p.name == name)
            .flat_map(|p| p.containers)
            .flat_map(|c| c.devices)
            .filter(|d| d.resource_name == RESOURCE_ASCEND910)
            .flat_map(|d| d.device_ids)
            .collect();
        ensure!(
            allocated.len() == 2,
            "{name}: the kubelet allocated {allocated:?}"
        );
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_ASCEND_910_CONFIGURATION))
            .with_context(|| format!("{name}: the device plugin's annotation"))?;
        for device in &allocated {
            let physical = device.rsplit('-').next().unwrap_or_default();
            ensure!(
                annotation.contains(&format!("\"device_id\":\"{physical}\"")),
                "{name}: annotation {annotation} names the kubelet's device {device}"
            );
        }
        // The worker, a container on the node's network, serves.
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .context("a Pod IP")?;
        let answer = generate(&format!("{ip}:8080")).await?;
        ensure!(
            answer.contains(&format!("\"pod\":\"{name}\"")),
            "{name} answered {answer}"
        );
    }
    // A Service's ClusterIP reaches the members from a node (kube-proxy's rules there).
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "real", "namespace": NAMESPACE},
        "spec": {"selector": {LABEL_GROUP: "real"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))?;
    let service = services.create(&PostParams::default(), &service).await?;
    let cluster_ip = service
        .spec
        .and_then(|s| s.cluster_ip)
        .context("a ClusterIP")?;
    let answer = wait_for_value(
        Duration::from_secs(30),
        "an answer through the ClusterIP",
        || {
            let ip = cluster_ip.clone();
            async move { generate_from_host(bed, 1, &format!("{ip}:80")).map(Some) }
        },
    )
    .await?;
    ensure!(
        answer.contains("\"pod\":\"real-"),
        "through the ClusterIP: {answer}"
    );
    services.delete("real", &DeleteParams::default()).await?;

    delete_group(bed, "real").await
}

/// Deletes group `name` and waits until its members are gone.
async fn delete_group(bed: &Testbed, name: &str) -> anyhow::Result<()> {
    let client = bed.client().await?;
    let groups: Api<HcommGroup> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let selector = ListParams::default().labels(&format!("{LABEL_GROUP}={name}"));
    groups.delete(name, &DeleteParams::default()).await?;
    wait_for(Duration::from_secs(60), "the members gone", || async {
        Ok(pods.list(&selector).await?.items.is_empty())
    })
    .await
}

/// The chart as users install it: the testbed's agent and operator processes stop, and
/// `helm upgrade` runs the chart's agent DaemonSet and operator Deployment from images
/// built here (the same binaries), in containers on the real nodes, reaching the API
/// server through its Service's ClusterIP. Every chart Pod becomes Ready and a group's
/// members, placed and published by them, serve.
async fn the_charts_workloads_run_in_containers(bed: &mut Testbed) -> anyhow::Result<()> {
    let version = chart_app_version()?;
    let images = bed.dir().join("images");
    let agent = ImageSpec::programs(
        &format!("docker.io/hcomm/hcomm-agent:{version}"),
        &[
            (
                binary(hcomm_e2e::testbed::binaries::AGENT)?,
                "/usr/local/bin/hcomm-agent",
            ),
            (PathBuf::from("/usr/bin/ip"), "/usr/bin/ip"),
            (PathBuf::from("/usr/bin/stat"), "/usr/bin/stat"),
        ],
    )?;
    let operator = ImageSpec::programs(
        &format!("docker.io/hcomm/hcomm-operator:{version}"),
        &[(
            binary(hcomm_e2e::testbed::binaries::OPERATOR)?,
            "/usr/local/bin/hcomm-operator",
        )],
    )?;
    for (spec, file) in [(agent, "agent.tar"), (operator, "operator.tar")] {
        let archive = images.join(file);
        spec.write_archive(&archive)?;
        for node in bed.real_nodes() {
            node.import(&archive)?;
        }
    }
    for i in 0..bed.hosts().len() {
        bed.kill_agent(i);
    }
    bed.kill_operator();
    let out = helm(
        &[
            "upgrade",
            "hcomm",
            hcomm_e2e::chart::CHART,
            "--namespace",
            hcomm_e2e::chart::RELEASE_NAMESPACE,
            "--set",
            "agent.mode=cpu,agent.cpuDevices=2,agent.managementInterface=mgmt0,operator.replicas=1,image.pullPolicy=Never",
            "--set-string",
            "agent.socketIfname==data0",
            "--timeout",
            "120s",
        ],
        cp_kubeconfig(bed),
    )?;
    ensure!(
        out.status.success(),
        "helm upgrade: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = bed.client().await?;
    let chart_pods: Api<Pod> = Api::namespaced(client.clone(), hcomm_e2e::chart::RELEASE_NAMESPACE);
    let want = bed.real_nodes().len() + 1;
    wait_for(
        Duration::from_secs(120),
        "every chart Pod Ready",
        || async {
            let list = chart_pods.list(&ListParams::default()).await?.items;
            let ready = list.iter().filter(|p| pod_ready_plain(p)).count();
            Ok(ready == want && list.len() == want)
        },
    )
    .await
    .with_context(|| format!("node logs: {}", bed.dir().join("nodes").display()))?;
    let ready = run_group(bed, "chart").await?;
    let addrs: Vec<String> = ready
        .iter()
        .map(|p| {
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            ip.map(|ip| format!("{ip}:8080")).context("a Pod IP")
        })
        .collect::<anyhow::Result<_>>()?;
    for addr in &addrs {
        generate(addr).await?;
    }

    delete_group(bed, "chart").await
}

/// The admin kubeconfig of the testbed's control plane.
fn cp_kubeconfig(bed: &Testbed) -> PathBuf {
    bed.control_plane().kubeconfig_path().to_path_buf()
}

/// `helm args…` against the testbed's control plane.
fn helm(args: &[&str], kubeconfig: PathBuf) -> anyhow::Result<std::process::Output> {
    Ok(hcomm_e2e::chart::helm_command(args)?
        .env("KUBECONFIG", kubeconfig)
        .output()?)
}

/// The chart's `appVersion`, the images' tag.
fn chart_app_version() -> anyhow::Result<String> {
    let text = std::fs::read_to_string(format!("{}/Chart.yaml", hcomm_e2e::chart::CHART))?;
    let chart: serde_yaml::Value = serde_yaml::from_str(&text)?;
    chart["appVersion"]
        .as_str()
        .map(str::to_owned)
        .context("appVersion in Chart.yaml")
}

/// A workspace binary, built beside this test.
fn binary(name: &str) -> anyhow::Result<PathBuf> {
    Ok(hcomm_e2e::testbed::binaries::find(name)?)
}

/// Creates a two-member TCP group `name` of the reference worker on the host network
/// (its communicator binds the node's data address) and waits for both members Ready.
async fn run_group(bed: &Testbed, name: &str) -> anyhow::Result<Vec<Pod>> {
    let client = bed.client().await?;
    let group: HcommGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": <HcommGroup as kube::Resource>::api_version(&()),
        "kind": <HcommGroup as kube::Resource>::kind(&()),
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "role": "decode",
            // A whole node per member: on the host network two members of one node would
            // both bind port 8080, and the operator does not place by host ports (it chose
            // one node for both when each took one NPU; issue 43, point 6).
            "devicesPerMember": 2,
            "comm": {"backend": "tcp", "socketIfname": "data", "connectTimeoutSeconds": 10},
            "scaling": {"strategy": "Incremental", "drainTimeoutSeconds": 10},
            "template": {
                "metadata": {"annotations": {ANNOTATION_WORKER_READINESS: WORKER_READINESS_LOCAL_API}},
                "spec": {
                    // The worker's communicator binds the node's data address.
                    "hostNetwork": true,
                    "terminationGracePeriodSeconds": 15,
                    "containers": [{
                        "name": "worker",
                        "image": WORKER_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["hcomm-worker"],
                        "args": ["--role", "decode", "--step-ms", "5"],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        ],
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }],
                },
            },
        },
    }))?;
    let groups: Api<HcommGroup> = Api::namespaced(client.clone(), NAMESPACE);
    groups.create(&PostParams::default(), &group).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = ListParams::default().labels(&format!("{LABEL_GROUP}={name}"));
    let ready = wait_for_value(
        Duration::from_secs(120),
        "two member Pods Ready",
        || async {
            let list = pods.list(&selector).await?.items;
            let ready: Vec<Pod> = list.into_iter().filter(pod_ready).collect();
            Ok((ready.len() == 2).then_some(ready))
        },
    )
    .await
    .with_context(|| format!("logs: {}", bed.dir().join("logs").display()))?;

    Ok(ready)
}

/// Ready, as the kubelet sets it.
fn pod_ready_plain(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_ready(pod: &Pod) -> bool {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let is_true = |t: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    };
    is_true("Ready") && is_true(POD_MEMBER_READY)
}

/// `POST /generate` on `addr` from inside host `host` (bash's `/dev/tcp`), within 10 s.
fn generate_from_host(bed: &Testbed, host: usize, addr: &str) -> anyhow::Result<String> {
    let (ip, port) = addr.split_once(':').context("ip:port")?;
    let body = r#"{"prompt":"hi","tokens":4}"#;
    let script = format!(
        "exec 3<>/dev/tcp/{ip}/{port} && printf 'POST /generate HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: {}\\r\\nConnection: close\\r\\n\\r\\n{body}' >&3 && cat <&3",
        body.len()
    );
    let out = bed
        .hosts()
        .host(host)?
        .command("timeout")
        .args(["10", "bash", "-c", &script])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        text.starts_with("HTTP/1.1 200"),
        "{addr} from host-{host}: {text}"
    );
    Ok(text)
}

/// `POST /generate` on `addr`, the whole exchange within 10 s.
async fn generate(addr: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"prompt":"hi","tokens":4}"#;
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!(
                "POST /generate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        anyhow::Ok(out)
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .context("no answer within 10 s")??;
    if !answer.starts_with("HTTP/1.1 200") {
        bail!("{addr} answered {answer}");
    }
    Ok(answer)
}

async fn wait_for<F, Fut>(within: Duration, what: &str, check: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    wait_for_value(within, what, || async { Ok(check().await?.then_some(())) }).await
}

async fn wait_for_value<T, F, Fut>(within: Duration, what: &str, check: F) -> anyhow::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + within;
    let mut last = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!(" (last error: {e:#})"),
        }
        if Instant::now() > deadline {
            bail!("{what}: not within {within:?}{last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
