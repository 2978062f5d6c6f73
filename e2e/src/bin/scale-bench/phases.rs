//! The measured steps of one size: scale some groups to a replica count and time (from
//! the `replicas` patch) until every one of them has that many live member Pods, and
//! until every one reports Ready with that many ready members at the new generation.
//! The waits read the driver's and the bench's reflector caches, never the API server,
//! so the bench adds no reads to what the apiserver's counters measure.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::{GroupConditionType, LABEL_GROUP};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;

use crate::driver::{OwnRequests, count};
use crate::setup::NS;

/// How often the caches are looked at.
const POLL: Duration = Duration::from_millis(50);

/// The bench's groups: `g-0` … `g-<n-1>`.
pub fn group_name(i: u32) -> String {
    format!("g-{i}")
}

/// The manifest of a bench group: TCP backend, `dpm` NPUs a member, drains that end as
/// soon as the played agent says drained.
pub fn manifest(
    name: &str,
    replicas: u32,
    dpm: u32,
    max_joining: Option<u32>,
) -> serde_json::Value {
    let mut scaling = serde_json::json!({"drainTimeoutSeconds": 60});
    if let Some(max) = max_joining {
        scaling["maxJoining"] = max.into();
    }
    serde_json::json!({
        "apiVersion": hcomm_crds::API_GROUP_VERSION, "kind": "HcommGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas, "role": "decode", "devicesPerMember": dpm,
            "comm": {"backend": "tcp", "socketIfname": "=data0"},
            "scaling": scaling,
            "template": {"spec": {"containers": [{"name": "worker", "image": "hcomm/reference-worker:0.1.0"}]}}
        }
    })
}

/// Timings of one scale step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    /// From the first request to the last one's answer.
    pub requested_s: f64,
    /// From the patch to every group holding `replicas` live member Pods.
    pub created_s: f64,
    /// From the patch to every group Ready with `replicas` ready members.
    pub ready_s: f64,
}

/// What the phases need.
pub struct Scaler<'a> {
    pub groups: Api<HcommGroup>,
    pub group_cache: &'a Store<HcommGroup>,
    pub pod_cache: &'a Store<Pod>,
    pub own: OwnRequests,
    pub timeout: Duration,
    /// The new groups' `scaling.maxJoining`, when set.
    pub max_joining: Option<u32>,
}

impl Scaler<'_> {
    /// Creates the groups that do not exist yet at `replicas`, and sets the others'
    /// `replicas`, all at once (the requests in flight together, as autoscalers acting on
    /// many groups send them: one after the other, the last group of a storm started
    /// seconds after the first, on an API server the first ones already kept busy); then
    /// waits as [`Timing`] says.
    pub async fn scale(&self, names: &[String], replicas: u32, dpm: u32) -> Result<Timing> {
        let started = Instant::now();
        let requests = names
            .iter()
            .map(|name| self.set_replicas(name, replicas, dpm));
        let generations = futures::future::try_join_all(requests).await?;
        let mut timing = Timing {
            requested_s: started.elapsed().as_secs_f64(),
            ..Timing::default()
        };
        let mut created = false;
        loop {
            if !created && self.all_created(names, replicas) {
                created = true;
                timing.created_s = started.elapsed().as_secs_f64();
            }
            if created && self.all_ready(names, &generations, replicas) {
                timing.ready_s = started.elapsed().as_secs_f64();
                return Ok(timing);
            }
            if started.elapsed() > self.timeout {
                bail!(
                    "{} group(s) not Ready with {replicas} members within {:?} ({})",
                    names.len(),
                    self.timeout,
                    self.progress(names, replicas)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Creates group `name` at `replicas`, or sets its `replicas`; its new generation.
    async fn set_replicas(&self, name: &str, replicas: u32, dpm: u32) -> Result<i64> {
        let exists = self
            .group_cache
            .state()
            .iter()
            .any(|g| g.metadata.name.as_deref() == Some(name));
        let group = if exists {
            count(&self.own, "PATCH", "hcommgroups", "");
            let patch = serde_json::json!({"spec": {"replicas": replicas}});
            self.groups
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?
        } else {
            count(&self.own, "CREATE", "hcommgroups", "");
            let group: HcommGroup =
                serde_json::from_value(manifest(name, replicas, dpm, self.max_joining))?;
            self.groups.create(&PostParams::default(), &group).await?
        };
        Ok(group.metadata.generation.unwrap_or(0))
    }

    fn live_pods(&self, group: &str) -> usize {
        self.pod_cache
            .state()
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_GROUP))
                        .is_some_and(|g| g == group)
            })
            .count()
    }

    fn all_created(&self, names: &[String], replicas: u32) -> bool {
        names.iter().all(|n| self.live_pods(n) == replicas as usize)
    }

    fn all_ready(&self, names: &[String], generations: &[i64], replicas: u32) -> bool {
        let groups = self.group_cache.state();
        names.iter().zip(generations).all(|(name, generation)| {
            let Some(status) = groups
                .iter()
                .find(|g| g.metadata.name.as_deref() == Some(name.as_str()))
                .and_then(|g| g.status.as_ref())
            else {
                return false;
            };
            status.observed_generation.unwrap_or(0) >= *generation
                && status.ready_replicas == replicas as i32
                && status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == GroupConditionType::Ready.as_str() && c.status == "True")
                && self.live_pods(name) == replicas as usize
        })
    }

    /// A one-line account of where the groups are, for a timeout's message.
    fn progress(&self, names: &[String], replicas: u32) -> String {
        let groups = self.group_cache.state();
        let behind: Vec<String> = names
            .iter()
            .filter_map(|name| {
                let ready = groups
                    .iter()
                    .find(|g| g.metadata.name.as_deref() == Some(name.as_str()))
                    .and_then(|g| g.status.as_ref())
                    .map_or(0, |s| s.ready_replicas);
                let live = self.live_pods(name);
                (ready != replicas as i32 || live != replicas as usize)
                    .then(|| format!("{name}: {live} pods, {ready} ready"))
            })
            .take(5)
            .collect();
        behind.join("; ")
    }
}
