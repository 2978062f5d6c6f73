//! The process kubelet: kwok fakes a Pod's status but runs nothing, so for the Pods bound
//! to simulated hosts the testbed does a kubelet's remaining job itself. It watches Pods,
//! and for each one that kwok has given an IP it plumbs that IP into the Pod's host
//! ([`SimHosts::add_pod_address`]) and runs the containers it knows (see [`super::launch`])
//! as processes inside the host's network namespace, restarting them if they exit
//! (`restartPolicy: Always`). When the Pod is deleted it does what a kubelet does: SIGTERM
//! to every process, the Pod's `terminationGracePeriodSeconds` (capped at [`MAX_GRACE`])
//! to exit, then SIGKILL; the address and devices are freed, and only then does the Pod
//! object go (the kubelet's final delete with grace 0). Terminations run in the
//! background, so a Pod draining for seconds holds up no other Pod's start. kwok deletes
//! a deleted Pod at once, so while its processes run the Pod carries the finalizer
//! [`FINALIZER`] (added before they start, removed when they stopped): the agent and the
//! operator see a terminating Pod, as on a real node, for as long as its worker drains.
//!
//! With a [`DevicePlugin`] it also admits Pods that request NPUs as a kubelet with the
//! Ascend device plugin does: devices allocated and the plugin's annotations written
//! before any container starts, `ASCEND_VISIBLE_DEVICES` in the containers' env, the
//! devices freed when the Pod goes (see [`super::device_plugin`]).
//!
//! Each Pod's processes run in the Pod's own cgroup (`kubepods/pod<uid>`, see
//! [`super::cgroups`]) when the machine allows it, as a kubelet's do: that is what the
//! agent's local-API caller check reads.
//!
//! One kubelet per node, as on a cluster: each watches only the Pods bound to its node
//! (the field selector a kubelet uses) and admits and starts them one after another, while
//! the nodes go on side by side. One loop for every node admitted eight Pods on eight
//! nodes one after the other — each admission two API writes (the plugin's annotation, the
//! finalizer) — a queue in front of a scale-out's allocations that no cluster has.
//!
//! Size: the whole Pod lifecycle of the process kubelet, start to cleanup, in one place.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::csi_volumes::CsiVolumes;
use super::device_plugin::{self, Admitted, DevicePlugin, PodAllocation};
use super::launch::{self, Launch};
use crate::hosts::SimHosts;

/// Longest grace a deleted Pod's processes get before SIGKILL.
pub const MAX_GRACE: Duration = Duration::from_secs(30);
/// Holds a running Pod's object while its processes stop (see the module docs).
pub const FINALIZER: &str = "testbed.hcomm.io/process-kubelet";
/// Deadline of each API call about a Pod's object (finalizer, final delete).
const OBJECT_DEADLINE: Duration = Duration::from_secs(10);
/// Pause before restarting a process that exited.
const RESTART_BACKOFF: Duration = Duration::from_secs(1);
/// Deadline of the device plugin's annotation patch.
const ANNOTATE_DEADLINE: Duration = Duration::from_secs(10);

/// Where a node's files live and which simulated host it is.
#[derive(Debug, Clone)]
pub struct NodeRoot {
    /// Index into [`SimHosts::hosts`].
    pub host: usize,
    /// The host's root folder (hostPath volumes resolve under it).
    pub root: PathBuf,
}

/// How the kubelet is set up.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Node name → host.
    pub nodes: BTreeMap<String, NodeRoot>,
    /// Program name (`command[0]`'s file name) → binary.
    pub programs: BTreeMap<String, PathBuf>,
    /// Folder for each process' log (`<namespace>_<pod>_<container>.log`).
    pub log_dir: PathBuf,
    /// The device-plugin stand-in, when nodes have NPUs.
    pub device_plugin: Option<DevicePlugin>,
    /// The CANN runtime (the HCCL simulator) that containers given NPUs see, if installed.
    pub hccl_runtime: Option<super::hccl_runtime::HcclRuntime>,
    /// Where processes see their Pods' published CSI volumes (a short path: see
    /// [`super::csi_volumes`]).
    pub csi_views: PathBuf,
}

/// Whether Pods' processes get their own cgroups on this machine (else why not): the
/// testbed's agents identify local-API callers only then.
pub fn pod_cgroups_available() -> Result<(), String> {
    super::cgroups::available()
}

/// One process the kubelet started, as tests see it.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// `namespace/pod`.
    pub pod: String,
    /// The container.
    pub container: String,
    /// Its current pid.
    pub pid: Option<u32>,
    /// Times it was restarted after exiting.
    pub restarts: u32,
    /// Its log file.
    pub log: PathBuf,
}

/// A running process kubelet; stops (terminating its processes) on [`Kubelet::stop`] or drop.
pub struct Kubelet {
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    view: ProcessView,
}

/// Node → the processes its kubelet runs (each node's kubelet writes only its own entry).
type ProcessView = Arc<Mutex<BTreeMap<String, BTreeMap<String, ProcessInfo>>>>;

impl Kubelet {
    /// Starts one kubelet per node of `config`, each watching its node's Pods with `client`.
    pub fn start(client: kube::Client, hosts: Arc<SimHosts>, config: KubeletConfig) -> Kubelet {
        let (shutdown, rx) = watch::channel(false);
        let view = ProcessView::default();
        let cgroups = match super::cgroups::PodCgroups::create() {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                tracing::warn!(error = %e, "kubelet: Pods' processes run without Pod cgroups");
                None
            }
        };
        let csi = Arc::new(CsiVolumes::new(config.csi_views.clone()));
        let nodes: Vec<_> = config
            .nodes
            .iter()
            .map(|(name, root)| {
                let (stopped, stopped_rx) = tokio::sync::mpsc::unbounded_channel();
                let state = State {
                    node_name: name.clone(),
                    node: root.clone(),
                    csi: csi.clone(),
                    stopped,
                    terminating: HashMap::new(),
                    cgroups: cgroups.clone(),
                    client: client.clone(),
                    annotated: std::collections::HashSet::new(),
                    held: HashMap::new(),
                    hosts: hosts.clone(),
                    config: config.clone(),
                    pods: HashMap::new(),
                    deferred: HashMap::new(),
                    view: view.clone(),
                };
                run(client.clone(), state, rx.clone(), stopped_rx)
            })
            .collect();
        let task = tokio::spawn(async move {
            futures::future::join_all(nodes).await;
        });
        Kubelet {
            shutdown,
            task: Some(task),
            view,
        }
    }

    /// The processes running now, keyed by `namespace/pod/container`.
    pub fn processes(&self) -> BTreeMap<String, ProcessInfo> {
        let view = self.view.lock().expect("kubelet view");
        view.values()
            .flat_map(|node| node.iter().map(|(k, p)| (k.clone(), p.clone())))
            .collect()
    }

    /// Terminates every process (graceful, then SIGKILL) and stops watching.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

struct Running {
    key: String,
    uid: String,
    host: usize,
    ip: Ipv4Addr,
    grace: Duration,
    procs: Vec<Proc>,
}

struct Proc {
    launch: Launch,
    child: Option<Child>,
    exited_at: Option<Instant>,
    restarts: u32,
    log: PathBuf,
}

/// A Pod whose processes are being stopped in the background.
struct Terminating {
    key: String,
    /// The Pod is deleted (its object goes once the processes stopped); else it finished,
    /// or the testbed stops, and it stays: only the finalizer comes off.
    deleted: bool,
    host: usize,
    ip: Ipv4Addr,
}

/// One node's kubelet.
struct State {
    node_name: String,
    node: NodeRoot,
    /// The Pods' CSI volumes (published before their processes start).
    csi: Arc<CsiVolumes>,
    /// Pod UIDs whose processes have all exited (sent by the termination tasks).
    stopped: tokio::sync::mpsc::UnboundedSender<String>,
    /// Pod UID → a Pod whose processes are stopping.
    terminating: HashMap<String, Terminating>,
    /// Each Pod's cgroup, when this machine allows them.
    cgroups: Option<Arc<super::cgroups::PodCgroups>>,
    client: kube::Client,
    /// Pod UIDs whose device annotations are written.
    annotated: std::collections::HashSet<String>,
    /// Pod UID → `namespace/pod` of the Pods this kubelet put [`FINALIZER`] on: it takes
    /// it off again when the Pod ends, whether or not its processes ever started (a Pod
    /// held and then deferred, e.g. its address still taken, may be deleted before it runs).
    held: HashMap<String, String>,
    hosts: Arc<SimHosts>,
    config: KubeletConfig,
    /// Pod UID → what runs for it.
    pods: HashMap<String, Running>,
    /// Pods bound here whose start failed for a passing reason (devices or the address
    /// still held by a Pod that is stopping, an API error): tried again every tick, as a
    /// kubelet's sync loop does, not only on the Pod's next event (which may never come:
    /// its agent waits for the worker this would start).
    deferred: HashMap<String, Pod>,
    view: ProcessView,
}

async fn run(
    client: kube::Client,
    mut state: State,
    mut shutdown: watch::Receiver<bool>,
    mut stopped: tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let pods: Api<Pod> = Api::all(client);
    let only_here =
        watcher::Config::default().fields(&format!("spec.nodeName={}", state.node_name));
    let mut events = watcher::watcher(pods, only_here).boxed();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tick.tick() => {
                state.supervise();
                state.retry_deferred().await;
            }
            Some(uid) = stopped.recv() => state.finish_termination(&uid),
            event = events.next() => match event {
                Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => state.observe(&pod).await,
                Some(Ok(Event::Delete(pod))) => {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        state.deferred.remove(uid);
                        state.begin_termination(uid, true);
                    }
                }
                Some(Ok(Event::Init | Event::InitDone)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "kubelet: pod watch error (retrying)");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                None => break,
            },
        }
    }
    let uids: Vec<String> = state.pods.keys().cloned().collect();
    for uid in uids {
        state.begin_termination(&uid, false);
    }
    // Every termination ends within its grace (then SIGKILL); a little more for the kill.
    let deadline = tokio::time::Instant::now() + MAX_GRACE + Duration::from_secs(5);
    while !state.terminating.is_empty() {
        match tokio::time::timeout_at(deadline, stopped.recv()).await {
            Ok(Some(uid)) => state.finish_termination(&uid),
            Ok(None) | Err(_) => {
                tracing::warn!(
                    left = state.terminating.len(),
                    "kubelet: terminations unfinished at shutdown"
                );
                break;
            }
        }
    }
}

impl State {
    /// Tries the deferred starts again (see [`State::deferred`]).
    async fn retry_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let pods: Vec<Pod> = self.deferred.drain().map(|(_, p)| p).collect();
        for pod in pods {
            self.observe(&pod).await;
        }
    }

    async fn observe(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        // The newest copy replaces a deferred one; kept again below if it cannot start.
        self.deferred.remove(&uid);
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if pod.metadata.deletion_timestamp.is_some() || finished {
            self.begin_termination(&uid, pod.metadata.deletion_timestamp.is_some());
            return;
        }
        if self.pods.contains_key(&uid) || self.terminating.contains_key(&uid) {
            return;
        }
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(&self.node_name) {
            return;
        }
        let (node_name, node) = (self.node_name.clone(), self.node.clone());
        let Ok(allocation) = self.admit(pod, &uid, &node_name, &node).await else {
            self.deferred.insert(uid, pod.clone());
            return;
        };
        let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        else {
            self.deferred.insert(uid, pod.clone());
            return;
        };
        // Volumes before images, as a kubelet's sync does: a Pod whose volume cannot be
        // published waits (MountVolume.SetUp failed), retried every tick.
        let views = match self.csi.publish(pod, &node_name, &node.root).await {
            Ok(views) => views,
            Err(e) => {
                tracing::warn!(pod = ?pod.metadata.name, error = %e, "kubelet: volumes not ready, not starting yet");
                self.deferred.insert(uid, pod.clone());
                return;
            }
        };
        if let Some(image) = unpullable_image(pod) {
            // A kubelet admits the Pod (devices allocated) and then fails to pull: the
            // containers never start, the Pod never turns Ready (ErrImagePull, then
            // ImagePullBackOff). Not remembered, so each event of the Pod logs it again.
            tracing::warn!(pod = ?pod.metadata.name, %image, reason = "ErrImagePull", "kubelet: cannot pull the image (its registry host is under .invalid), not starting");
            return;
        }
        let (mut launches, _) = launch::plan(pod, &node.root, &views, &self.config.programs);
        if launches.is_empty() {
            return;
        }
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or("?")
        );
        if let Err(e) = hold_object(&self.client, pod).await {
            tracing::warn!(pod = %key, error = %e, "kubelet: cannot hold the Pod object while it runs; not starting yet");
            self.deferred.insert(uid, pod.clone());
            return;
        }
        self.held.insert(uid.clone(), key.clone());
        if let Err(e) = self.hosts.add_pod_address(node.host, ip) {
            tracing::warn!(pod = %key, %ip, error = %e, "kubelet: cannot give the pod its address yet");
            self.deferred.insert(uid, pod.clone());
            return;
        }
        // Only now, with nothing left to defer the start: the HCCL runtime's env carries a
        // fault injected for the next such Pod, which a deferred start would use up on a
        // launch that never runs (its retry then starts without it).
        if let Some(a) = &allocation {
            give_devices(&mut launches, a);
            if let Some(rt) = &self.config.hccl_runtime {
                // As an image with CANN installed and the Ascend runtime's driver mounts.
                for l in launches
                    .iter_mut()
                    .filter(|l| a.containers.contains_key(&l.container))
                {
                    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
                    l.env.extend(rt.container_env(node.host, pod_name));
                }
            }
        }
        let grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(MAX_GRACE)
            .min(MAX_GRACE);
        let mut running = Running {
            key: key.clone(),
            uid: uid.clone(),
            host: node.host,
            ip,
            grace,
            procs: Vec::new(),
        };
        for l in launches {
            let log =
                self.config
                    .log_dir
                    .join(format!("{}_{}.log", key.replace('/', "_"), l.container));
            let mut p = Proc {
                launch: l,
                child: None,
                exited_at: None,
                restarts: 0,
                log,
            };
            self.spawn(node.host, &key, &uid, &mut p);
            running.procs.push(p);
        }
        tracing::info!(pod = %key, %ip, host = node.host, "kubelet: started");
        self.pods.insert(uid, running);
        self.publish();
    }

    /// The device plugin's admission of `pod` on `node`: its devices (allocated once, the
    /// annotations written before anything starts), `None` when it asks for none, `Err`
    /// when it cannot start now (logged; retried on the Pod's next event).
    async fn admit(
        &mut self,
        pod: &Pod,
        uid: &str,
        node_name: &str,
        node: &NodeRoot,
    ) -> Result<Option<PodAllocation>, ()> {
        let Some(dp) = self.config.device_plugin.clone() else {
            return Ok(None);
        };
        let asks = device_plugin::requested(pod, dp.resource());
        if asks.is_empty() {
            return Ok(None);
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("?");
        let allocation = dp
            .allocate(uid, namespace, name, node_name, &asks)
            .map_err(|e| tracing::warn!(pod = %name, error = %e, "device plugin: not admitted"))?;
        if self.annotated.contains(uid) {
            return Ok(Some(allocation));
        }
        let host_ip = self
            .hosts
            .host(node.host)
            .map(|h| h.data_ip().to_string())
            .unwrap_or_default();
        // The real plugin asks the driver (DCMI) for each device's address, not the
        // host's /etc/hccn.conf: the addresses the fabric gave the devices, so a fault
        // injected into hccn.conf is the agent's to find, as on a real node.
        let conf = self.hosts.hccn_conf(node.host).unwrap_or_default();
        let annotations = device_plugin::annotations(
            dp.resource(),
            Admitted {
                pod_name: name,
                uid,
                host_ip: &host_ip,
            },
            &allocation,
            dp.devices_of(node_name),
            &conf,
            dp.fault(node_name),
        );
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
        let result = tokio::time::timeout(
            ANNOTATE_DEADLINE,
            pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        match result {
            Ok(Ok(_)) => {
                tracing::info!(pod = %name, devices = ?allocation.devices(), "device plugin: allocated");
                self.annotated.insert(uid.to_owned());
                Ok(Some(allocation))
            }
            Ok(Err(e)) => {
                tracing::warn!(pod = %name, error = %e, "device plugin: cannot annotate, not starting");
                dp.free(uid);
                Err(())
            }
            Err(_) => {
                tracing::warn!(pod = %name, deadline = ?ANNOTATE_DEADLINE, "device plugin: annotation timed out, not starting");
                dp.free(uid);
                Err(())
            }
        }
    }

    /// Frees a Pod's devices and unpublishes its CSI volumes (it is gone or finished, and
    /// none of its processes runs).
    fn release(&mut self, uid: &str) {
        let (csi, pod_uid) = (self.csi.clone(), uid.to_owned());
        tokio::spawn(async move { csi.unpublish(&pod_uid).await });
        self.annotated.remove(uid);
        if let Some(dp) = &self.config.device_plugin
            && let Some(a) = dp.free(uid)
        {
            tracing::info!(pod = %a.name, devices = ?a.devices(), "device plugin: freed");
        }
    }

    fn spawn(&self, host: usize, key: &str, uid: &str, p: &mut Proc) {
        let Ok(h) = self.hosts.host(host) else {
            return;
        };
        let in_host = h.command(&p.launch.program.display().to_string());
        // The whole command line (`ip netns exec …` included) starts in the Pod's cgroup:
        // inside a host's namespaces /sys is remounted and the cgroup tree is not there.
        let mut argv: Vec<String> = std::iter::once(in_host.get_program())
            .chain(in_host.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        argv.extend(p.launch.args.iter().cloned());
        let argv = match self.cgroups.as_ref().map(|c| c.wrap(uid, &argv)) {
            Some(Ok(line)) => line,
            Some(Err(e)) => {
                tracing::warn!(pod = %key, error = %e, "kubelet: no Pod cgroup, not starting");
                p.exited_at = Some(Instant::now());
                return;
            }
            None => argv,
        };
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(p.launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Ok(filter) = std::env::var("RUST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p.log);
        match log.and_then(|f| Ok((f.try_clone()?, f))) {
            Ok((out, err)) => {
                cmd.stdout(out).stderr(err);
            }
            Err(e) => {
                tracing::warn!(pod = %key, error = %e, "kubelet: no log file, discarding output");
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        match cmd.spawn() {
            Ok(child) => {
                p.child = Some(child);
                p.exited_at = None;
            }
            Err(e) => {
                tracing::warn!(pod = %key, error = %e, "kubelet: cannot start container");
                p.exited_at = Some(Instant::now());
            }
        }
    }

    /// Reaps exited processes and restarts them after a backoff.
    fn supervise(&mut self) {
        let mut restart: Vec<(String, usize)> = Vec::new();
        for (uid, r) in self.pods.iter_mut() {
            for (i, p) in r.procs.iter_mut().enumerate() {
                if let Some(child) = p.child.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    tracing::warn!(pod = %r.key, container = %p.launch.container, %status, "kubelet: container exited");
                    p.child = None;
                    p.exited_at = Some(Instant::now());
                }
                if p.child.is_none() && p.exited_at.is_some_and(|t| t.elapsed() >= RESTART_BACKOFF)
                {
                    restart.push((uid.clone(), i));
                }
            }
        }
        for (uid, i) in restart {
            let Some(mut r) = self.pods.remove(&uid) else {
                continue;
            };
            let (host, key, pod_uid) = (r.host, r.key.clone(), r.uid.clone());
            let p = &mut r.procs[i];
            p.restarts += 1;
            self.spawn(host, &key, &pod_uid, p);
            self.pods.insert(uid, r);
        }
        self.publish();
    }

    /// Starts stopping a Pod's processes in the background (SIGTERM, the grace, SIGKILL);
    /// [`State::finish_termination`] follows once they all exited. A Pod not running here
    /// only has its devices freed.
    fn begin_termination(&mut self, uid: &str, deleted: bool) {
        if self.terminating.contains_key(uid) {
            return;
        }
        let Some(r) = self.pods.remove(uid) else {
            self.release(uid);
            if let Some(key) = self.held.remove(uid) {
                self.let_object_go(key, uid, deleted);
            }
            return;
        };
        let children: Vec<(String, Child)> = r
            .procs
            .into_iter()
            .filter_map(|p| Some((p.launch.container, p.child?)))
            .collect();
        let (key, grace, done, pod_uid) =
            (r.key.clone(), r.grace, self.stopped.clone(), uid.to_owned());
        tracing::info!(pod = %key, ?grace, "kubelet: stopping (SIGTERM)");
        tokio::spawn(async move {
            stop_processes(&key, children, grace).await;
            let _ = done.send(pod_uid);
        });
        self.terminating.insert(
            uid.to_owned(),
            Terminating {
                key: r.key,
                deleted,
                host: r.host,
                ip: r.ip,
            },
        );
        self.publish();
    }

    /// A Pod's processes all exited: its cgroup, address and devices are freed, then its
    /// object may go (the finalizer off, the final delete), in the background.
    fn finish_termination(&mut self, uid: &str) {
        let Some(t) = self.terminating.remove(uid) else {
            return;
        };
        if let Some(c) = &self.cgroups {
            c.remove(uid);
        }
        if let Err(e) = self.hosts.remove_pod_address(t.host, t.ip) {
            tracing::warn!(pod = %t.key, error = %e, "kubelet: cannot remove the pod address");
        }
        self.release(uid);
        tracing::info!(pod = %t.key, "kubelet: stopped");
        self.held.remove(uid);
        self.let_object_go(t.key, uid, t.deleted);
        self.publish();
    }

    /// Takes the Pod's object off hold in the background (see [`let_object_go`]).
    fn let_object_go(&self, key: String, uid: &str, deleted: bool) {
        let (client, uid) = (self.client.clone(), uid.to_owned());
        tokio::spawn(async move {
            if let Err(e) = let_object_go(&client, &key, &uid, deleted).await {
                tracing::warn!(pod = %key, error = %e, "kubelet: cannot release the Pod object");
            }
        });
    }

    fn publish(&self) {
        let mut view = BTreeMap::new();
        for r in self.pods.values() {
            for p in &r.procs {
                view.insert(
                    format!("{}/{}", r.key, p.launch.container),
                    ProcessInfo {
                        pod: r.key.clone(),
                        container: p.launch.container.clone(),
                        pid: p.child.as_ref().and_then(Child::id),
                        restarts: p.restarts,
                        log: p.log.clone(),
                    },
                );
            }
        }
        self.view
            .lock()
            .expect("kubelet view")
            .insert(self.node_name.clone(), view);
    }
}

/// SIGTERM to each process, `grace` for all of them to exit, then SIGKILL.
async fn stop_processes(key: &str, mut children: Vec<(String, Child)>, grace: Duration) {
    for (_, child) in &children {
        if let Some(pid) = child.id() {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status(),
            )
            .await;
        }
    }
    let deadline = tokio::time::Instant::now() + grace;
    for (container, child) in &mut children {
        if tokio::time::timeout_at(deadline, child.wait())
            .await
            .is_err()
        {
            tracing::warn!(pod = %key, %container, "kubelet: grace period over, killing");
            let _ = child.kill().await;
        }
    }
}

/// Puts [`FINALIZER`] on `pod` (a strategic merge adds to the list), so its object stays
/// while its processes stop.
async fn hold_object(client: &kube::Client, pod: &Pod) -> Result<(), String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if pod
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
    {
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({ "metadata": { "finalizers": [FINALIZER] } });
    let (params, patch) = (PatchParams::default(), Patch::Strategic(&patch));
    match tokio::time::timeout(OBJECT_DEADLINE, pods.patch(name, &params, &patch)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {OBJECT_DEADLINE:?}")),
    }
}

/// What a kubelet does once a Pod's containers stopped: the finalizer off, and for a
/// `deleted` Pod the final delete with grace 0 (for the Pod of `uid` only; a Pod already
/// gone is fine). A finished Pod stays, as a kubelet leaves it.
async fn let_object_go(
    client: &kube::Client,
    key: &str,
    uid: &str,
    deleted: bool,
) -> Result<(), String> {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
    let unhold = serde_json::json!({
        "metadata": { "$deleteFromPrimitiveList/finalizers": [FINALIZER], "uid": uid }
    });
    let (params, unhold) = (PatchParams::default(), Patch::Strategic(&unhold));
    match tokio::time::timeout(OBJECT_DEADLINE, pods.patch(name, &params, &unhold)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) if gone(&e) => return Ok(()),
        Ok(Err(e)) => return Err(format!("remove the finalizer: {e}")),
        Err(_) => {
            return Err(format!(
                "remove the finalizer: no answer within {OBJECT_DEADLINE:?}"
            ));
        }
    }
    if !deleted {
        return Ok(());
    }
    let params = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match tokio::time::timeout(OBJECT_DEADLINE, pods.delete(name, &params)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if gone(&e) => Ok(()),
        Ok(Err(e)) => Err(format!("final delete: {e}")),
        Err(_) => Err(format!(
            "final delete: no answer within {OBJECT_DEADLINE:?}"
        )),
    }
}

/// The first image of `pod` no registry can serve: its registry host is under `.invalid`,
/// the top-level domain reserved never to resolve (RFC 6761), so a real kubelet's pull
/// fails with `ErrImagePull` there too. That is how scenarios model a bad image
/// (`example.invalid/worker:broken`) without pretending: every other image "pulls", as
/// the testbed runs workspace binaries whatever the image says.
pub fn unpullable_image(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter_map(|c| c.image.as_deref())
        .find(|image| {
            let (host, rest) = image.split_once('/').unwrap_or(("", image));
            // Docker's rule: the first part names a registry when it has a dot or a port.
            let registry = !rest.is_empty() && (host.contains('.') || host.contains(':'));
            let host = host.split(':').next().unwrap_or(host);
            registry && (host == "invalid" || host.ends_with(".invalid"))
        })
        .map(str::to_owned)
}

/// Sets `ASCEND_VISIBLE_DEVICES` in each launch whose container got devices, as the
/// plugin's Allocate response does (it wins over a value in the Pod spec).
fn give_devices(launches: &mut [Launch], allocation: &PodAllocation) {
    use hcomm_crds::contract::ascend::ENV_ASCEND_VISIBLE_DEVICES;
    for l in launches {
        if let Some(ids) = allocation.containers.get(&l.container) {
            l.env.retain(|(k, _)| k != ENV_ASCEND_VISIBLE_DEVICES);
            l.env.push((
                ENV_ASCEND_VISIBLE_DEVICES.to_owned(),
                device_plugin::visible_devices(ids),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(images: &[&str]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": images.iter().enumerate()
                .map(|(i, image)| serde_json::json!({"name": format!("c{i}"), "image": image}))
                .collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    #[test]
    fn an_image_on_an_invalid_registry_host_cannot_be_pulled() {
        assert_eq!(
            unpullable_image(&pod(&["hcomm/example-worker:0.1.0", "example.invalid/w:1"])),
            Some("example.invalid/w:1".to_owned())
        );
        assert_eq!(
            unpullable_image(&pod(&["registry.invalid:5000/w"])),
            Some("registry.invalid:5000/w".to_owned())
        );
    }

    #[test]
    fn ordinary_images_pull() {
        assert_eq!(
            unpullable_image(&pod(&[
                "hcomm/example-worker:0.1.0",
                "docker.io/library/invalid:1",
                "invalid/x"
            ])),
            None
        );
    }
}
