//! The state machine's transitions, one named test per behaviour.

use super::*;

fn run(events: Vec<Event>) -> (Phase, Vec<Action>) {
    let mut phase = Phase::Pending;
    let mut all = Vec::new();
    for e in events {
        let (p, a) = step(&phase, e);
        phase = p;
        all.extend(a);
    }
    (phase, all)
}

fn conds(actions: &[Action]) -> Vec<(&'static str, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Condition(c) => Some((c.type_, c.status)),
            _ => None,
        })
        .collect()
}

fn ok_verify() -> Event {
    Event::Verified {
        ok: true,
        reason: PodReason::Verified,
        message: "ok".into(),
    }
}

#[test]
fn the_happy_path_sets_verified_synced_joined_then_the_gate_in_that_order() {
    let (phase, actions) = run(vec![
        Event::Start { epoch: 3 },
        ok_verify(),
        Event::WeightsSynced {
            epoch: 3,
            message: "256 MiB".into(),
        },
        Event::Joined {
            epoch: 3,
            standby: false,
        },
    ]);
    assert_eq!(phase, Phase::Ready { epoch: 3 });
    assert_eq!(
        conds(&actions),
        [
            (POD_VERIFIED, true),
            (POD_WEIGHTS_SYNCED, true),
            (POD_JOINED, true),
            (POD_MEMBER_READY, true)
        ]
    );
    assert!(actions.contains(&Action::Notify(WorkerNotice::WeightsReady)));
}

#[test]
fn a_failed_sync_writes_its_reason_raises_an_event_and_never_joins() {
    let (phase, actions) = run(vec![
        Event::Start { epoch: 1 },
        ok_verify(),
        Event::WeightsFailed {
            reason: PodReason::DigestMismatch,
            message: "expected sha256:aa, got sha256:bb".into(),
        },
    ]);
    assert!(matches!(
        phase,
        Phase::Failed {
            stage: Stage::Sync,
            ..
        }
    ));
    assert!(!actions.iter().any(|a| matches!(a, Action::Join { .. })));
    assert!(actions.iter().any(|a| matches!(a,
        Action::Condition(c) if c.type_ == POD_WEIGHTS_SYNCED && !c.status && c.reason == PodReason::DigestMismatch)));
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Event {
            warning: true,
            reason,
            ..
        } if *reason == PodReason::DigestMismatch
    )));
}

#[test]
fn a_failed_verification_never_syncs_and_keeps_the_gate_false_until_retried() {
    let (phase, actions) = run(vec![
        Event::Start { epoch: 1 },
        Event::Verified {
            ok: false,
            reason: PodReason::NicUnreachable,
            message: "mgmt0 ...".into(),
        },
    ]);
    assert!(matches!(
        phase,
        Phase::Failed {
            stage: Stage::Verify,
            ..
        }
    ));
    assert!(!actions.contains(&Action::SyncWeights));
    assert_eq!(
        conds(&actions),
        [(POD_VERIFIED, false), (POD_MEMBER_READY, false)]
    );
    let (p, a) = step(&phase, Event::Retry { epoch: 1 });
    assert_eq!(p, Phase::Verifying);
    assert_eq!(a, [Action::Verify]);
}

#[test]
fn drain_turns_the_gate_false_first_then_waits_then_leaves_then_reports_drained() {
    let (p, a) = step(&Phase::Ready { epoch: 4 }, Event::DrainRequested);
    assert_eq!(p, Phase::Draining { epoch: 4 });
    assert_eq!(conds(&a), [(POD_MEMBER_READY, false)], "gate first");
    assert_eq!(a.last(), Some(&Action::AwaitDrain));
    let (p, a) = step(&p, Event::DrainFinished { timed_out: false });
    assert_eq!(a, [Action::Leave]);
    let (p, a) = step(&p, Event::Left);
    assert_eq!(p, Phase::Drained);
    assert_eq!(conds(&a), [(POD_JOINED, false), (POD_DRAINED, true)]);
}

#[test]
fn a_timed_out_drain_is_recorded_as_such() {
    let (p, a) = step(
        &Phase::Draining { epoch: 1 },
        Event::DrainFinished { timed_out: true },
    );
    assert!(a.iter().any(|x| matches!(
        x,
        Action::Event {
            reason,
            ..
        } if *reason == PodReason::DrainTimedOut
    )));
    let (_, a) = step(&p, Event::Left);
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Condition(c) if c.reason == PodReason::DrainTimedOut))
    );
}

#[test]
fn a_drain_before_ready_skips_waiting() {
    let (p, a) = step(&Phase::Syncing, Event::DrainRequested);
    assert_eq!(
        p,
        Phase::Leaving {
            why: Departure::NeverJoined
        }
    );
    assert!(a.contains(&Action::Leave));
    assert!(!a.contains(&Action::AwaitDrain));
}

#[test]
fn a_failed_joiner_drained_keeps_its_join_failure_on_the_pod() {
    let failed = Phase::Failed {
        stage: Stage::Join,
        message: "the worker cannot serve".into(),
    };
    let (p, _) = step(&failed, Event::DrainRequested);
    let (p, a) = step(&p, Event::Left);
    assert_eq!(p, Phase::Drained);
    assert_eq!(
        conds(&a),
        [(POD_DRAINED, true)],
        "Joined stays False with the join's own reason, not `Left`"
    );
}

#[test]
fn a_new_epoch_while_ready_rejoins_beside_the_serving_communicator() {
    let (p, a) = step(&Phase::Ready { epoch: 2 }, Event::EpochPlanned { epoch: 3 });
    assert_eq!(
        p,
        Phase::Ready { epoch: 2 },
        "keeps serving at the old epoch"
    );
    assert_eq!(a[0], Action::Join { epoch: 3 });
    let (p, a) = step(
        &p,
        Event::Joined {
            epoch: 3,
            standby: false,
        },
    );
    assert_eq!(p, Phase::Ready { epoch: 3 });
    assert_eq!(conds(&a), [(POD_JOINED, true)], "the gate is not touched");
    // A stale epoch is ignored.
    assert_eq!(step(&p, Event::EpochPlanned { epoch: 2 }).1, []);
}

#[test]
fn a_failed_rejoin_keeps_serving_on_the_old_epoch_and_warns() {
    let (p, a) = step(
        &Phase::Ready { epoch: 2 },
        Event::JoinFailed {
            epoch: 3,
            message: "timeout".into(),
        },
    );
    assert_eq!(p, Phase::Ready { epoch: 2 });
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Event { warning: true, .. }))
    );
}

fn reasons(actions: &[Action]) -> Vec<(&'static str, bool, PodReason)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Condition(c) => Some((c.type_, c.status, c.reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_standby_joins_with_its_gate_held_and_a_promotion_only_opens_it() {
    let (p, a) = step(
        &Phase::Joining { epoch: 3 },
        Event::Joined {
            epoch: 3,
            standby: true,
        },
    );
    assert_eq!(p, Phase::Standby { epoch: 3 });
    assert_eq!(
        reasons(&a),
        [
            (POD_JOINED, true, PodReason::Joined),
            (POD_MEMBER_READY, false, PodReason::Standby)
        ]
    );
    let (p, a) = step(&p, Event::Promoted);
    assert_eq!(p, Phase::Ready { epoch: 3 });
    assert_eq!(
        reasons(&a),
        [(POD_MEMBER_READY, true, PodReason::MemberReady)],
        "nothing but the gate"
    );
    // A promotion that reaches a serving member, or a member still joining, is nothing.
    assert_eq!(step(&p, Event::Promoted), (p.clone(), vec![]));
    assert_eq!(
        step(&Phase::Syncing, Event::Promoted),
        (Phase::Syncing, vec![])
    );
}

#[test]
fn a_standby_follows_every_epoch_beside_its_old_communicator_out_of_traffic() {
    let standby = Phase::Standby { epoch: 2 };
    let (p, a) = step(&standby, Event::EpochPlanned { epoch: 3 });
    assert_eq!(p, standby);
    assert_eq!(a[0], Action::Join { epoch: 3 });
    let (p, a) = step(
        &p,
        Event::Joined {
            epoch: 3,
            standby: true,
        },
    );
    assert_eq!(p, Phase::Standby { epoch: 3 });
    assert_eq!(conds(&a), [(POD_JOINED, true)], "the gate is not touched");
    let (p, _) = step(
        &p,
        Event::JoinFailed {
            epoch: 4,
            message: "timeout".into(),
        },
    );
    assert_eq!(p, Phase::Standby { epoch: 3 }, "a failed rejoin keeps it");
}

#[test]
fn a_serving_member_moved_back_to_standby_closes_its_gate_and_drains_before_leaving() {
    let (p, a) = step(&Phase::Ready { epoch: 5 }, Event::Demoted);
    assert_eq!(p, Phase::Standby { epoch: 5 });
    assert_eq!(reasons(&a), [(POD_MEMBER_READY, false, PodReason::Standby)]);
    // Its requests in flight may still run: a drain waits for them like a serving one's.
    let (p, a) = step(&p, Event::DrainRequested);
    assert_eq!(p, Phase::Draining { epoch: 5 });
    assert_eq!(a.last(), Some(&Action::AwaitDrain));
}

#[test]
fn late_or_foreign_events_change_nothing() {
    assert_eq!(
        step(&Phase::Drained, Event::Start { epoch: 1 }),
        (Phase::Drained, vec![])
    );
    assert_eq!(step(&Phase::Pending, ok_verify()), (Phase::Pending, vec![]));
    assert_eq!(
        step(&Phase::Draining { epoch: 1 }, Event::DrainRequested),
        (Phase::Draining { epoch: 1 }, vec![])
    );
    assert_eq!(
        step(&Phase::Ready { epoch: 1 }, Event::PodGone).0,
        Phase::Gone
    );
}

#[test]
fn every_phase_has_a_metric_name() {
    for p in [
        Phase::Pending,
        Phase::Drained,
        Phase::Ready { epoch: 0 },
        Phase::Standby { epoch: 0 },
    ] {
        assert!(Phase::NAMES.contains(&p.name()));
    }
}
