//! The testbed plays the Ascend parts faithfully (issue 15 point 5): NPU ports on their own
//! fabric carrying the device IPs, `/etc/hccn.conf`, the `hccn_tool` simulator answering
//! in the documented formats with injectable faults and refusing concurrent calls; kwok
//! Nodes that advertise `huawei.com/Ascend910` to the real scheduler; the device-plugin
//! stand-in of the process kubelet and the PodResources socket it feeds. Runs under
//! `hcomm_e2e::harness`: tests that need network namespaces are reported ignored, with
//! the reason, without root.
//!
//! Size: seven scenarios over two fixtures (bare NPU hosts; a control plane with the
//! process kubelet), with the Pod, PodResources and hccn_tool helpers they share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hcomm_crds::contract::ascend::{
    ANNOTATION_ASCEND_910_CONFIGURATION, ANNOTATION_ASCEND_REAL, DeviceAllocation,
    ENV_ASCEND_VISIBLE_DEVICES, POD_RESOURCES_SOCKET, RESOURCE_ASCEND910,
};
use hcomm_e2e::harness::{self, Needs, Shared, Test};
use hcomm_e2e::hosts::hccn_sim::root::{AscendRoot, DeviceFault};
use hcomm_e2e::hosts::hccn_sim::{CONCURRENT_MESSAGE, EXIT_CONCURRENT};
use hcomm_e2e::hosts::{LinkState, SimHosts, SimHostsOptions};
use hcomm_e2e::testbed::{
    ChartCluster, ChartClusterOptions, DevicePlugin, Kubelet, KubeletConfig, NodeRoot, PluginFault,
};
use hcomm_kubelet::PodResourcesClient;
use hcomm_kubelet::server::{PodResourcesServer, serve};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

const SIMULATOR: &str = env!("CARGO_BIN_EXE_hccn-tool-sim");

fn main() {
    let tests = vec![
        Test::new(
            "npu_ports_carry_the_device_ips_and_hccn_tool_answers_each_command_in_format",
            Needs::NetworkNamespaces,
            npu_ports_carry_the_device_ips_and_hccn_tool_answers_each_command_in_format,
        ),
        Test::new(
            "npu_ping_between_hosts_works_and_fails_when_the_npu_link_is_cut",
            Needs::NetworkNamespaces,
            npu_ping_between_hosts_works_and_fails_when_the_npu_link_is_cut,
        ),
        Test::new(
            "each_injected_hccn_fault_shows_in_the_tools_answer",
            Needs::NetworkNamespaces,
            each_injected_hccn_fault_shows_in_the_tools_answer,
        ),
        Test::new(
            "concurrent_hccn_tool_calls_fail_loudly_and_are_counted",
            Needs::NetworkNamespaces,
            concurrent_hccn_tool_calls_fail_loudly_and_are_counted,
        ),
    ];
    let mut tests = tests;
    // One control plane (scheduler, kwok Nodes with NPUs, the process kubelet with the
    // device-plugin stand-in) shared by the cluster tests, one at a time.
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime"),
    );
    let shared: Shared<Cluster> = Shared::default();
    let cluster_tests: [(&str, ClusterTest); 3] = [
        (
            "the_scheduler_counts_npus_nine_stay_pending_and_four_plus_four_fill_a_node",
            |c| Box::pin(the_scheduler_counts_npus(c)),
        ),
        (
            "a_pod_gets_the_plugins_annotation_and_its_devices_in_env_and_pod_resources",
            |c| Box::pin(a_pod_gets_the_plugins_annotation_and_its_devices(c)),
        ),
        (
            "device_plugin_faults_show_in_the_annotation_but_not_in_env_or_pod_resources",
            |c| Box::pin(device_plugin_faults_show_in_the_annotation(c)),
        ),
    ];
    for (name, test) in cluster_tests {
        let (rt, shared) = (rt.clone(), shared.clone());
        tests.push(Test::new(name, Needs::NetworkNamespaces, move || {
            shared.with(
                || rt.block_on(Cluster::start()),
                |c| rt.block_on(c.stop()),
                |c| {
                    rt.block_on(async {
                        tokio::time::timeout(CLUSTER_TEST_DEADLINE, test(c))
                            .await
                            .map_err(|_| anyhow::anyhow!("deadline {CLUSTER_TEST_DEADLINE:?}"))?
                    })
                },
            )
        }));
    }
    let summary = harness::run_in_order(tests);
    if let Some(c) = shared.teardown() {
        rt.block_on(c.stop());
    }
    summary.exit();
}

const CLUSTER_TEST_DEADLINE: Duration = Duration::from_secs(120);
/// How long a Pod may take to be scheduled, admitted or gone.
const POD_WAIT: Duration = Duration::from_secs(30);
const NS: &str = "default";

type ClusterTest =
    for<'a> fn(
        &'a mut Cluster,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = harness::Outcome> + 'a>>;

/// Two NPU hosts as kwok Nodes with 8 NPUs each, a real scheduler, and the process
/// kubelet with the device-plugin stand-in (running `sleep` for test Pods).
struct Cluster {
    kubelet: Option<Kubelet>,
    servers: Vec<PodResourcesServer>,
    plugin: DevicePlugin,
    client: kube::Client,
    roots: Vec<AscendRoot>,
    _cp: ChartCluster,
    hosts: Arc<SimHosts>,
    dir: PathBuf,
}

impl Cluster {
    async fn start() -> anyhow::Result<Cluster> {
        let hosts = Arc::new(SimHosts::create(SimHostsOptions::new(2).npus(8))?);
        let cluster = ChartCluster::start(
            &hosts,
            ChartClusterOptions {
                controllers: true,
                kwok: Some(true),
                pod_cidr: Some(format!(
                    "10.{}.0.0/16",
                    100 + hosts.subnets().data.octets()[2] % 150
                )),
                npus_per_node: 8,
                ..Default::default()
            },
        )
        .await?;
        let client = cluster.cp.client().await?;
        let dir = std::env::temp_dir().join(format!("hcomm-ascend-cluster-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut roots = Vec::new();
        let mut nodes = BTreeMap::new();
        for h in hosts.hosts() {
            let root = dir.join(h.name());
            roots.push(AscendRoot::install(
                &root,
                h.index(),
                hosts.len(),
                8,
                Path::new(SIMULATOR),
            )?);
            nodes.insert(
                h.name().to_owned(),
                NodeRoot {
                    host: h.index(),
                    root,
                },
            );
        }
        let plugin = DevicePlugin::new(
            RESOURCE_ASCEND910,
            hosts
                .hosts()
                .iter()
                .map(|h| (h.name().to_owned(), 8))
                .collect(),
        );
        std::fs::create_dir_all(dir.join("logs"))?;
        let mut servers = Vec::new();
        for h in hosts.hosts() {
            let shared = plugin.pod_resources_of(h.name()).context("a served node")?;
            servers.push(serve(&pod_resources_socket(&dir.join(h.name())), shared).await?);
        }
        let kubelet = Kubelet::start(
            client.clone(),
            hosts.clone(),
            KubeletConfig {
                nodes,
                programs: BTreeMap::from([("sleep".to_owned(), PathBuf::from(sleep_binary()?))]),
                log_dir: dir.join("logs"),
                device_plugin: Some(plugin.clone()),
                hccl_runtime: None,
                csi_views: dir.join("v"),
            },
        );
        Ok(Cluster {
            kubelet: Some(kubelet),
            servers,
            plugin,
            client,
            roots,
            _cp: cluster,
            hosts,
            dir,
        })
    }

    async fn stop(mut self) {
        if let Some(k) = self.kubelet.take() {
            k.stop().await;
        }
        for server in self.servers.drain(..) {
            server.shutdown(Duration::from_secs(2)).await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Creates a Pod running `sleep` that asks for `npus` NPUs, optionally pinned to a node
    /// by label (as the operator's required affinity does).
    async fn create(&self, name: &str, npus: u32, node: Option<&str>) -> anyhow::Result<Pod> {
        let mut spec = serde_json::json!({
            "containers": [{
                "name": "worker", "image": "hcomm/test", "command": ["/usr/bin/sleep", "600"],
                "resources": {"limits": {(RESOURCE_ASCEND910): npus.to_string()}}
            }],
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}]
        });
        if let Some(node) = node {
            spec["nodeSelector"] = serde_json::json!({"kubernetes.io/hostname": node});
        }
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": NS}, "spec": spec
        }))?;
        Ok(self.pods().create(&PostParams::default(), &pod).await?)
    }

    /// Deletes the Pods and waits until they and their allocations are gone.
    async fn delete(&self, names: &[&str]) -> anyhow::Result<()> {
        for n in names {
            let _ = self
                .pods()
                .delete(n, &DeleteParams::default().grace_period(0))
                .await;
        }
        let deadline = Instant::now() + POD_WAIT;
        for n in names {
            while self.pods().get_opt(n).await?.is_some() {
                ensure!(
                    Instant::now() < deadline,
                    "Pod {n} still there after {POD_WAIT:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        while self
            .hosts
            .hosts()
            .iter()
            .any(|h| !self.plugin.allocations(h.name()).is_empty())
        {
            ensure!(
                Instant::now() < deadline,
                "devices still allocated after {POD_WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Waits until `check` says yes about Pod `name`.
    async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        let deadline = Instant::now() + POD_WAIT;
        loop {
            if let Some(p) = self.pods().get_opt(name).await?
                && check(&p)
            {
                return Ok(p);
            }
            if Instant::now() > deadline {
                bail!("Pod {name}: {what} not within {POD_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The running process of Pod `name`'s container, as the kubelet started it.
    async fn process(&self, name: &str) -> anyhow::Result<u32> {
        let deadline = Instant::now() + POD_WAIT;
        loop {
            let procs = self
                .kubelet
                .as_ref()
                .map(Kubelet::processes)
                .unwrap_or_default();
            if let Some(pid) = procs
                .get(&format!("{NS}/{name}/worker"))
                .and_then(|p| p.pid)
            {
                return Ok(pid);
            }
            if Instant::now() > deadline {
                bail!("Pod {name}'s process not started within {POD_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// What host `root`'s kubelet PodResources API lists for Pod `name`: container → kubelet
/// device ids, through the real gRPC client on the socket.
async fn listed(root: &Path, name: &str) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let client = PodResourcesClient::new(pod_resources_socket(root), Duration::from_secs(5));
    let pods = client.list().await?;
    let pod = pods
        .iter()
        .find(|p| p.name == name && p.namespace == NS)
        .with_context(|| format!("Pod {name} not listed: {pods:?}"))?;
    Ok(pod
        .containers
        .iter()
        .map(|c| {
            let ids = c
                .devices
                .iter()
                .filter(|d| d.resource_name == RESOURCE_ASCEND910)
                .flat_map(|d| d.device_ids.clone())
                .collect();
            (c.name.clone(), ids)
        })
        .collect())
}

fn pod_resources_socket(root: &Path) -> PathBuf {
    root.join(POD_RESOURCES_SOCKET.trim_start_matches('/'))
}

fn sleep_binary() -> anyhow::Result<&'static str> {
    ["/usr/bin/sleep", "/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .context("no sleep binary")
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone()
}

fn unschedulable(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == hcomm_crds::contract::POD_SCHEDULED
                    && c.status == "False"
                    && c.reason.as_deref() == Some(hcomm_crds::contract::SCHEDULER_UNSCHEDULABLE)
            })
        })
}

fn annotation(p: &Pod, key: &str) -> Option<String> {
    p.metadata.annotations.as_ref()?.get(key).cloned()
}

/// A process' environment variable, read from the kernel.
fn env_of(pid: u32, key: &str) -> anyhow::Result<Option<String>> {
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(environ
        .split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_owned)))
}

async fn the_scheduler_counts_npus(c: &mut Cluster) -> harness::Outcome {
    c.create("npu-nine", 9, None).await?;
    c.wait_pod("npu-nine", "unschedulable", unschedulable)
        .await?;
    ensure!(node_of(&c.pods().get("npu-nine").await?).is_none());
    c.create("npu-four-a", 4, Some("host-0")).await?;
    c.create("npu-four-b", 4, Some("host-0")).await?;
    for n in ["npu-four-a", "npu-four-b"] {
        let p = c.wait_pod(n, "scheduled", |p| node_of(p).is_some()).await?;
        ensure!(node_of(&p).as_deref() == Some("host-0"));
        // The kubelet admits a bound Pod, and the plugin allocates, a moment after the
        // binding: the plugin's annotation says the allocation was made.
        c.wait_pod(n, "the device plugin's annotation", |p| {
            annotation(p, ANNOTATION_ASCEND_910_CONFIGURATION).is_some()
        })
        .await?;
    }
    // host-0 is full now: one more NPU there does not fit, but it does on host-1.
    c.create("npu-one-more", 1, Some("host-0")).await?;
    c.wait_pod("npu-one-more", "unschedulable", unschedulable)
        .await?;
    c.create("npu-one-elsewhere", 1, Some("host-1")).await?;
    c.wait_pod("npu-one-elsewhere", "scheduled", |p| node_of(p).is_some())
        .await?;
    // The stand-in really allocated host-0's eight devices, four each, disjoint.
    let mut held: Vec<u32> = c
        .plugin
        .allocations("host-0")
        .iter()
        .flat_map(|a| a.devices())
        .collect();
    held.sort_unstable();
    ensure!(
        held == (0..8).collect::<Vec<_>>(),
        "host-0 devices: {held:?}"
    );
    c.delete(&[
        "npu-nine",
        "npu-four-a",
        "npu-four-b",
        "npu-one-more",
        "npu-one-elsewhere",
    ])
    .await
}

async fn a_pod_gets_the_plugins_annotation_and_its_devices(c: &mut Cluster) -> harness::Outcome {
    c.create("npu-two", 2, Some("host-1")).await?;
    let p = c
        .wait_pod("npu-two", "the device plugin's annotation", |p| {
            annotation(p, ANNOTATION_ASCEND_910_CONFIGURATION).is_some()
        })
        .await?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let a = DeviceAllocation::parse(&annotation(&p, ANNOTATION_ASCEND_910_CONFIGURATION).unwrap())?;
    let ids = a.physical_ids()?;
    ensure!(ids.len() == 2, "{a:?}");
    ensure!(a.server_id == uid && a.pod_name == "npu-two");
    ensure!(a.host_ip == c.hosts.host(1)?.data_ip().to_string());
    let conf = c.roots[1].read_conf()?;
    for d in &a.devices {
        let id = d.physical_id()?;
        ensure!(
            d.ip() == conf.address(id).map(Into::into),
            "device {id}'s IP is hccn.conf's: {d:?}"
        );
    }
    let real: Vec<String> = ids.iter().map(|i| format!("Ascend910-{i}")).collect();
    ensure!(annotation(&p, ANNOTATION_ASCEND_REAL) == Some(real.join(",")));
    // The container runs with the devices the plugin allocated, from the start.
    let pid = c.process("npu-two").await?;
    let visible = env_of(pid, ENV_ASCEND_VISIBLE_DEVICES)?;
    let expected: Vec<String> = ids.iter().map(u32::to_string).collect();
    ensure!(
        visible == Some(expected.join(",")),
        "env: {visible:?}, annotation {ids:?}"
    );
    ensure!(c.plugin.allocation(&uid).map(|a| a.devices()) == Some(ids));
    // The kubelet's PodResources API lists the same devices, over its real socket.
    let list = listed(c.roots[1].root(), "npu-two").await?;
    ensure!(list.get("worker") == Some(&real), "PodResources: {list:?}");
    c.delete(&["npu-two"]).await?;
    let after = PodResourcesClient::new(
        pod_resources_socket(c.roots[1].root()),
        Duration::from_secs(5),
    )
    .list()
    .await?;
    ensure!(
        after.iter().all(|p| p.name != "npu-two"),
        "gone from PodResources"
    );
    Ok(())
}

async fn device_plugin_faults_show_in_the_annotation(c: &mut Cluster) -> harness::Outcome {
    c.plugin.inject("host-0", PluginFault::AnnotateOtherDevice);
    c.create("npu-disagree", 2, Some("host-0")).await?;
    let p = c
        .wait_pod("npu-disagree", "annotation", |p| {
            annotation(p, ANNOTATION_ASCEND_910_CONFIGURATION).is_some()
        })
        .await?;
    let annotated =
        DeviceAllocation::parse(&annotation(&p, ANNOTATION_ASCEND_910_CONFIGURATION).unwrap())?
            .physical_ids()?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let real = c.plugin.allocation(&uid).context("allocated")?.devices();
    ensure!(
        annotated != real,
        "annotation {annotated:?} vs allocation {real:?}"
    );
    let pid = c.process("npu-disagree").await?;
    let expected: Vec<String> = real.iter().map(u32::to_string).collect();
    ensure!(
        env_of(pid, ENV_ASCEND_VISIBLE_DEVICES)? == Some(expected.join(",")),
        "the env says the truth"
    );
    c.plugin.inject("host-0", PluginFault::MissingDeviceIp);
    c.create("npu-no-ip", 1, Some("host-0")).await?;
    let p = c
        .wait_pod("npu-no-ip", "annotation", |p| {
            annotation(p, ANNOTATION_ASCEND_910_CONFIGURATION).is_some()
        })
        .await?;
    let a = DeviceAllocation::parse(&annotation(&p, ANNOTATION_ASCEND_910_CONFIGURATION).unwrap())?;
    ensure!(a.devices.iter().all(|d| d.device_ip == "-1"), "{a:?}");
    c.plugin.inject("host-0", PluginFault::None);
    c.delete(&["npu-disagree", "npu-no-ip"]).await
}

/// Two hosts of two NPUs, each with its Ascend files under a fresh root.
struct Npus {
    hosts: SimHosts,
    roots: Vec<AscendRoot>,
    dir: PathBuf,
}

impl Npus {
    fn start(tag: &str) -> anyhow::Result<Npus> {
        let hosts = SimHosts::create(SimHostsOptions::new(2).npus(2))?;
        let dir = std::env::temp_dir().join(format!("hcomm-ascend-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let roots = (0..hosts.len())
            .map(|i| {
                AscendRoot::install(
                    &dir.join(format!("host-{i}")),
                    i,
                    hosts.len(),
                    hosts.npus_per_host(),
                    Path::new(SIMULATOR),
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Npus { hosts, roots, dir })
    }

    /// Runs host `i`'s hccn_tool with `args` inside the host, as the agent would.
    fn tool(&self, i: usize, args: &str) -> anyhow::Result<Output> {
        let h = self.hosts.host(i)?;
        let tool = self.roots[i].hccn_tool();
        let mut cmd = h.command(&tool.display().to_string());
        cmd.args(args.split_whitespace());
        // The simulator bounds every call (a ping is 3 × 1 s at most).
        cmd.output()
            .with_context(|| format!("run hccn_tool {args} on host {i}"))
    }

    fn stdout(&self, i: usize, args: &str) -> anyhow::Result<String> {
        let out = self.tool(i, args)?;
        ensure!(
            out.status.success(),
            "hccn_tool {args} on host {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }
}

impl Drop for Npus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn npu_ports_carry_the_device_ips_and_hccn_tool_answers_each_command_in_format() -> harness::Outcome
{
    let npus = Npus::start("format")?;
    let h1 = npus.hosts.host(1)?;
    ensure!(h1.npus().len() == 2, "two NPU ports: {:?}", h1.npus());
    let port = &h1.npus()[1];
    let shown = String::from_utf8(
        h1.command("ip")
            .args(["-o", "-4", "addr", "show", "dev", &port.interface])
            .output()?
            .stdout,
    )?;
    ensure!(
        shown.contains(&format!("{}/16", port.ip)),
        "{} carries {}: {shown}",
        port.interface,
        port.ip
    );
    let conf = std::fs::read_to_string(npus.roots[1].hccn_conf())?;
    ensure!(
        conf.contains(&format!(
            "address_1={}\nnetmask_1=255.255.0.0\nnetdetect_1=",
            port.ip
        )),
        "hccn.conf lists the port: {conf}"
    );
    ensure!(npus.stdout(1, "-i 1 -ip -g")? == format!("ipaddr:{}\nnetmask:255.255.0.0\n", port.ip));
    ensure!(npus.stdout(1, "-i 1 -link -g")? == "link status: UP\n");
    ensure!(npus.stdout(1, "-i 1 -net_health -g")? == "net health status: Success\n");
    let tls = npus.stdout(1, "-i 1 -tls -g")?;
    ensure!(
        tls.starts_with("dev_id:1, tls switch[0](0:disable, 1:enable)"),
        "{tls}"
    );
    let peer = npus.hosts.host(0)?.npus()[1].ip;
    let ping = npus.stdout(1, &format!("-i 1 -ping -g address {peer}"))?;
    ensure!(
        ping == "3 packets transmitted, 3 received, 0.00% packet loss\n",
        "{ping}"
    );
    let bad = npus.tool(1, "-i 7 -link -g")?;
    ensure!(!bad.status.success(), "a device the host lacks is an error");
    ensure!(npus.roots[1].concurrent_calls() == 0);
    Ok(())
}

fn npu_ping_between_hosts_works_and_fails_when_the_npu_link_is_cut() -> harness::Outcome {
    let npus = Npus::start("ping")?;
    let peer = npus.hosts.host(1)?.npus()[0].ip;
    let ping = format!("-i 0 -ping -g address {peer}");
    ensure!(npus.stdout(0, &ping)?.contains(" 0.00% packet loss"));
    // The peer's NPU 0 loses its cable: the port reports DOWN, the ping times out.
    npus.hosts.set_npu_link(1, 0, LinkState::Down)?;
    ensure!(npus.stdout(1, "-i 0 -link -g")? == "link status: DOWN\n");
    let lost = npus.stdout(0, &ping)?;
    ensure!(
        lost.starts_with("recv time out seq 1\n")
            && lost.ends_with("3 packets transmitted, 0 received, 100.00% packet loss\n"),
        "{lost}"
    );
    // The same host's other NPU is not a way around the cut port.
    let other = npus.hosts.host(1)?.npus()[1].ip;
    ensure!(
        npus.stdout(0, &format!("-i 1 -ping -g address {other}"))?
            .contains(" 0.00% packet loss"),
        "the sibling port still answers"
    );
    npus.hosts.set_npu_link(1, 0, LinkState::Up)?;
    ensure!(npus.stdout(1, "-i 0 -link -g")? == "link status: UP\n");
    ensure!(npus.stdout(0, &ping)?.contains(" 0.00% packet loss"));
    // Our own port cut: nothing leaves it.
    npus.hosts.set_npu_link(0, 0, LinkState::Down)?;
    ensure!(npus.stdout(0, &ping)?.contains("100.00% packet loss"));
    Ok(())
}

fn each_injected_hccn_fault_shows_in_the_tools_answer() -> harness::Outcome {
    let npus = Npus::start("faults")?;
    let root = &npus.roots[0];
    root.set_fault(
        1,
        DeviceFault {
            tls: true,
            net_health: None,
        },
    )?;
    ensure!(npus.stdout(0, "-i 1 -tls -g")?.contains("tls switch[1]"));
    ensure!(npus.stdout(0, "-i 0 -tls -g")?.contains("tls switch[0]"));
    root.set_fault(
        0,
        DeviceFault {
            tls: false,
            net_health: Some("Fault".into()),
        },
    )?;
    ensure!(npus.stdout(0, "-i 0 -net_health -g")? == "net health status: Fault\n");
    ensure!(npus.stdout(0, "-i 1 -net_health -g")? == "net health status: Success\n");
    root.duplicate_device_ip(1, 0)?;
    let ip0 = npus.stdout(0, "-i 0 -ip -g")?;
    ensure!(npus.stdout(0, "-i 1 -ip -g")? == ip0, "two devices, one IP");
    root.remove_device_ip(1)?;
    let missing = npus.tool(0, "-i 1 -ip -g")?;
    ensure!(
        !missing.status.success()
            && String::from_utf8_lossy(&missing.stderr).contains("no address"),
        "a device without an IP: {missing:?}"
    );
    ensure!(
        !std::fs::read_to_string(root.hccn_conf())?.contains("address_1="),
        "and hccn.conf lacks it too"
    );
    Ok(())
}

fn concurrent_hccn_tool_calls_fail_loudly_and_are_counted() -> harness::Outcome {
    let npus = Npus::start("concurrent")?;
    // A ping to an address nobody holds takes its full 3 s, holding the host's lock.
    let h0 = npus.hosts.host(0)?;
    let slow = h0
        .command(&npus.roots[0].hccn_tool().display().to_string())
        .args(["-i", "0", "-ping", "-g", "address", "192.168.250.250"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let refused = npus.tool(0, "-i 1 -link -g")?;
    let slow_out = slow.wait_with_output()?;
    ensure!(
        refused.status.code() == Some(EXIT_CONCURRENT)
            && String::from_utf8_lossy(&refused.stderr).contains(CONCURRENT_MESSAGE),
        "the overlapping call is refused loudly: {refused:?}"
    );
    ensure!(String::from_utf8(slow_out.stdout)?.contains("100.00% packet loss"));
    ensure!(npus.roots[0].concurrent_calls() == 1);
    // Another host's tool is independent, and a call after the first ends is served.
    ensure!(npus.stdout(0, "-i 1 -link -g")? == "link status: UP\n");
    ensure!(npus.roots[1].concurrent_calls() == 0);
    Ok(())
}
