//! The member task against the in-memory fakes of its ports, tokio's clock paused: every
//! lifecycle edge and failure, each in milliseconds of real time. One test per behaviour.
//! Size: one test per lifecycle edge of one task, all on the same fakes; a split by edge
//! would only scatter the scripts they share.

use std::time::Duration;

use hcomm_crds::contract::{
    POD_DRAINED, POD_JOINED, POD_MEMBER_READY, POD_VERIFIED, POD_WEIGHTS_SYNCED,
};

use super::fakes::{VerifyScript, synced};
use super::group::ReadAt;
use super::ports::JoinError;
use super::state::Phase;
use super::task_kit::{Kit, NODE, table, waiting};
use super::weights::SyncFailure;
use crate::local_api::Notice;
use hcomm_crds::contract::PodReason;

/// A joiner's condition writes on its way to serving, in the lifecycle's order.
const JOINER_WRITES: [(&str, bool, PodReason); 4] = [
    (POD_VERIFIED, true, PodReason::Verified),
    (POD_WEIGHTS_SYNCED, true, PodReason::WeightsSynced),
    (POD_JOINED, true, PodReason::Joined),
    (POD_MEMBER_READY, true, PodReason::MemberReady),
];

#[tokio::test(start_paused = true)]
async fn a_member_is_verified_synced_joined_then_opens_the_gate_in_that_order() {
    let kit = Kit::new();
    let task = kit.start();
    kit.until_ready().await;
    assert_eq!(kit.cluster.writes(), JOINER_WRITES);
    assert_eq!(kit.domain.with(|d| d.serving), Some(1));
    let notices = kit.worker.notices.lock().unwrap().clone();
    assert!(matches!(notices[..], [Notice::WeightsReady { .. }]));
    let last = kit
        .worker
        .assignments
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!((last.rank, last.world, last.epoch), (0, 2, 1));
    assert_eq!(last.weights_path.as_deref(), Some("/w/current"));
    kit.delete_pod();
    assert_eq!(task.await.unwrap(), Phase::Gone);
}

#[tokio::test(start_paused = true)]
async fn a_table_is_checked_once_per_version_against_members_read_no_older_than_it() {
    // A member listed before the table was written may lack the Pods the table names;
    // one read no older than the table's revision has them all (`group::fetch_member_pods_at`).
    let kit = Kit::new();
    kit.cluster.with(|s| {
        s.table_revision = Some("4711".into());
        s.group.uid = "uid-of-g".into();
    });
    let task = kit.start();
    kit.until_ready().await;
    let verified = kit.verifier.verified_against.lock().unwrap().clone();
    assert_eq!(verified, [(Some("4711".to_owned()), "uid-of-g".to_owned())]);
    // The join at the version the verification checked does not check it again, and
    // reads the table from the API server's cache, no older than the one it holds.
    let (reads, table_read) = kit
        .cluster
        .with(|s| (s.member_reads_at.clone(), s.table_reads_at.last().cloned()));
    assert!(reads.is_empty(), "{reads:?}");
    assert_eq!(table_read, Some(ReadAt::NotOlderThan("4711".into())));
    // A later epoch's table, written anew, is checked against members read no older.
    kit.cluster.with(|s| s.table_revision = Some("4800".into()));
    kit.set_table_epoch(2);
    kit.until("epoch 2 joined", |k| {
        k.domain.with(|d| d.serving == Some(2))
    })
    .await;
    let reads = kit.cluster.with(|s| s.member_reads_at.clone());
    assert_eq!(reads, [Some("4800".to_owned())]);
    kit.delete_pod();
    assert_eq!(task.await.unwrap(), Phase::Gone);
}

#[tokio::test(start_paused = true)]
async fn a_joiners_sync_and_join_run_while_the_conditions_before_them_are_written() {
    let kit = Kit::new();
    let step = Duration::from_secs(1);
    kit.cluster.with(|s| s.write_time = step);
    kit.weights
        .script
        .lock()
        .unwrap()
        .push_back((step, Ok(synced())));
    kit.domain.with(|d| d.script.push_back((step, Ok(()))));
    let started = tokio::time::Instant::now();
    let _task = kit.start();
    kit.until_ready().await;
    // `verified` beside the sync, `weights-synced` beside the join, then `joined` and
    // `ready` in one write: 3 s. Each write before its step would make it 5 s.
    let took = started.elapsed();
    assert!(took < Duration::from_millis(3_500), "took {took:?}");
    assert_eq!(
        kit.cluster.writes(),
        JOINER_WRITES,
        "written in the lifecycle's order"
    );
}

#[tokio::test(start_paused = true)]
async fn a_worker_is_placed_in_its_epochs_communicator_only_once_the_member_joined() {
    let kit = Kit::new();
    let _task = kit.start();
    kit.until_ready().await;
    let all = kit.worker.assignments.lock().unwrap().clone();
    assert!(
        all.first().unwrap().comm.is_none(),
        "a verified member not yet in the domain has no placement"
    );
    let placed = all.last().unwrap().comm.clone().unwrap();
    assert_eq!((placed.epoch, placed.rank), (1, 0));
    assert!(placed.root_info.starts_with("hcomm-root-v1@"), "{placed:?}");
    assert_eq!(placed.key_hex.len(), 64);
}

#[tokio::test(start_paused = true)]
async fn a_member_waits_for_the_rank_table_of_its_epoch_before_verifying() {
    let kit = Kit::new();
    kit.cluster.with(|s| s.table = None);
    let _task = kit.start();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(kit.cluster.writes().is_empty(), "no table: nothing decided");
    kit.cluster.with(|s| s.table = Some((table(), 0)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(kit.cluster.writes().is_empty(), "a table behind the member");
    kit.cluster.with(|s| s.table = Some((table(), 1)));
    kit.until_ready().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_verification_writes_verified_false_and_is_retried_after_the_backoff() {
    let kit = Kit::new();
    kit.verifier
        .script
        .lock()
        .unwrap()
        .push_back(VerifyScript::Fail(PodReason::NicUnreachable));
    let _task = kit.start();
    kit.until("verified=False", |k| {
        k.cluster.condition(POD_VERIFIED) == Some((false, PodReason::NicUnreachable))
    })
    .await;
    assert_eq!(
        kit.cluster.condition(POD_MEMBER_READY),
        Some((false, PodReason::NotReady))
    );
    assert!(
        kit.cluster
            .event_reasons()
            .contains(&PodReason::VerificationFailed)
    );
    assert_eq!(*kit.weights.finished.lock().unwrap(), 0, "never syncs");
    kit.until_ready().await;
}

/// The kit's group with `comm.backend` set.
fn with_backend(kit: &Kit, backend: hcomm_crds::Backend) {
    kit.cluster.with(|s| s.group.comm.backend = backend);
}

#[tokio::test(start_paused = true)]
async fn an_hccl_group_on_a_node_without_the_hccl_runtime_is_not_verified_and_says_why() {
    let kit = Kit::new();
    with_backend(&kit, hcomm_crds::Backend::Hccl);
    *kit.verifier.hccl_missing.lock().unwrap() =
        Some("libascendcl.so could not be loaded (searched: /x/libascendcl.so)".into());
    let _task = kit.start();
    kit.until("verified=False (HcclRuntimeUnavailable)", |k| {
        k.cluster.condition(POD_VERIFIED) == Some((false, PodReason::HcclRuntimeUnavailable))
    })
    .await;
    let events = kit.cluster.with(|s| s.events.clone());
    assert!(
        events.iter().any(|(warning, reason, message)| *warning
            && *reason == PodReason::VerificationFailed
            && message.starts_with(PodReason::HcclRuntimeUnavailable.as_str())
            && message.contains("/x/libascendcl.so")),
        "{events:?}"
    );
    // Retried after each backoff, never verified while the runtime is missing.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(
        !kit.cluster
            .writes()
            .iter()
            .any(|(t, status, _)| *t == POD_VERIFIED && *status),
        "verified without an HCCL runtime: {:?}",
        kit.cluster.writes()
    );
    assert_eq!(*kit.weights.finished.lock().unwrap(), 0, "never syncs");
    // The runtime is installed: the next retry verifies.
    *kit.verifier.hccl_missing.lock().unwrap() = None;
    kit.until_ready().await;
}

#[tokio::test(start_paused = true)]
async fn a_tcp_group_needs_no_hccl_runtime() {
    let kit = Kit::new();
    with_backend(&kit, hcomm_crds::Backend::Tcp);
    *kit.verifier.hccl_missing.lock().unwrap() = Some("no CANN here".into());
    let _task = kit.start();
    kit.until_ready().await;
    assert_eq!(
        kit.cluster.condition(POD_VERIFIED),
        Some((true, PodReason::Verified))
    );
}

#[tokio::test(start_paused = true)]
async fn a_verification_that_never_answers_times_out_as_verified_false() {
    let kit = Kit::new();
    kit.verifier
        .script
        .lock()
        .unwrap()
        .push_back(VerifyScript::Hang);
    let started = tokio::time::Instant::now();
    let _task = kit.start();
    kit.until("the verification deadline", |k| {
        k.cluster.condition(POD_VERIFIED) == Some((false, PodReason::VerificationTimedOut))
    })
    .await;
    // The kit's group connects within 30 s: the backstop is 2 × 30 s + 5 s.
    assert!(started.elapsed() >= Duration::from_secs(65));
    assert!(started.elapsed() < Duration::from_secs(70));
    kit.until_ready().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_weight_source_fails_the_sync_with_warnings_and_the_retry_syncs() {
    let kit = Kit::new();
    let mut lost = SyncFailure::new(PodReason::PeerFetchFailed, "127.0.0.2:7512 went away");
    lost.warnings
        .push((PodReason::WeightsSourceLost, "127.0.0.2:7512: reset".into()));
    kit.weights
        .script
        .lock()
        .unwrap()
        .push_back((Duration::from_secs(3), Err(lost)));
    let _task = kit.start();
    kit.until("weights-synced=False", |k| {
        k.cluster.condition(POD_WEIGHTS_SYNCED) == Some((false, PodReason::PeerFetchFailed))
    })
    .await;
    let events = kit.cluster.event_reasons();
    assert!(events.contains(&PodReason::WeightsSourceLost), "{events:?}");
    assert!(events.contains(&PodReason::PeerFetchFailed), "{events:?}");
    assert!(kit.domain.with(|d| d.attempts.is_empty()), "never joins");
    kit.until_ready().await;
    assert_eq!(*kit.weights.finished.lock().unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_mid_sync_lets_the_transfer_finish_but_never_joins() {
    let kit = Kit::new();
    kit.weights
        .script
        .lock()
        .unwrap()
        .push_back((Duration::from_secs(60), Ok(synced())));
    let task = kit.start();
    kit.until("verified", |k| k.cluster.condition(POD_VERIFIED).is_some())
        .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    kit.delete_pod();
    assert_eq!(task.await.unwrap(), Phase::Gone);
    assert_eq!(
        *kit.weights.finished.lock().unwrap(),
        1,
        "transfer finished"
    );
    assert_eq!(kit.cluster.condition(POD_WEIGHTS_SYNCED), None);
    assert!(kit.domain.with(|d| d.attempts.is_empty()), "never joins");
    assert!(*kit.worker.forgotten.lock().unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_rejected_epoch_fails_the_join_and_the_retry_joins() {
    let kit = Kit::new();
    let rejected = JoinError {
        message: "epoch 1 rejected by the root".into(),
        waiting: false,
    };
    kit.domain
        .with(|d| d.script.push_back((Duration::ZERO, Err(rejected))));
    let _task = kit.start();
    kit.until("joined=False", |k| {
        k.cluster.condition(POD_JOINED) == Some((false, PodReason::JoinFailed))
    })
    .await;
    assert_eq!(
        kit.cluster.condition(POD_MEMBER_READY),
        None,
        "gate untouched"
    );
    kit.until_ready().await;
    assert_eq!(kit.domain.with(|d| d.attempts.clone()), [1, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_rank_table_for_a_newer_epoch_mid_join_makes_the_member_join_that_epoch() {
    let kit = Kit::new();
    kit.domain.with(|d| {
        d.script
            .push_back((Duration::from_secs(60), Err(waiting("init timed out"))))
    });
    let _task = kit.start();
    kit.until("the join of epoch 1", |k| {
        k.domain.with(|d| d.attempts == [1])
    })
    .await;
    kit.set_table_epoch(2);
    kit.until_ready().await;
    assert_eq!(
        kit.domain.with(|d| (d.attempts.clone(), d.serving)),
        (vec![1, 2], Some(2))
    );
    let joined = kit.cluster.with(|s| {
        s.conditions
            .iter()
            .rfind(|c| c.type_ == POD_JOINED)
            .map(|c| c.message.clone())
    });
    assert_eq!(joined.as_deref(), Some("joined the domain at epoch 2"));
    assert!(
        !kit.cluster
            .writes()
            .contains(&(POD_JOINED, false, PodReason::JoinFailed))
    );
}

#[tokio::test(start_paused = true)]
async fn a_join_that_times_out_while_peers_are_still_arriving_initialises_again() {
    let kit = Kit::new();
    kit.cluster.with(|s| s.arriving = vec!["m-1".into()]);
    kit.domain.with(|d| {
        d.script
            .push_back((Duration::from_secs(60), Err(waiting("init timed out"))))
    });
    let _task = kit.start();
    kit.until("the first join attempt", |k| {
        k.domain.with(|d| !d.attempts.is_empty())
    })
    .await;
    kit.until_ready().await;
    assert_eq!(kit.domain.with(|d| d.attempts.clone()), [1, 1]);
    assert!(
        !kit.cluster
            .writes()
            .contains(&(POD_JOINED, false, PodReason::JoinFailed))
    );
}

#[tokio::test(start_paused = true)]
async fn a_join_waiting_for_a_peer_this_node_cannot_reach_waits_for_the_epoch_that_replaces_it() {
    let kit = Kit::new();
    // node-b (127.0.0.2) is in the epoch, Ready by its stale conditions (not arriving),
    // and this node's probes find it unreachable: its agent is gone.
    kit.cluster
        .with(|s| s.unreachable = vec!["127.0.0.2".into()]);
    kit.domain.with(|d| {
        for _ in 0..2 {
            d.script
                .push_back((Duration::from_secs(60), Err(waiting("init timed out"))));
        }
    });
    let _task = kit.start();
    kit.until("two joins of epoch 1", |k| {
        k.domain.with(|d| d.attempts == [1, 1])
    })
    .await;
    // The operator replaces the lost member: a new epoch.
    kit.set_table_epoch(2);
    kit.until_ready().await;
    assert_eq!(
        kit.domain.with(|d| (d.attempts.clone(), d.serving)),
        (vec![1, 1, 2], Some(2))
    );
    assert!(
        !kit.cluster
            .writes()
            .contains(&(POD_JOINED, false, PodReason::JoinFailed)),
        "the join must wait, not fail"
    );
}

#[tokio::test(start_paused = true)]
async fn a_join_that_times_out_with_no_peer_arriving_fails() {
    let kit = Kit::new();
    kit.domain.with(|d| {
        d.script
            .push_back((Duration::from_secs(60), Err(waiting("init timed out"))))
    });
    let _task = kit.start();
    kit.until("joined=False", |k| {
        k.cluster.condition(POD_JOINED) == Some((false, PodReason::JoinFailed))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_new_epoch_while_ready_rejoins_beside_the_old_one_and_tells_the_worker() {
    let kit = Kit::new();
    let _task = kit.start();
    kit.until_ready().await;
    kit.set_table_epoch(2);
    kit.until("serving epoch 2", |k| {
        k.domain.with(|d| d.serving == Some(2))
    })
    .await;
    let notices = kit.worker.notices.lock().unwrap().clone();
    assert!(
        notices.contains(&Notice::EpochChanged { epoch: 2 }),
        "{notices:?}"
    );
    assert_eq!(
        kit.cluster.condition(POD_MEMBER_READY),
        Some((true, PodReason::MemberReady)),
        "the gate stays open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_later_epochs_table_written_for_other_pods_is_not_joined_and_the_member_keeps_serving() {
    // The member's Pod was deleted while its agent could not see it; epoch 2's table gives
    // this node's devices to the replacement Pod, and must not be joined in its place.
    let kit = Kit::new();
    kit.cluster
        .with(|s| s.members = Some(["m-0".to_owned(), "m-1".to_owned()].into()));
    let _task = kit.start();
    kit.until_ready().await;
    kit.cluster
        .with(|s| s.members = Some(["m-1".to_owned(), "m-2-e2".to_owned()].into()));
    kit.set_table_epoch(2);
    tokio::time::sleep(Duration::from_secs(30)).await;
    kit.domain.with(|d| {
        assert_eq!(d.serving, Some(1), "still on epoch 1");
        assert_eq!(d.attempts, [1], "epoch 2 was never joined");
    });
    // Listed again (a table that names it), it follows the group as before.
    kit.cluster
        .with(|s| s.members = Some(["m-0".to_owned(), "m-2-e2".to_owned()].into()));
    kit.set_table_epoch(3);
    kit.until("serving epoch 3", |k| {
        k.domain.with(|d| d.serving == Some(3))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_joiner_missing_from_its_epochs_member_list_does_not_take_the_ranks() {
    let kit = Kit::new();
    kit.cluster
        .with(|s| s.members = Some(["someone-else".to_owned()].into()));
    let _task = kit.start();
    tokio::time::sleep(Duration::from_secs(10)).await;
    kit.domain
        .with(|d| assert!(d.attempts.is_empty(), "never dialled: {:?}", d.attempts));
    assert_ne!(
        kit.cluster.condition(POD_JOINED).map(|c| c.0),
        Some(true),
        "not joined"
    );
}

#[tokio::test(start_paused = true)]
async fn a_later_epochs_table_naming_a_stranger_is_refused_before_dialling_and_the_member_keeps_serving()
 {
    let kit = Kit::new();
    let _task = kit.start();
    kit.until_ready().await;
    // Epoch 2's table names node-b at an address no member's node publishes.
    let mut members = super::ranktable_members::MemberAddresses::default();
    members
        .by_node
        .entry(NODE.into())
        .or_default()
        .insert("127.0.0.1".parse().unwrap());
    kit.cluster
        .with(|s| s.member_addresses = Some(members.clone()));
    kit.set_table_epoch(2);
    kit.until("epoch 2 refused", |k| {
        k.cluster.condition(POD_JOINED) == Some((true, PodReason::RejoinFailed))
    })
    .await;
    let refusal = kit.cluster.with(|s| {
        s.events
            .iter()
            .find(|e| e.1 == PodReason::PeerRefused)
            .cloned()
    });
    let (_, _, message) = refusal.expect("a PeerRefused Event");
    assert!(
        message.contains("epoch 2") && message.contains("node-b") && message.contains("127.0.0.2"),
        "{message}"
    );
    kit.domain.with(|d| {
        assert_eq!(d.serving, Some(1), "still serving epoch 1");
        assert_eq!(d.attempts, [1], "epoch 2 was never dialled");
    });
    assert_eq!(
        kit.cluster.condition(POD_MEMBER_READY),
        Some((true, PodReason::MemberReady)),
        "the gate stays open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_closes_the_gate_waits_for_in_flight_requests_then_leaves_drained() {
    let kit = Kit::new();
    let task = kit.start();
    kit.until_ready().await;
    kit.worker.in_flight.send_replace(Some(3));
    kit.request_drain();
    kit.until("the gate to close", |k| {
        k.cluster.condition(POD_MEMBER_READY) == Some((false, PodReason::Draining))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(kit.cluster.condition(POD_DRAINED), None, "still in flight");
    assert_eq!(kit.domain.with(|d| d.leaves), 0);
    kit.worker.in_flight.send_replace(Some(0));
    kit.until("drained", |k| {
        k.cluster.condition(POD_DRAINED) == Some((true, PodReason::Drained))
    })
    .await;
    assert_eq!(
        kit.cluster.condition(POD_JOINED),
        Some((false, PodReason::Left))
    );
    assert!(kit.domain.with(|d| d.leaves >= 1 && d.serving.is_none()));
    kit.delete_pod();
    assert_eq!(task.await.unwrap(), Phase::Drained);
}

#[tokio::test(start_paused = true)]
async fn a_standby_joins_with_its_gate_held_opens_it_when_promoted_and_closes_it_when_moved_back() {
    let kit = Kit::new();
    kit.set_standby(true);
    let _task = kit.start();
    kit.until("the gate held for standby", |k| {
        k.cluster.condition(POD_MEMBER_READY) == Some((false, PodReason::Standby))
    })
    .await;
    assert_eq!(
        kit.cluster.condition(POD_JOINED),
        Some((true, PodReason::Joined)),
        "a standby is in the domain"
    );
    let joins = kit.domain.with(|d| d.attempts.len());
    kit.set_standby(false);
    kit.until_ready().await;
    assert_eq!(
        kit.domain.with(|d| d.attempts.len()),
        joins,
        "a promotion opens the gate and nothing else"
    );
    kit.set_standby(true);
    kit.until("the gate closed again", |k| {
        k.cluster.condition(POD_MEMBER_READY) == Some((false, PodReason::Standby))
    })
    .await;
    assert_eq!(kit.domain.with(|d| d.leaves), 0, "moved back, not gone");
}

#[tokio::test(start_paused = true)]
async fn a_drain_past_its_deadline_is_recorded_as_drain_timed_out_and_still_leaves() {
    let kit = Kit::new();
    kit.cluster
        .with(|s| s.group.scaling.drain_timeout_seconds = 20);
    let _task = kit.start();
    kit.until_ready().await;
    kit.worker.in_flight.send_replace(Some(3));
    let asked = tokio::time::Instant::now();
    kit.request_drain();
    kit.until("drain timed out", |k| {
        k.cluster.condition(POD_DRAINED) == Some((true, PodReason::DrainTimedOut))
    })
    .await;
    assert!(asked.elapsed() >= Duration::from_secs(20));
    assert!(
        kit.cluster
            .event_reasons()
            .contains(&PodReason::DrainTimedOut)
    );
    assert_eq!(
        kit.cluster.condition(POD_JOINED),
        Some((false, PodReason::Left))
    );
    assert!(kit.domain.with(|d| d.leaves >= 1 && d.serving.is_none()));
}

#[tokio::test(start_paused = true)]
async fn a_drain_before_the_member_served_leaves_without_waiting() {
    let kit = Kit::new();
    kit.verifier
        .script
        .lock()
        .unwrap()
        .push_back(VerifyScript::Fail(PodReason::NicUnreachable));
    let _task = kit.start();
    kit.until("verified=False", |k| {
        k.cluster.condition(POD_VERIFIED).is_some()
    })
    .await;
    kit.worker.in_flight.send_replace(Some(3));
    kit.request_drain();
    kit.until("drained", |k| {
        k.cluster.condition(POD_DRAINED) == Some((true, PodReason::Drained))
    })
    .await;
    assert_eq!(
        kit.cluster.condition(POD_JOINED),
        None,
        "it never joined, so it does not say it left"
    );
    let notices = kit.worker.notices.lock().unwrap().clone();
    assert!(matches!(notices[..], [Notice::DrainRequested { .. }]));
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_ends_a_serving_member_and_leaves_the_domain() {
    let kit = Kit::new();
    let task = kit.start();
    kit.until_ready().await;
    kit.delete_pod();
    assert_eq!(task.await.unwrap(), Phase::Gone);
    assert!(kit.domain.with(|d| d.leaves >= 1 && d.serving.is_none()));
    assert!(*kit.worker.forgotten.lock().unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_member_waiting_for_its_worker_leaves_at_once_when_its_pod_is_deleted() {
    let kit = Kit::new();
    kit.pod
        .send_modify(|p| p.as_mut().unwrap().await_worker = true);
    let task = kit.start();
    kit.until("joined the domain, waiting for the worker", |k| {
        k.domain.with(|d| d.serving.is_some())
    })
    .await;
    kit.delete_pod();
    // Well before the worker timeout: the domain (and its ports) go with the member.
    let phase = tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("the member ends without waiting for the worker timeout")
        .unwrap();
    assert_eq!(phase, Phase::Gone);
    assert!(kit.domain.with(|d| d.leaves >= 1 && d.serving.is_none()));
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_says_it_cannot_serve_fails_the_join_at_once_with_its_reason() {
    let kit = Kit::new();
    kit.pod
        .send_modify(|p| p.as_mut().unwrap().await_worker = true);
    let _task = kit.start();
    kit.until("joined the domain, waiting for the worker", |k| {
        k.domain.with(|d| d.serving.is_some())
    })
    .await;
    let asked = tokio::time::Instant::now();
    kit.worker
        .cannot_serve
        .send_replace(Some("HCCL communicator: all_reduce timed out".into()));
    kit.until("joined=False", |k| {
        k.cluster.condition(POD_JOINED) == Some((false, PodReason::JoinFailed))
    })
    .await;
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(5),
        "at once, not at the worker-ready timeout: {:?}",
        asked.elapsed()
    );
    let message = kit.cluster.with(|s| {
        s.conditions
            .iter()
            .rev()
            .find(|c| c.type_ == POD_JOINED)
            .map(|c| c.message.clone())
            .unwrap_or_default()
    });
    assert!(
        message.contains("the worker cannot serve: HCCL communicator: all_reduce timed out"),
        "{message}"
    );
    assert_eq!(kit.cluster.condition(POD_MEMBER_READY), None);
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_never_reports_serving_fails_the_join_instead_of_opening_the_gate() {
    let kit = Kit::new();
    kit.pod
        .send_modify(|p| p.as_mut().unwrap().await_worker = true);
    let _task = kit.start();
    kit.until("joined=False", |k| {
        k.cluster.condition(POD_JOINED) == Some((false, PodReason::JoinFailed))
    })
    .await;
    assert_eq!(kit.cluster.condition(POD_MEMBER_READY), None);
    kit.worker.serving.send_replace(true);
    kit.until_ready().await;
}
