//! The weight sync a joiner begins before its own rank table ([`super::early_sync`]), on
//! the member task's fakes with tokio's clock paused.

use std::time::Duration;

use hcomm_crds::WeightsSpec;
use hcomm_crds::contract::PodReason;

use super::fakes::{lock, synced};
use super::ranktable::RankTable;
use super::task_kit::{Kit, table};
use crate::weights::Place;

/// The table before the joiner's epoch: only the serving member on node-b.
fn serving_only() -> RankTable {
    RankTable::parse(
        r#"{"version":"1.0","status":"completed","server_count":"1","server_list":[
        {"server_id":"node-b","host_ip":"127.0.0.2","device":[{"device_id":"0","rank_id":"0"}]}]}"#,
    )
    .expect("valid table")
}

/// The joiner's epoch with a fellow joiner on node-c beside it.
fn with_fellow() -> RankTable {
    RankTable::parse(
        r#"{"version":"1.0","status":"completed","server_count":"3","server_list":[
        {"server_id":"node-a","host_ip":"127.0.0.1","device":[{"device_id":"0","rank_id":"1"}]},
        {"server_id":"node-b","host_ip":"127.0.0.2","device":[{"device_id":"0","rank_id":"0"}]},
        {"server_id":"node-c","host_ip":"127.0.0.3","device":[{"device_id":"0","rank_id":"2"}]}]}"#,
    )
    .expect("valid table")
}

/// A joiner of epoch 2 whose group's table is still epoch 1's (node-b alone), the group
/// with weights; each sync takes `sync` (paused time).
fn joiner_before_its_table(sync: Duration) -> Kit {
    let kit = Kit::new();
    kit.cluster.with(|s| {
        s.table = Some((serving_only(), 1));
        s.group.weights = Some(WeightsSpec {
            source: String::new(),
            version: "v1".into(),
            digest: format!("sha256:{}", "ab".repeat(32)),
        });
    });
    kit.pod.send_modify(|p| {
        if let Some(p) = p {
            p.epoch = Some(2);
            p.member_index = Some(2);
        }
    });
    lock(&kit.weights.script).extend([(sync, Ok(synced())), (sync, Ok(synced()))]);
    kit
}

/// One second into the early sync, the joiner's own table arrives, naming a fellow joiner;
/// returns once the member is ready.
async fn a_table_with_a_fellow_arrives_mid_sync(kit: &Kit) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*lock(&kit.weights.started), 1, "the early sync began");
    kit.cluster.with(|s| s.table = Some((with_fellow(), 2)));
    kit.nudge.send_replace(());
    kit.until_ready().await;
}

fn peers(kit: &Kit, sync: usize) -> Vec<String> {
    lock(&kit.weights.requests)[sync]
        .peers
        .iter()
        .map(|(n, _)| n.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_joiner_fetches_from_the_serving_members_before_its_table_and_that_sync_stands() {
    let kit = joiner_before_its_table(Duration::from_secs(10));
    let _task = kit.start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*lock(&kit.weights.started), 1, "begun before the table");
    assert_eq!(peers(&kit, 0), ["node-b"]);
    assert_eq!(
        lock(&kit.weights.requests)[0].place,
        Place::Spread(2),
        "before its table, a start spread by its member index"
    );
    assert!(kit.cluster.writes().is_empty(), "nothing decided yet");
    // Its own table names the same source: the sync under way is the member's.
    kit.cluster.with(|s| s.table = Some((table(), 2)));
    kit.nudge.send_replace(());
    kit.until_ready().await;
    assert_eq!(*lock(&kit.weights.started), 1, "no second sync");
    assert_eq!(*lock(&kit.weights.finished), 1);
}

#[tokio::test(start_paused = true)]
async fn a_table_with_a_fellow_joiner_hands_it_to_the_early_sync_under_way() {
    let kit = joiner_before_its_table(Duration::from_secs(10));
    let _task = kit.start();
    a_table_with_a_fellow_arrives_mid_sync(&kit).await;
    assert_eq!(
        *lock(&kit.weights.started),
        1,
        "not stopped, not begun anew"
    );
    assert_eq!(*lock(&kit.weights.grown), [["node-b", "node-c"]]);
    assert_eq!(*lock(&kit.weights.finished), 1);
}

#[tokio::test(start_paused = true)]
async fn an_early_sync_over_another_interface_is_stopped_and_begun_anew() {
    let kit = joiner_before_its_table(Duration::from_secs(10));
    // The early check chose another data NIC than its own table's check will.
    *lock(&kit.verifier.early_nic) = "eth9".into();
    let _task = kit.start();
    a_table_with_a_fellow_arrives_mid_sync(&kit).await;
    assert_eq!(*lock(&kit.weights.started), 2);
    assert_eq!(peers(&kit, 1), ["node-b", "node-c"]);
    assert_eq!(
        lock(&kit.weights.requests)[1].place,
        Place::Stripe { index: 1, count: 3 }
    );
    assert!(lock(&kit.weights.grown).is_empty());
    assert_eq!(
        *lock(&kit.weights.finished),
        1,
        "the early sync was stopped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_early_sync_costs_the_member_only_the_attempt() {
    let kit = joiner_before_its_table(Duration::from_millis(100));
    lock(&kit.weights.script).push_front((
        Duration::from_millis(100),
        Err(super::weights::SyncFailure::new(
            PodReason::SyncFailed,
            "every source refused",
        )),
    ));
    let _task = kit.start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    kit.cluster.with(|s| s.table = Some((table(), 2)));
    kit.nudge.send_replace(());
    kit.until_ready().await;
    assert_eq!(*lock(&kit.weights.started), 2, "synced again once verified");
    assert!(
        kit.cluster
            .writes()
            .iter()
            .all(|(_, _, reason)| *reason != PodReason::SyncFailed),
        "{:?}",
        kit.cluster.writes()
    );
}

#[tokio::test(start_paused = true)]
async fn a_table_that_does_not_pass_its_checks_starts_no_early_sync() {
    let kit = joiner_before_its_table(Duration::from_millis(100));
    *lock(&kit.verifier.early) = Err("server node-b: not a member's node".into());
    let _task = kit.start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*lock(&kit.weights.started), 0);
    kit.cluster.with(|s| s.table = Some((table(), 2)));
    kit.nudge.send_replace(());
    kit.until_ready().await;
    assert_eq!(*lock(&kit.weights.started), 1);
}
