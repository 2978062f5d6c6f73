//! Rolling-update rules as examples: the surge and unavailability arithmetic, the
//! partition, the stop on a bad revision and the rollback (`planner::rollout`). The whole
//! planner rolling a group member by member is in `tests` (`World`).

use hcomm_crds::MemberPhase;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::rollout::{Progress, Settings, Stop, StopReason, step};
use crate::phase::ObservedMember;

fn settings(surge: i32, unavailable: i32) -> Settings {
    Settings {
        update_revision: "new".into(),
        max_surge: surge,
        max_unavailable: unavailable,
        partition: 0,
        progress_deadline: SignedDuration::from_secs(60),
        dense_ranks: false,
    }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_000_000 + second).unwrap()
}

/// Member `index` of `revision` in `phase`, created at second 0.
fn member(index: i32, revision: &str, phase: MemberPhase) -> ObservedMember {
    let mut m = ObservedMember::ready_for_test(index);
    m.revision = Some(revision.into());
    m.phase = phase;
    m.serving = phase == MemberPhase::Ready;
    m.created_at = Some(at(0));
    m
}

fn run(
    s: &Settings,
    members: &[ObservedMember],
    replicas: usize,
    stopped: Option<Stop>,
    now: i64,
) -> super::rollout::Step {
    let healthy: Vec<&ObservedMember> = members.iter().filter(|m| !m.failed).collect();
    let failed: Vec<&ObservedMember> = members.iter().filter(|m| m.failed).collect();
    step(s, None, &healthy, &failed, replicas, stopped, at(now))
}

#[test]
fn with_the_defaults_a_new_member_joins_before_any_old_one_drains() {
    let old: Vec<ObservedMember> = (0..3)
        .map(|i| member(i, "old", MemberPhase::Ready))
        .collect();
    let s = run(&settings(1, 0), &old, 3, None, 1);
    assert!(s.active);
    assert!(
        s.drain.is_empty(),
        "no old member drains first: {:?}",
        s.drain
    );
    assert_eq!(s.target, 4, "one member above replicas");
    assert_eq!(s.progress, Progress::Rolling);

    let mut joining = old.clone();
    joining.push(member(3, "new", MemberPhase::Syncing));
    let s = run(&settings(1, 0), &joining, 3, None, 2);
    assert!(s.drain.is_empty(), "the new member does not serve yet");
    assert_eq!(s.target, 4, "no second surge member");

    joining[3].phase = MemberPhase::Ready;
    let s = run(&settings(1, 0), &joining, 3, None, 3);
    assert_eq!(s.drain, ["g-2"], "one old member, highest index first");
    assert_eq!(s.target, 4, "the next new member may join while it drains");
}

#[test]
fn max_unavailable_drains_that_many_old_members_before_their_replacements_serve() {
    let old: Vec<ObservedMember> = (0..4)
        .map(|i| member(i, "old", MemberPhase::Ready))
        .collect();
    let s = run(&settings(0, 2), &old, 4, None, 1);
    assert_eq!(s.drain, ["g-3", "g-2"]);
    assert_eq!(
        s.target, 4,
        "their replacements fill the set back to replicas"
    );

    let s = run(&settings(2, 1), &old, 4, None, 1);
    assert_eq!(s.drain, ["g-3"], "one unavailable at once");
    assert_eq!(s.target, 6, "3 kept + 3 new: replicas + maxSurge");
}

#[test]
fn both_zero_or_dense_ranks_roll_in_place_one_member_at_a_time() {
    assert_eq!(settings(0, 0).pace(), (0, 1));
    let mut dense = settings(1, 0);
    dense.dense_ranks = true;
    assert_eq!(dense.pace(), (0, 1));
    let old: Vec<ObservedMember> = (0..3)
        .map(|i| member(i, "old", MemberPhase::Ready))
        .collect();
    let s = run(&dense, &old, 3, None, 1);
    assert_eq!((s.drain.len(), s.target), (1, 3));
}

#[test]
fn members_below_the_partition_keep_their_revision_and_the_rollout_pauses() {
    let mut s = settings(1, 0);
    s.partition = 2;
    let members = vec![
        member(0, "old", MemberPhase::Ready),
        member(1, "old", MemberPhase::Ready),
        member(2, "old", MemberPhase::Ready),
        member(3, "new", MemberPhase::Ready),
    ];
    let step = run(&s, &members, 3, None, 1);
    assert_eq!(
        step.drain,
        ["g-2"],
        "only index 2 is at or above the partition"
    );
    assert_eq!(
        step.target, 3,
        "two old members stay: one new member is enough"
    );

    let done = [
        member(0, "old", MemberPhase::Ready),
        member(1, "old", MemberPhase::Ready),
        member(3, "new", MemberPhase::Ready),
    ];
    let paused = run(&s, &done, 3, None, 2);
    assert!(!paused.active);
    assert_eq!(paused.progress, Progress::Paused);
    s.partition = 0;
    let resumed = run(&s, &done, 3, None, 3);
    assert_eq!(resumed.progress, Progress::Rolling);
    assert_eq!(resumed.target, 4, "lowering the partition rolls the rest");
}

#[test]
fn a_new_member_not_ready_past_the_deadline_stops_the_rollout_and_the_old_keep_serving() {
    let mut members: Vec<ObservedMember> = (0..3)
        .map(|i| member(i, "old", MemberPhase::Ready))
        .collect();
    members.push(member(3, "new", MemberPhase::Pending));
    let before = run(&settings(1, 1), &members, 3, None, 59);
    assert_eq!(before.progress, Progress::Rolling);
    assert_eq!(
        before.recheck_after,
        Some(SignedDuration::from_secs(1)),
        "the operator looks again when the deadline passes"
    );
    let s = run(&settings(1, 1), &members, 3, None, 60);
    assert!(
        matches!(&s.progress, Progress::Stopped(Stop { reason: StopReason::DeadlineExceeded, message }) if message.contains("g-3")),
        "{:?}",
        s.progress
    );
    assert!(s.drain.is_empty(), "no old member drains once stopped");
    assert_eq!(s.target, 3, "no member above replicas once stopped");
}

#[test]
fn a_failed_member_of_the_new_revision_stops_the_rollout_at_once() {
    let mut members: Vec<ObservedMember> = (0..2)
        .map(|i| member(i, "old", MemberPhase::Ready))
        .collect();
    let mut bad = member(2, "new", MemberPhase::Failed);
    bad.failed = true;
    bad.message = Some("weights digest mismatch".into());
    members.push(bad);
    let s = run(&settings(1, 0), &members, 2, None, 1);
    match &s.progress {
        Progress::Stopped(stop) => {
            assert_eq!(stop.reason, StopReason::RevisionFailed);
            assert!(stop.message.contains("weights digest mismatch"));
        }
        other => panic!("not stopped: {other:?}"),
    }
    assert_eq!(
        s.target, 2,
        "the failed member is not replaced above replicas"
    );
}

#[test]
fn a_stop_carried_over_holds_even_when_the_new_member_turns_ready() {
    let members = vec![
        member(0, "old", MemberPhase::Ready),
        member(1, "new", MemberPhase::Ready),
    ];
    let stop = Stop {
        reason: StopReason::DeadlineExceeded,
        message: "g-1 was late".into(),
    };
    let s = run(&settings(1, 0), &members, 1, Some(stop.clone()), 1);
    assert_eq!(s.progress, Progress::Stopped(stop));
    assert!(s.drain.is_empty());
}

#[test]
fn rolling_back_drains_the_stuck_new_member_and_keeps_every_old_one() {
    // The old template applied again: "old" is the update revision, the stuck member
    // of the abandoned one is outdated and serves nothing.
    let mut s = settings(1, 0);
    s.update_revision = "old".into();
    let mut members: Vec<ObservedMember> = (0..3)
        .map(|i| member(i, "old", MemberPhase::Ready))
        .collect();
    members.push(member(3, "bad", MemberPhase::Pending));
    let step = run(&s, &members, 3, None, 600);
    assert_eq!(step.drain, ["g-3"]);
    assert_eq!(
        step.target, 3,
        "nothing to create: the old members are current"
    );
    assert_eq!(step.progress, Progress::Rolling);
    let after = run(&s, &members[..3], 3, None, 601);
    assert_eq!(after.progress, Progress::Complete);
}

#[test]
fn a_lower_replicas_during_a_rollout_drains_old_members_first() {
    let members: Vec<ObservedMember> = (0..4)
        .map(|i| member(i, if i < 2 { "new" } else { "old" }, MemberPhase::Ready))
        .collect();
    let s = run(&settings(1, 0), &members, 2, None, 1);
    assert_eq!(s.drain, ["g-3", "g-2"]);
}
