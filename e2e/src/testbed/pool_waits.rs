//! Waiting on what `kubectl get hcg` shows: a group's member Pods and its status, looked
//! at until they say what a step of a test or a benchmark waits for.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::BoxStream;
use hcomm_crds::{HcommGroup, HcommGroupStatus};
use kube::Api;
use kube::runtime::{WatchStreamExt as _, watcher};

use super::pools::MemberPod;
use super::{Error, Result, Testbed};

/// How often a wait without a watch looks.
const POLL: Duration = Duration::from_millis(100);

/// When a wait looks again: after `poll`, or sooner when `wake` yields.
struct Looks {
    poll: Duration,
    wake: Option<BoxStream<'static, ()>>,
}

impl Looks {
    async fn next(&mut self) {
        let Some(wake) = &mut self.wake else {
            return tokio::time::sleep(self.poll).await;
        };
        if let Ok(None) = tokio::time::timeout(self.poll, wake.next()).await {
            // The stream ended: poll from now on.
            self.wake = None;
        }
    }
}

impl From<Duration> for Looks {
    fn from(poll: Duration) -> Looks {
        Looks { poll, wake: None }
    }
}

impl Testbed {
    /// Waits until `group` has exactly `replicas` member Pods besides its standby ones, all
    /// Ready, and its status says so (`readyReplicas`, `replicas`).
    pub async fn wait_pool_ready(
        &self,
        namespace: &str,
        group: &str,
        replicas: usize,
        within: Duration,
    ) -> Result<Vec<MemberPod>> {
        self.wait_pool_ready_woken(namespace, group, replicas, within, POLL, None)
            .await
    }

    /// As [`Testbed::wait_pool_ready`], looking again as soon as the group changes (a
    /// watch of it) and every 250 ms besides: a benchmark's clock stops within the reads
    /// that follow the operator's status write instead of up to a poll later, and the wait
    /// adds no stream of reads to the API server it measures.
    pub async fn wait_pool_ready_watching(
        &self,
        namespace: &str,
        group: &str,
        replicas: usize,
        within: Duration,
    ) -> Result<Vec<MemberPod>> {
        let groups: Api<HcommGroup> = Api::namespaced(self.client().await?, namespace);
        let only = watcher::Config::default().fields(&format!("metadata.name={group}"));
        // Backed off: a watch that keeps failing must not turn into a stream of reads.
        let changes = watcher(groups, only).default_backoff().map(|_| ()).boxed();
        let poll = Duration::from_millis(250);
        self.wait_pool_ready_woken(namespace, group, replicas, within, poll, Some(changes))
            .await
    }

    async fn wait_pool_ready_woken(
        &self,
        namespace: &str,
        group: &str,
        replicas: usize,
        within: Duration,
        poll: Duration,
        wake: Option<BoxStream<'static, ()>>,
    ) -> Result<Vec<MemberPod>> {
        let what = format!("{group}: {replicas} Ready members");
        let when = Looks { poll, wake };
        self.poll_group(namespace, group, &what, within, when, |members, status| {
            let serving: Vec<MemberPod> = members.iter().filter(|m| !m.standby).cloned().collect();
            let counted = status.map(|s| (s.ready_replicas, s.replicas));
            let done = serving.len() == replicas
                && serving.iter().all(|m| m.ready)
                && counted == Some((replicas as i32, replicas as i32));
            if done {
                Ok(serving)
            } else {
                Err(format!(
                    "now {serving:?}, status ready/replicas {counted:?}"
                ))
            }
        })
        .await
    }

    /// Waits until `group` has `n` warm standby members (labelled, held by their agents,
    /// not draining, counted in `status.standbyReplicas`); returns them.
    pub async fn wait_standby_warm(
        &self,
        namespace: &str,
        group: &str,
        n: usize,
        within: Duration,
    ) -> Result<Vec<MemberPod>> {
        let what = format!("{group}: {n} warm standby members");
        self.poll_group(namespace, group, &what, within, POLL, |members, status| {
            let warm: Vec<MemberPod> = members
                .iter()
                .filter(|m| m.standby && m.warm && !m.draining)
                .cloned()
                .collect();
            let counted = status.map(|s| s.standby_replicas);
            if warm.len() == n && counted == Some(n as i32) {
                Ok(warm)
            } else {
                Err(format!("now {warm:?}, status.standbyReplicas {counted:?}"))
            }
        })
        .await
    }

    /// Looks at `group`'s member Pods and status (`when`) until `done` accepts them
    /// (its `Err` says what was seen, for the timeout's message).
    async fn poll_group<T>(
        &self,
        namespace: &str,
        group: &str,
        what: &str,
        within: Duration,
        when: impl Into<Looks>,
        done: impl Fn(&[MemberPod], Option<&HcommGroupStatus>) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let mut when = when.into();
        let groups: Api<HcommGroup> = Api::namespaced(self.client().await?, namespace);
        let deadline = Instant::now() + within;
        loop {
            let members = self.members(namespace, group).await?;
            let status = groups
                .get_opt(group)
                .await
                .ok()
                .flatten()
                .and_then(|g| g.status);
            let seen = match done(&members, status.as_ref()) {
                Ok(value) => return Ok(value),
                Err(seen) => seen,
            };
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("{what} ({seen})"),
                    after: within,
                });
            }
            when.next().await;
        }
    }

    /// Waits until `group` has exactly `n` member Pods not being deleted: the victims of
    /// a scale-in are gone, the joiners of a scale-out exist.
    pub async fn wait_members(
        &self,
        namespace: &str,
        group: &str,
        n: usize,
        within: Duration,
    ) -> Result<Vec<MemberPod>> {
        let what = format!("{group}: {n} member Pods");
        self.poll_group(namespace, group, &what, within, POLL, |members, _| {
            if members.len() == n {
                Ok(members.to_vec())
            } else {
                Err(format!("have {members:?}"))
            }
        })
        .await
    }
}
