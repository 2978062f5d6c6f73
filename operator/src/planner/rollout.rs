//! The rolling update (pure): which members of older revisions drain now, how many
//! members the set may hold meanwhile, and whether the rollout progresses, waits at its
//! partition, or stopped.
//!
//! Deployment arithmetic, in members: the set may hold up to `replicas + maxSurge`
//! members, and at least `replicas - maxUnavailable` of them must serve (be Ready, or a warm
//! standby, which can serve at once). A
//! member of the new revision therefore joins — verified, synced, joined, serving —
//! before an old one drains when `maxUnavailable` is 0; the old one then drains, leaves
//! and is deleted as in any scale-in. Old members that do not serve (stuck, or of a
//! revision abandoned by a rollback) drain at once: they carry no traffic. Members with
//! an index below `partition` keep their revision, like a StatefulSet's.
//!
//! A member of the new revision that is not Ready within the progress deadline, or that
//! fails, stops the rollout: no further old member drains and no member is added above
//! `replicas`, so the old members keep serving. The stop holds (the caller carries it
//! over from the group's status) until the update revision changes — a fixed template, or
//! the old template applied again (a rollback, after which the new members are the
//! outdated ones and drain).
//!
//! With dense ranks (`backend: hccl`: rank ids exactly `0..n-1`) a surge member would
//! leave a hole in the ranks once the last old member goes, since a member's ranks are
//! fixed when it is created; there the rollout is in place (`maxSurge` 0, at least one
//! member unavailable), each replacement taking the freed index.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::phase::ObservedMember;
use crate::revision;

/// The rollout settings (`spec.updateStrategy`) and the revision to roll to.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The revision of the current template and weights.
    pub update_revision: String,
    /// `rollingUpdate.maxSurge`.
    pub max_surge: i32,
    /// `rollingUpdate.maxUnavailable`.
    pub max_unavailable: i32,
    /// `rollingUpdate.partition`.
    pub partition: i32,
    /// `progressDeadlineSeconds`.
    pub progress_deadline: SignedDuration,
    /// Rank ids must be exactly `0..n-1` (HCCL): roll in place.
    pub dense_ranks: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            update_revision: String::new(),
            max_surge: 1,
            max_unavailable: 0,
            partition: 0,
            progress_deadline: SignedDuration::from_mins(10),
            dense_ranks: false,
        }
    }
}

impl Settings {
    /// `(maxSurge, maxUnavailable)` as applied: in place with dense ranks, and never both
    /// zero (the API refuses that; a group stored before the rule still rolls).
    pub fn pace(&self) -> (usize, usize) {
        let surge = if self.dense_ranks {
            0
        } else {
            self.max_surge.max(0) as usize
        };
        let unavailable = self.max_unavailable.max(0) as usize;
        if surge == 0 {
            (0, unavailable.max(1))
        } else {
            (surge, unavailable)
        }
    }
}

/// Why a rollout stopped, and what people read about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// The kind of stop.
    pub reason: StopReason,
    /// Which member, of which revision, and what happened.
    pub message: String,
}

/// The kinds of stop, each a `Progressing=False` reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A member of the new revision was not Ready within the progress deadline.
    DeadlineExceeded,
    /// A member of the new revision failed.
    RevisionFailed,
}

impl StopReason {
    /// The condition reason.
    pub fn reason(self) -> hcomm_crds::contract::GroupReason {
        match self {
            Self::DeadlineExceeded => hcomm_crds::contract::GroupReason::ProgressDeadlineExceeded,
            Self::RevisionFailed => hcomm_crds::contract::GroupReason::RevisionFailed,
        }
    }

    /// The stop kind of a condition reason, if it is one.
    pub fn from_reason(reason: &str) -> Option<Self> {
        [Self::DeadlineExceeded, Self::RevisionFailed]
            .into_iter()
            .find(|r| r.reason().as_str() == reason)
    }
}

/// Where the rollout stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Progress {
    /// Every member in the set runs the update revision.
    #[default]
    Complete,
    /// Members of older revisions are being replaced.
    Rolling,
    /// Only members below the partition run older revisions.
    Paused,
    /// Stopped; see [`Stop`].
    Stopped(Stop),
}

/// What the rollout asks of this plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Step {
    /// Whether members must be replaced (else the planner scales as usual).
    pub active: bool,
    /// Members to drain now, of older revisions.
    pub drain: Vec<String>,
    /// How many members the set should hold after this plan (joiners fill up to it).
    pub target: usize,
    /// Where the rollout stands.
    pub progress: Progress,
    /// When the progress deadline of a member of the new revision passes (look again
    /// then: nothing in the cluster changes at that moment to wake the operator).
    pub recheck_after: Option<SignedDuration>,
}

/// The rollout step for the healthy members in the set (`healthy`) and the failed ones
/// (`failed`, which the planner replaces anyway). `stopped` is a stop carried over from
/// an earlier round for the same update revision.
pub fn step(
    settings: &Settings,
    weights_digest: Option<&str>,
    healthy: &[&ObservedMember],
    failed: &[&ObservedMember],
    replicas: usize,
    stopped: Option<Stop>,
    now: Timestamp,
) -> Step {
    let update = settings.update_revision.as_str();
    let outdated = |m: &ObservedMember| revision::outdated(m, update, weights_digest);
    let (replaceable, kept_old): (Vec<&ObservedMember>, Vec<&ObservedMember>) = healthy
        .iter()
        .copied()
        .filter(|m| outdated(m))
        .partition(|m| m.index >= settings.partition);
    if replaceable.is_empty() {
        let progress = if kept_old.is_empty() {
            Progress::Complete
        } else {
            Progress::Paused
        };
        return Step {
            active: false,
            drain: Vec::new(),
            target: replicas,
            progress,
            recheck_after: None,
        };
    }
    let updated: Vec<&ObservedMember> = healthy.iter().copied().filter(|m| !outdated(m)).collect();
    let stop = stopped.or_else(|| detect_stop(settings, &updated, failed, &outdated, now));

    // Old members that serve nothing drain at once; Ready ones within the budget.
    let (mut old_ready, idle): (Vec<&ObservedMember>, Vec<&ObservedMember>) =
        replaceable.iter().copied().partition(|m| m.phase.is_warm());
    let mut drain: Vec<String> = idle.iter().map(|m| m.name.clone()).collect();
    let (surge, unavailable) = settings.pace();
    let available = healthy.iter().filter(|m| m.phase.is_warm()).count();
    let min_available = replicas.saturating_sub(unavailable);
    let budget = if stop.is_some() {
        0
    } else {
        available.saturating_sub(min_available)
    };
    old_ready.sort_by_key(|m| std::cmp::Reverse(m.index));
    let mut take = budget.min(old_ready.len());
    // `replicas` lowered during the rollout: old members go first.
    let surplus = (healthy.len() - drain.len() - take).saturating_sub(replicas + surge);
    take = (take + surplus).min(old_ready.len());
    drain.extend(old_ready.iter().take(take).map(|m| m.name.clone()));
    let kept = healthy.len() - drain.len();
    // Members of the update revision still missing once every replaceable one is gone.
    let missing = replicas
        .saturating_sub(kept_old.len())
        .saturating_sub(updated.len());
    let ceiling = if stop.is_some() {
        replicas
    } else {
        replicas + surge
    };
    let recheck_after = match stop {
        Some(_) => None,
        None => updated
            .iter()
            .filter(|m| !m.phase.is_warm())
            .filter_map(|m| m.created_at)
            .map(|t| settings.progress_deadline - now.duration_since(t))
            .filter(|left| left.is_positive())
            .min(),
    };
    Step {
        active: true,
        drain,
        target: ceiling.min(kept + missing),
        recheck_after,
        progress: match stop {
            Some(stop) => Progress::Stopped(stop),
            None => Progress::Rolling,
        },
    }
}

/// A member of the update revision that failed, or that is not Ready past the deadline.
fn detect_stop(
    settings: &Settings,
    updated: &[&ObservedMember],
    failed: &[&ObservedMember],
    outdated: &dyn Fn(&ObservedMember) -> bool,
    now: Timestamp,
) -> Option<Stop> {
    let update = &settings.update_revision;
    if let Some(m) = failed.iter().find(|m| !outdated(m)) {
        return Some(Stop {
            reason: StopReason::RevisionFailed,
            message: format!(
                "{} of revision {update} failed: {}",
                m.name,
                m.message.as_deref().unwrap_or("no reason given")
            ),
        });
    }
    let deadline = settings.progress_deadline;
    updated
        .iter()
        .filter(|m| !m.phase.is_warm())
        .find(|m| {
            m.created_at
                .is_some_and(|t| now.duration_since(t) >= deadline)
        })
        .map(|m| Stop {
            reason: StopReason::DeadlineExceeded,
            message: format!(
                "{} of revision {update} is not Ready {}s after its creation ({}{})",
                m.name,
                deadline.as_secs(),
                m.phase,
                m.message
                    .as_deref()
                    .map(|x| format!(": {x}"))
                    .unwrap_or_default()
            ),
        })
}
