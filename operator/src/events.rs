//! Kubernetes Events: which ones a reconcile round produces (pure) and publishing them on the
//! `HcommGroup`. Reasons are fixed CamelCase words people can search for: `MemberCreated`,
//! `DrainRequested`, `MemberDeleted`, `Member<Phase>` on every phase change,
//! `VerificationFailed`, `DrainTimedOut`, `InsufficientCapacity`, `InvalidSpec`,
//! `EpochChanged`.

use std::collections::BTreeMap;

use hcomm_crds::conditions::find_condition;
use hcomm_crds::contract::{CONDITION_DEGRADED, reasons};
use hcomm_crds::{HcommGroup, HcommGroupStatus, MemberPhase};
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use crate::apply::Outcome;
use crate::context::Context;
use crate::planner::RemovalReason;

/// One Event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Warning or Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

fn note(warning: bool, reason: &str, message: String) -> Note {
    Note {
        warning,
        reason: reason.to_owned(),
        message,
    }
}

/// The Events of one round, from the status before and after and what was applied.
pub fn for_round(
    before: &HcommGroupStatus,
    after: &HcommGroupStatus,
    outcome: &Outcome,
) -> Vec<Note> {
    let mut notes = Vec::new();
    if after.epoch != before.epoch {
        notes.push(note(
            false,
            "EpochChanged",
            format!(
                "epoch {} → {} ({} ranks planned)",
                before.epoch,
                after.epoch,
                after.topology.len()
            ),
        ));
    }
    for name in &outcome.created {
        notes.push(note(
            false,
            "MemberCreated",
            format!("member {name} created"),
        ));
    }
    for name in &outcome.drain_requested {
        notes.push(note(
            false,
            "DrainRequested",
            format!("member {name} asked to drain"),
        ));
    }
    for removal in &outcome.deleted {
        let why = match removal.reason {
            RemovalReason::Drained => "drained",
            RemovalReason::DrainTimedOut => "drain timed out",
            RemovalReason::NotServing => "never served",
        };
        notes.push(note(
            false,
            "MemberDeleted",
            format!("member {} deleted ({why})", removal.name),
        ));
    }
    let old: BTreeMap<&str, MemberPhase> = before
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.phase))
        .collect();
    for member in &after.members {
        if old.get(member.name.as_str()) != Some(&member.phase)
            && !outcome.created.contains(&member.name)
        {
            let warning = member.phase == MemberPhase::Failed;
            let mut message = format!("member {} is {}", member.name, member.phase);
            if let Some(why) = &member.message {
                message = format!("{message}: {why}");
            }
            notes.push(note(warning, &format!("Member{}", member.phase), message));
        }
    }
    let was = find_condition(&before.conditions, CONDITION_DEGRADED);
    if let Some(now) = find_condition(&after.conditions, CONDITION_DEGRADED)
        && now.status == "True"
        && (was.is_none_or(|w| {
            w.status != "True" || w.reason != now.reason || w.message != now.message
        }))
        && now.reason != reasons::HEALTHY
    {
        notes.push(note(true, &now.reason, now.message.clone()));
    }
    notes
}

/// Publishes `notes` on `group`; failures are logged, never fatal.
pub async fn publish(ctx: &Context, group: &HcommGroup, notes: Vec<Note>) {
    let reference = group.object_ref(&());
    for n in notes {
        let event = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.clone(),
            note: Some(n.message.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(error) = ctx.recorder.publish(&event, &reference).await {
            warn!(%error, reason = %n.reason, "could not publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::{MemberStatus, RankRange};

    fn member(name: &str, phase: MemberPhase) -> MemberStatus {
        MemberStatus {
            name: name.into(),
            index: 0,
            node: None,
            ranks: RankRange { first: 0, count: 1 },
            device_ids: vec![],
            data_ip: None,
            phase,
            phase_since: None,
            epoch: 1,
            weights_version: None,
            message: Some("verified is False (NicUnreachable)".into()),
        }
    }

    #[test]
    fn a_phase_change_and_a_failure_become_events_with_searchable_reasons() {
        let before = HcommGroupStatus {
            members: vec![member("a", MemberPhase::Verifying)],
            ..Default::default()
        };
        let after = HcommGroupStatus {
            members: vec![member("a", MemberPhase::Failed)],
            ..Default::default()
        };
        let notes = for_round(&before, &after, &Outcome::default());
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, "MemberFailed");
        assert!(notes[0].warning && notes[0].message.contains("NicUnreachable"));
    }
}
