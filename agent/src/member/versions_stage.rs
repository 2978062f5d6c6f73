//! The version agreement as a stage of a member's verification: reads the group's nodes
//! through the [`Cluster`](super::ports::Cluster) port (waiting up to [`NODE_WAIT`] for a
//! node whose agent has not published), judges them with [`compare`], publishes warnings
//! as Events and turns a refusal into the failed verification.

use std::time::Duration;

use hcomm_crds::contract::PodReason;
use tokio::time::Instant;

use super::state::Event;
use super::task::Run;
use super::versions_check::{NODE_WAIT, READ_AGAIN, applies, compare};

impl Run {
    /// The version agreement of an `hccl` group within `deadline` (at most [`NODE_WAIT`]
    /// of it spent waiting for unpublished nodes): None when the member may go on (after
    /// a Warning Event for any warning), else its failed verification.
    pub(super) async fn check_versions(&mut self, deadline: Duration) -> Option<Event> {
        if !applies(self.group.comm.backend) {
            return None;
        }
        let until = Instant::now() + deadline.min(NODE_WAIT);
        let nodes = loop {
            let read = tokio::time::timeout_at(until, self.ports.cluster.group_node_versions());
            let (nodes, trouble) = match read.await {
                Ok(Ok(nodes)) => (Some(nodes), None),
                Ok(Err(e)) => (None, Some(e.to_string())),
                Err(_) => (None, Some("the API server did not answer".to_owned())),
            };
            let complete = nodes
                .as_ref()
                .is_some_and(|ns| ns.iter().all(|n| n.versions.is_some()));
            let now = Instant::now();
            match nodes {
                Some(nodes) if complete || now >= until => break nodes,
                None if now >= until => {
                    let message = format!(
                        "the group's HcommNodes could not be read: {}",
                        trouble.unwrap_or_default()
                    );
                    return Some(self.versions_refused(PodReason::NpuVersionUnknown, message));
                }
                _ => tokio::time::sleep(READ_AGAIN.min(until - now)).await,
            }
        };
        let check = compare(&nodes);
        for w in &check.warnings {
            tracing::warn!(message = %w, "versions");
            self.ports
                .cluster
                .event(true, PodReason::NpuVersionWarning, w.clone())
                .await;
        }
        let (reason, message) = check.refusal?;
        Some(self.versions_refused(reason, message))
    }

    fn versions_refused(&self, reason: PodReason, message: String) -> Event {
        self.metrics
            .verifications
            .with_label_values(&[reason.as_str()])
            .inc();
        tracing::info!(reason = reason.as_str(), %message, "version check");
        Event::Verified {
            ok: false,
            reason,
            message,
        }
    }
}
