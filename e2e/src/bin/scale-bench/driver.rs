//! The played node agents and device plugin: one Pod watch (a reflector, so the bench's
//! own waits read a cache and add no list calls to what is measured) drives, for every
//! member Pod of the bench's namespace:
//!
//! - once bound, the device plugin's allocation annotation (the lowest free NPU ids of its
//!   node, each with its own device IP), as the Ascend plugin writes it at admission;
//! - once Running with its allocation, after `--agent-delay-ms`, the agent's conditions
//!   (verified, weights synced, joined, member-ready: True) in one status patch;
//! - once asked to drain, the agent's drain (member-ready False, then drained True).
//!
//! Plus each node's `HcommNode` republished every `--node-publish-s`, as the agents'
//! inventory loops do. Every write is counted by (verb, resource, subresource), so the
//! report can take the bench's own requests out of the apiserver's counters.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use hcomm_crds::HcommNode;
use hcomm_crds::contract::ascend::{
    ANNOTATION_ASCEND_910_CONFIGURATION, AllocatedDevice, DeviceAllocation,
};
use hcomm_crds::contract::{
    ANNOTATION_DRAIN_REQUESTED, LABEL_GROUP, POD_DRAINED, POD_JOINED, POD_MEMBER_READY,
    POD_VERIFIED, POD_WEIGHTS_SYNCED, PodReason,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::args::NPUS_PER_NODE;
use crate::setup::{NS, node_name, node_status};

/// Requests the bench itself made, by (verb, resource, subresource) as the apiserver's
/// `apiserver_request_total` labels them.
pub type OwnRequests = Arc<Mutex<BTreeMap<(String, String, String), u64>>>;

/// Counts one request of the bench.
pub fn count(own: &OwnRequests, verb: &str, resource: &str, subresource: &str) {
    let mut own = own.lock().unwrap_or_else(|e| e.into_inner());
    *own.entry((verb.into(), resource.into(), subresource.into()))
        .or_default() += 1;
}

/// The running driver; stops when dropped.
pub struct Driver {
    tasks: Vec<JoinHandle<()>>,
    /// The member Pods, as the watch last saw them.
    pub pods: Store<Pod>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Driver {
    /// Starts playing the agents of `nodes` nodes.
    pub fn start(
        client: kube::Client,
        nodes: u32,
        agent_delay: Duration,
        writes_in_flight: usize,
        node_publish: Duration,
        own: OwnRequests,
    ) -> Driver {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let (reader, writer) = reflector::store();
        let state = Agents {
            pods: pods.clone(),
            delay: agent_delay,
            own: own.clone(),
            limit: Arc::new(Semaphore::new(writes_in_flight)),
            held: HashMap::new(),
            allocated: HashMap::new(),
            made_ready: HashSet::new(),
            drained: HashSet::new(),
        };
        let stream = reflector::reflector(
            writer,
            watcher(pods, watcher::Config::default().labels(LABEL_GROUP)),
        )
        .default_backoff();
        let mut tasks = vec![tokio::spawn(play(stream, state))];
        if !node_publish.is_zero() {
            tasks.push(tokio::spawn(publish_nodes(
                client,
                nodes,
                node_publish,
                own,
            )));
        }
        Driver {
            tasks,
            pods: reader,
        }
    }
}

/// What the played agents remember between events.
struct Agents {
    pods: Api<Pod>,
    delay: Duration,
    own: OwnRequests,
    limit: Arc<Semaphore>,
    /// NPU ids held per node.
    held: HashMap<String, BTreeSet<u32>>,
    /// Pod uid → (node, ids).
    allocated: HashMap<String, (String, Vec<u32>)>,
    made_ready: HashSet<String>,
    drained: HashSet<String>,
}

async fn play(
    stream: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    mut agents: Agents,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => agents.seen(&pod),
            Ok(watcher::Event::Delete(pod)) => agents.gone(&pod),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "pod watch"),
        }
    }
}

impl Agents {
    fn seen(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            self.gone(pod);
            return;
        }
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        match annotations.get(ANNOTATION_ASCEND_910_CONFIGURATION) {
            Some(text) => {
                if !self.allocated.contains_key(&uid)
                    && let Ok(a) = DeviceAllocation::parse(text)
                {
                    let ids = a.physical_ids().unwrap_or_default();
                    self.held.entry(node.clone()).or_default().extend(&ids);
                    self.allocated.insert(uid.clone(), (node, ids));
                }
            }
            None => {
                if !self.allocated.contains_key(&uid) {
                    self.allocate(pod, &uid, &name, node);
                }
                return;
            }
        }
        if annotations.contains_key(ANNOTATION_DRAIN_REQUESTED) {
            if self.drained.insert(uid) {
                self.spawn_drain(name);
            }
            return;
        }
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if running && self.made_ready.insert(uid) {
            self.spawn_ready(name);
        }
    }

    fn gone(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some((node, ids)) = self.allocated.remove(&uid)
            && let Some(held) = self.held.get_mut(&node)
        {
            for id in ids {
                held.remove(&id);
            }
        }
        self.made_ready.remove(&uid);
        self.drained.remove(&uid);
    }

    /// The device plugin's part: the lowest free ids of the node, annotated at once.
    fn allocate(&mut self, pod: &Pod, uid: &str, name: &str, node: String) {
        let want = requested_npus(pod);
        let held = self.held.entry(node.clone()).or_default();
        let ids: Vec<u32> = (0..NPUS_PER_NODE)
            .filter(|id| !held.contains(id))
            .take(want as usize)
            .collect();
        if ids.len() != want as usize {
            tracing::warn!(pod = name, node, "no free NPUs for a bound Pod");
            return;
        }
        held.extend(&ids);
        self.allocated
            .insert(uid.to_owned(), (node.clone(), ids.clone()));
        let index: u32 = node
            .rsplit('-')
            .next()
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        let allocation = DeviceAllocation {
            pod_name: name.to_owned(),
            server_id: uid.to_owned(),
            host_ip: String::new(),
            super_pod_id: None,
            devices: ids
                .iter()
                .map(|id| AllocatedDevice {
                    device_id: id.to_string(),
                    device_ip: format!("10.{}.{}.{}", 200 + index / 256, index % 256, id + 1),
                    super_device_id: None,
                })
                .collect(),
        };
        let patch = serde_json::json!({"metadata": {"annotations": {
            (ANNOTATION_ASCEND_910_CONFIGURATION): serde_json::to_string(&allocation).unwrap_or_default()
        }}});
        let (pods, own, limit, name) = (
            self.pods.clone(),
            self.own.clone(),
            self.limit.clone(),
            name.to_owned(),
        );
        tokio::spawn(async move {
            let _permit = limit.acquire().await;
            count(&own, "PATCH", "pods", "");
            if let Err(error) = pods
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(%error, pod = name, "allocation annotation");
            }
        });
    }

    fn spawn_ready(&self, name: String) {
        let conditions = [
            (POD_VERIFIED, "True", PodReason::Verified),
            (POD_WEIGHTS_SYNCED, "True", PodReason::WeightsSynced),
            (POD_JOINED, "True", PodReason::Joined),
            (POD_MEMBER_READY, "True", PodReason::MemberReady),
        ];
        let (pods, own, limit, delay) = (
            self.pods.clone(),
            self.own.clone(),
            self.limit.clone(),
            self.delay,
        );
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _permit = limit.acquire().await;
            set_conditions(&pods, &own, &name, &conditions).await;
        });
    }

    fn spawn_drain(&self, name: String) {
        let (pods, own, limit, delay) = (
            self.pods.clone(),
            self.own.clone(),
            self.limit.clone(),
            self.delay,
        );
        tokio::spawn(async move {
            let _permit = limit.acquire().await;
            set_conditions(
                &pods,
                &own,
                &name,
                &[(POD_MEMBER_READY, "False", PodReason::Draining)],
            )
            .await;
            tokio::time::sleep(delay).await;
            set_conditions(
                &pods,
                &own,
                &name,
                &[(POD_DRAINED, "True", PodReason::Drained)],
            )
            .await;
        });
    }
}

/// NPUs the Pod's containers ask for (limits, as the operator writes them).
fn requested_npus(pod: &Pod) -> u32 {
    let resource = hcomm_crds::contract::ascend::RESOURCE_ASCEND910;
    pod.spec.as_ref().map_or(0, |s| {
        s.containers
            .iter()
            .filter_map(|c| {
                let r = c.resources.as_ref()?;
                let q = r
                    .limits
                    .as_ref()
                    .and_then(|l| l.get(resource))
                    .or_else(|| r.requests.as_ref().and_then(|l| l.get(resource)))?;
                q.0.parse::<u32>().ok()
            })
            .sum()
    })
}

/// Sets Pod conditions as the agent does (status subresource, merged by type).
async fn set_conditions(
    pods: &Api<Pod>,
    own: &OwnRequests,
    name: &str,
    conditions: &[(&str, &str, PodReason)],
) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let list: Vec<_> = conditions
        .iter()
        .map(|(type_, status, reason)| {
            serde_json::json!({"type": type_, "status": status, "reason": reason.as_str(),
                               "message": "played by scale-bench", "lastTransitionTime": now})
        })
        .collect();
    let patch = serde_json::json!({"status": {"conditions": list}});
    count(own, "PATCH", "pods", "status");
    if let Err(error) = pods
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        tracing::warn!(%error, pod = name, "set conditions");
    }
}

/// Republishes every node's `HcommNode` status once per `every`, spread evenly.
async fn publish_nodes(client: kube::Client, nodes: u32, every: Duration, own: OwnRequests) {
    let api: Api<HcommNode> = Api::all(client);
    let gap = every / nodes.max(1);
    loop {
        for i in 0..nodes {
            tokio::time::sleep(gap).await;
            count(&own, "PATCH", "hcommnodes", "status");
            if let Err(error) = api
                .patch_status(
                    &node_name(i),
                    &PatchParams::default(),
                    &Patch::Merge(&node_status(i)),
                )
                .await
            {
                tracing::warn!(%error, node = i, "republish HcommNode");
            }
        }
    }
}
