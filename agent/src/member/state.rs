//! The member lifecycle as a typed state machine (pure): [`Phase`] × [`Event`] →
//! ([`Phase`], [`Action`]s). The driver ([`super::task`]) performs the actions and feeds
//! their outcomes back as events; nothing here does I/O, so every path is unit-tested.
//!
//! ```text
//! Pending → Verifying → Syncing → Joining → Ready ─(drain)→ Draining → Leaving → Drained
//!              │           │         │   │    └─(new epoch: rejoin beside the old comm)
//!              │           │         │   └→ Standby ⇄ Ready (promoted / moved back)
//!              └───────────┴─────────┴→ Failed{stage} ─(retry)→ back to that stage
//! (a drain request before Ready goes straight to Leaving: the gate was never True)
//! ```
//!
//! A warm standby (the operator's `hcomm.io/standby` label) is joined like a serving
//! member and follows every epoch, but holds its readiness gate False with the reason
//! `Standby`; a promotion only opens the gate. A drain of a standby goes through Draining,
//! since one moved back from Ready may still finish requests.

use hcomm_crds::contract::{
    POD_DRAINED, POD_JOINED, POD_MEMBER_READY, POD_VERIFIED, POD_WEIGHTS_SYNCED, PodReason,
};

/// Which stage failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Verify,
    Sync,
    Join,
}

/// Why a member leaves: it decides what the Pod says once it is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// Drained: nothing was in flight when it left.
    Drained,
    /// Drained past its deadline: requests were still in flight.
    DrainTimedOut,
    /// Never joined (drain requested while verifying, syncing, joining or after a failed
    /// stage): nothing to drain, and its `Joined` condition keeps what it was (a failed
    /// join keeps its reason for `kubectl describe`; "left the domain" would be untrue).
    NeverJoined,
}

/// Where a member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Verifying,
    Syncing,
    Joining {
        epoch: u64,
    },
    /// Joined, readiness gate held False: out of traffic until promoted.
    Standby {
        epoch: u64,
    },
    Ready {
        epoch: u64,
    },
    Draining {
        epoch: u64,
    },
    Leaving {
        why: Departure,
    },
    Drained,
    Failed {
        stage: Stage,
        message: String,
    },
    Gone,
}

impl Phase {
    /// A short fixed name for metrics (`hcomm_agent_members{phase=...}`).
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Verifying => "Verifying",
            Phase::Syncing => "Syncing",
            Phase::Joining { .. } => "Joining",
            Phase::Standby { .. } => "Standby",
            Phase::Ready { .. } => "Ready",
            Phase::Draining { .. } => "Draining",
            Phase::Leaving { .. } => "Leaving",
            Phase::Drained => "Drained",
            Phase::Failed { .. } => "Failed",
            Phase::Gone => "Gone",
        }
    }

    /// Every phase name, for zero-initialised metrics.
    pub const NAMES: [&'static str; 11] = [
        "Pending",
        "Verifying",
        "Syncing",
        "Joining",
        "Standby",
        "Ready",
        "Draining",
        "Leaving",
        "Drained",
        "Failed",
        "Gone",
    ];

    fn is_done(&self) -> bool {
        matches!(self, Phase::Drained | Phase::Gone)
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Start {
        epoch: u64,
    },
    Verified {
        ok: bool,
        reason: PodReason,
        message: String,
    },
    WeightsSynced {
        epoch: u64,
        message: String,
    },
    WeightsFailed {
        reason: PodReason,
        message: String,
    },
    /// The domain of `epoch` formed with this member in it; `standby` is whether the
    /// operator holds the member out of traffic at that moment.
    Joined {
        epoch: u64,
        standby: bool,
    },
    JoinFailed {
        epoch: u64,
        message: String,
    },
    /// The group planned a new epoch that still includes this member.
    EpochPlanned {
        epoch: u64,
    },
    /// Retry the failed stage (after a backoff the driver chose).
    Retry {
        epoch: u64,
    },
    DrainRequested,
    /// The operator removed the standby label: open the gate.
    Promoted,
    /// The operator labelled a serving member standby again (a scale-in): close the gate.
    Demoted,
    /// The worker reported zero in flight, or the drain timeout passed.
    DrainFinished {
        timed_out: bool,
    },
    Left,
    PodGone,
}

/// A Pod condition to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CondUpdate {
    pub type_: &'static str,
    pub status: bool,
    pub reason: PodReason,
    pub message: String,
}

/// What the worker is told over the local API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerNotice {
    WeightsReady,
    DrainRequested,
    EpochChanged { epoch: u64 },
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Condition(CondUpdate),
    Verify,
    SyncWeights,
    /// Build the communicator of `epoch` (beside the current one, if any) and switch to it.
    Join {
        epoch: u64,
    },
    /// Wait for the worker's in-flight count to reach zero or the drain deadline.
    AwaitDrain,
    /// Leave the domain and destroy the communicator.
    Leave,
    Notify(WorkerNotice),
    /// A Kubernetes Event (warning when `warning`).
    Event {
        warning: bool,
        reason: PodReason,
        message: String,
    },
}

/// The readiness gate held False for a warm standby.
fn standby_gate(message: String) -> Action {
    cond(POD_MEMBER_READY, false, PodReason::Standby, message)
}

fn cond(
    type_: &'static str,
    status: bool,
    reason: PodReason,
    message: impl Into<String>,
) -> Action {
    Action::Condition(CondUpdate {
        type_,
        status,
        reason,
        message: message.into(),
    })
}

/// The transition function. Events that do not apply to a phase leave it unchanged with no
/// actions (e.g. a late `Verified` after a drain request).
pub fn step(phase: &Phase, event: Event) -> (Phase, Vec<Action>) {
    use Event as E;
    use Phase as P;
    let same = || (phase.clone(), Vec::new());
    if phase.is_done() {
        return same();
    }
    match (phase, event) {
        (_, E::PodGone) => (P::Gone, vec![Action::Leave]),
        (P::Pending, E::Start { .. }) => (P::Verifying, vec![Action::Verify]),
        (
            P::Verifying,
            E::Verified {
                ok: true,
                reason,
                message,
            },
        ) => (
            P::Syncing,
            vec![
                cond(POD_VERIFIED, true, reason, message),
                Action::SyncWeights,
            ],
        ),
        (
            P::Verifying,
            E::Verified {
                ok: false,
                reason,
                message,
            },
        ) => (
            P::Failed {
                stage: Stage::Verify,
                message: message.clone(),
            },
            vec![
                cond(POD_VERIFIED, false, reason, message.clone()),
                cond(
                    POD_MEMBER_READY,
                    false,
                    PodReason::NotReady,
                    "verification failed",
                ),
                Action::Event {
                    warning: true,
                    reason: PodReason::VerificationFailed,
                    message: format!("{reason}: {message}"),
                },
            ],
        ),
        (P::Syncing, E::WeightsSynced { epoch, message }) => (
            P::Joining { epoch },
            // The notice first: the condition is then written while the member joins.
            vec![
                Action::Notify(WorkerNotice::WeightsReady),
                cond(POD_WEIGHTS_SYNCED, true, PodReason::WeightsSynced, message),
                Action::Join { epoch },
            ],
        ),
        (P::Syncing, E::WeightsFailed { reason, message }) => (
            P::Failed {
                stage: Stage::Sync,
                message: message.clone(),
            },
            vec![
                cond(POD_WEIGHTS_SYNCED, false, reason, message.clone()),
                Action::Event {
                    warning: true,
                    reason,
                    message,
                },
            ],
        ),
        (
            P::Joining { .. },
            E::Joined {
                epoch,
                standby: true,
            },
        ) => (
            P::Standby { epoch },
            vec![
                cond(
                    POD_JOINED,
                    true,
                    PodReason::Joined,
                    format!("joined the domain at epoch {epoch}"),
                ),
                standby_gate(format!(
                    "warm standby at epoch {epoch}: out of traffic until promoted"
                )),
            ],
        ),
        (P::Joining { .. }, E::Joined { epoch, .. }) => (
            P::Ready { epoch },
            vec![
                cond(
                    POD_JOINED,
                    true,
                    PodReason::Joined,
                    format!("joined the domain at epoch {epoch}"),
                ),
                cond(
                    POD_MEMBER_READY,
                    true,
                    PodReason::MemberReady,
                    format!("serving at epoch {epoch}"),
                ),
            ],
        ),
        (P::Joining { .. }, E::JoinFailed { epoch, message }) => (
            P::Failed {
                stage: Stage::Join,
                message: message.clone(),
            },
            vec![cond(
                POD_JOINED,
                false,
                PodReason::JoinFailed,
                format!("epoch {epoch}: {message}"),
            )],
        ),
        (P::Joining { .. }, E::EpochPlanned { epoch }) => {
            (P::Joining { epoch }, vec![Action::Join { epoch }])
        }
        (P::Ready { epoch: cur } | P::Standby { epoch: cur }, E::EpochPlanned { epoch })
            if epoch > *cur =>
        {
            (
                phase.clone(),
                vec![
                    Action::Join { epoch },
                    Action::Notify(WorkerNotice::EpochChanged { epoch }),
                ],
            )
        }
        (P::Ready { epoch: cur } | P::Standby { epoch: cur }, E::Joined { epoch, .. })
            if epoch > *cur =>
        {
            let (next, suffix) = match phase {
                P::Standby { .. } => (P::Standby { epoch }, " (standby)"),
                _ => (P::Ready { epoch }, ""),
            };
            (
                next,
                vec![cond(
                    POD_JOINED,
                    true,
                    PodReason::Joined,
                    format!("switched to epoch {epoch}{suffix}"),
                )],
            )
        }
        (P::Standby { epoch }, E::Promoted) => (
            P::Ready { epoch: *epoch },
            vec![cond(
                POD_MEMBER_READY,
                true,
                PodReason::MemberReady,
                format!("promoted from standby: serving at epoch {epoch}"),
            )],
        ),
        (P::Ready { epoch }, E::Demoted) => (
            P::Standby { epoch: *epoch },
            vec![standby_gate(format!(
                "moved back to standby at epoch {epoch}: no new traffic"
            ))],
        ),
        (P::Ready { epoch: cur } | P::Standby { epoch: cur }, E::JoinFailed { epoch, message }) => {
            (
                phase.clone(),
                vec![
                    cond(
                        POD_JOINED,
                        true,
                        PodReason::RejoinFailed,
                        format!("still serving at epoch {cur}; epoch {epoch} failed: {message}"),
                    ),
                    Action::Event {
                        warning: true,
                        reason: PodReason::RejoinFailed,
                        message,
                    },
                ],
            )
        }
        (P::Failed { stage, .. }, E::Retry { epoch }) => match stage {
            Stage::Verify => (P::Verifying, vec![Action::Verify]),
            Stage::Sync => (P::Syncing, vec![Action::SyncWeights]),
            Stage::Join => (P::Joining { epoch }, vec![Action::Join { epoch }]),
        },
        (P::Ready { epoch } | P::Standby { epoch }, E::DrainRequested) => (
            P::Draining { epoch: *epoch },
            vec![
                cond(
                    POD_MEMBER_READY,
                    false,
                    PodReason::Draining,
                    "drain requested: no new traffic",
                ),
                Action::Notify(WorkerNotice::DrainRequested),
                Action::AwaitDrain,
            ],
        ),
        (P::Draining { .. } | P::Leaving { .. }, E::DrainRequested) => same(),
        (_, E::DrainRequested) => (
            P::Leaving {
                why: Departure::NeverJoined,
            },
            vec![
                cond(
                    POD_MEMBER_READY,
                    false,
                    PodReason::Draining,
                    "drain requested before the member served",
                ),
                Action::Notify(WorkerNotice::DrainRequested),
                Action::Leave,
            ],
        ),
        (P::Draining { .. }, E::DrainFinished { timed_out }) => {
            let mut actions = vec![Action::Leave];
            if timed_out {
                actions.push(Action::Event {
                    warning: true,
                    reason: PodReason::DrainTimedOut,
                    message: "requests were still in flight at the drain deadline".into(),
                });
            }
            let why = if timed_out {
                Departure::DrainTimedOut
            } else {
                Departure::Drained
            };
            (P::Leaving { why }, actions)
        }
        (P::Leaving { why }, E::Left) => {
            let (reason, message) = match why {
                Departure::Drained => {
                    (PodReason::Drained, "no requests in flight; left the domain")
                }
                Departure::DrainTimedOut => (
                    PodReason::DrainTimedOut,
                    "drain timed out with requests in flight; left the domain",
                ),
                Departure::NeverJoined => (
                    PodReason::Drained,
                    "never joined the domain: nothing to drain",
                ),
            };
            let mut actions = Vec::new();
            if *why != Departure::NeverJoined {
                actions.push(cond(POD_JOINED, false, PodReason::Left, "left the domain"));
            }
            actions.push(cond(POD_DRAINED, true, reason, message));
            (P::Drained, actions)
        }
        _ => same(),
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
