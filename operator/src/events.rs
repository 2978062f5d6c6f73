//! Kubernetes Events: which ones a reconcile round produces (pure) and publishing them on the
//! `HcommGroup`. Reasons are fixed CamelCase words people can search for: `MemberCreated`,
//! `DrainRequested`, `MemberDeleted`, `MemberReady` / `MemberStandby` / `MemberFailed` when
//! a member reaches one (the steps on the way, Verifying to Joining and Draining to
//! Leaving, are in the status and the Pod's conditions: as Events they were half of the
//! operator's writes in a scale storm, issue 20),
//! `VerificationFailed`, `DrainTimedOut`, `InsufficientCapacity`, `InvalidSpec`,
//! `FailedCreate` (a Warning each round the API server refuses member Pods),
//! `EpochChanged`, and for link health (the `LinksHealthy` condition) Warning `LinkDown` /
//! `LinkDegraded` when it turns False and Normal `LinksRecovered` when it turns True again.

use std::collections::BTreeMap;

use hcomm_crds::conditions::find_condition;
use hcomm_crds::contract::{CONDITION_DEGRADED, CONDITION_LINKS_HEALTHY, reasons};
use hcomm_crds::{HcommGroup, HcommGroupStatus, MemberPhase};
use kube::Resource;

use crate::apply::Outcome;
use crate::context::Context;
use crate::planner::RemovalReason;
use hcomm_events::EventKey;

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
            hcomm_crds::contract::GroupReason::EpochChanged.as_str(),
            format!(
                "epoch {} → {} ({} ranks planned)",
                before.epoch,
                after.epoch,
                after.topology.len()
            ),
        ));
    }
    if let Some(refusal) = &outcome.refused {
        notes.push(note(
            true,
            hcomm_crds::contract::GroupReason::FailedCreate.as_str(),
            refusal.describe(),
        ));
    }
    for name in &outcome.created {
        notes.push(note(
            false,
            hcomm_crds::contract::GroupReason::MemberCreated.as_str(),
            format!("member {name} created"),
        ));
    }
    for name in &outcome.drain_requested {
        notes.push(note(
            false,
            hcomm_crds::contract::GroupReason::DrainRequested.as_str(),
            format!("member {name} asked to drain"),
        ));
    }
    for removal in &outcome.deleted {
        let why = match removal.reason {
            RemovalReason::Drained => "drained",
            RemovalReason::DrainTimedOut => "drain timed out",
            RemovalReason::NotServing => "never served",
            RemovalReason::Unreachable => "its node is unreachable",
        };
        notes.push(note(
            false,
            hcomm_crds::contract::GroupReason::MemberDeleted.as_str(),
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
            && is_outcome(member.phase)
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
    notes.extend(links(before, after));
    let was = find_condition(&before.conditions, CONDITION_DEGRADED);
    if let Some(now) = find_condition(&after.conditions, CONDITION_DEGRADED)
        && now.status == "True"
        && (was.is_none_or(|w| {
            w.status != "True" || w.reason != now.reason || w.message != now.message
        }))
        && now.reason != reasons::HEALTHY
        // The `LinksHealthy` flip already said it, with times and latencies.
        && !notes.iter().any(|n| n.warning && n.reason == now.reason)
    {
        notes.push(note(true, &now.reason, now.message.clone()));
    }
    notes
}

/// A phase a member's step ends in: Ready, Standby or Failed.
fn is_outcome(phase: MemberPhase) -> bool {
    matches!(
        phase,
        MemberPhase::Ready | MemberPhase::Standby | MemberPhase::Failed
    )
}

/// The link-health Event of a round: on a flip of `LinksHealthy` to False (or from one
/// False reason to the other) a Warning with its reason, on a flip from False to True a
/// Normal `LinksRecovered`. Only flips: the message carries probe times, so it changes on
/// every probe and would otherwise repeat the Event. A new dead link while others are
/// already down is reported through `Degraded`, whose message lists the links without times.
fn links(before: &HcommGroupStatus, after: &HcommGroupStatus) -> Option<Note> {
    let was = find_condition(&before.conditions, CONDITION_LINKS_HEALTHY);
    let now = find_condition(&after.conditions, CONDITION_LINKS_HEALTHY)?;
    let was_false = was.filter(|w| w.status == "False");
    match now.status.as_str() {
        "False" if was_false.is_none_or(|w| w.reason != now.reason) => {
            Some(note(true, &now.reason, now.message.clone()))
        }
        "True" if was_false.is_some() => Some(note(
            false,
            reasons::LINKS_RECOVERED,
            format!("links answer again: {}", now.message),
        )),
        _ => None,
    }
}

/// Queues `notes` about `group` for the publisher (`hcomm_events`): never waits;
/// failures are logged and counted there, never fatal.
pub fn publish(ctx: &Context, group: &HcommGroup, notes: Vec<Note>) {
    let reference = group.object_ref(&());
    for n in notes {
        let note: String = n.message.chars().take(1000).collect();
        let key = EventKey::new(&reference, n.warning, &n.reason, "Reconcile", &note);
        ctx.events.publish(key, reference.clone());
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

    fn with_links(status: &str, reason: &str, message: &str) -> HcommGroupStatus {
        let mut s = HcommGroupStatus::default();
        hcomm_crds::conditions::set_condition(
            &mut s.conditions,
            CONDITION_LINKS_HEALTHY,
            match status {
                "True" => hcomm_crds::conditions::ConditionStatus::True,
                "False" => hcomm_crds::conditions::ConditionStatus::False,
                _ => hcomm_crds::conditions::ConditionStatus::Unknown,
            },
            reason,
            message,
            Some(1),
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        );
        s
    }

    #[test]
    fn link_events_only_on_flips() {
        let up = with_links(
            "True",
            hcomm_crds::contract::GroupReason::AllLinksUp.as_str(),
            "all 2 link(s) answered",
        );
        let down = with_links(
            "False",
            hcomm_crds::contract::GroupReason::LinkDown.as_str(),
            "1 of 2 link(s) down: n1 → n2 (10.0.0.2) at t1",
        );
        let down_later = with_links(
            "False",
            hcomm_crds::contract::GroupReason::LinkDown.as_str(),
            "1 of 2 link(s) down: n1 → n2 (10.0.0.2) at t2",
        );
        let unknown = with_links(
            "Unknown",
            hcomm_crds::contract::GroupReason::NoRecentProbe.as_str(),
            "n1 → n2 never probed",
        );
        let o = Outcome::default();

        let notes = for_round(&up, &down, &o);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].warning
                && notes[0].reason == hcomm_crds::contract::GroupReason::LinkDown.as_str()
        );
        assert!(notes[0].message.contains("n1 → n2 (10.0.0.2)"));
        assert!(for_round(&down, &down_later, &o).is_empty());
        let notes = for_round(&down_later, &up, &o);
        assert_eq!(notes.len(), 1);
        assert!(
            !notes[0].warning
                && notes[0].reason == hcomm_crds::contract::GroupReason::LinksRecovered.as_str()
        );
        // From "not yet probed" to healthy nothing recovered.
        assert!(for_round(&unknown, &up, &o).is_empty());
        assert_eq!(for_round(&unknown, &down, &o).len(), 1);
    }

    #[test]
    fn a_link_down_on_degraded_is_not_repeated_beside_the_links_event() {
        let up = with_links(
            "True",
            hcomm_crds::contract::GroupReason::AllLinksUp.as_str(),
            "ok",
        );
        let mut down = with_links(
            "False",
            hcomm_crds::contract::GroupReason::LinkDown.as_str(),
            "down: n1 → n2 (10.0.0.2) at t1",
        );
        hcomm_crds::conditions::set_condition(
            &mut down.conditions,
            CONDITION_DEGRADED,
            hcomm_crds::conditions::ConditionStatus::True,
            hcomm_crds::contract::GroupReason::LinkDown.as_str(),
            "link(s) down: n1 → n2 (10.0.0.2)",
            Some(1),
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        );
        let notes = for_round(&up, &down, &Outcome::default());
        assert_eq!(notes.len(), 1, "{notes:?}");
        // A further dead link while LinksHealthy stays False shows through Degraded.
        let mut more = down.clone();
        more.conditions[1].message = "link(s) down: n1 → n2 (10.0.0.2); n2 → n1 (10.0.0.1)".into();
        let notes = for_round(&down, &more, &Outcome::default());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].message.contains("n2 → n1"));
    }

    #[test]
    fn only_the_phases_a_member_ends_a_step_in_become_events() {
        let at = |phase| HcommGroupStatus {
            members: vec![member("a", phase)],
            ..Default::default()
        };
        let none = Outcome::default();
        let steps = [
            MemberPhase::Pending,
            MemberPhase::Verifying,
            MemberPhase::Syncing,
            MemberPhase::Joining,
        ];
        for pair in steps.windows(2) {
            assert!(for_round(&at(pair[0]), &at(pair[1]), &none).is_empty());
        }
        let ready = for_round(&at(MemberPhase::Joining), &at(MemberPhase::Ready), &none);
        assert_eq!(ready[0].reason, format!("Member{}", MemberPhase::Ready));
        assert!(for_round(&at(MemberPhase::Ready), &at(MemberPhase::Draining), &none).is_empty());
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
        assert!(
            notes[0].warning
                && notes[0]
                    .message
                    .contains(hcomm_crds::contract::PodReason::NicUnreachable.as_str())
        );
    }

    #[test]
    fn a_refused_create_is_a_warning_in_the_api_servers_words() {
        let status = kube::core::Status::failure(
            "pods \"g-1\" is forbidden: violates PodSecurity \"baseline:latest\"",
            "Forbidden",
        )
        .with_code(403);
        let refused = crate::create_failures::Refusal::new(
            vec!["g-1".into()],
            &kube::Error::Api(Box::new(status)),
        );
        let outcome = Outcome {
            refused: Some(refused),
            ..Outcome::default()
        };
        let status = HcommGroupStatus::default();
        let notes = for_round(&status, &status, &outcome);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].warning
                && notes[0].reason == hcomm_crds::contract::GroupReason::FailedCreate.as_str()
        );
        assert!(
            notes[0]
                .message
                .contains("member Pod g-1 not created (Forbidden): pods \"g-1\" is forbidden"),
            "{}",
            notes[0].message
        );
    }
}
