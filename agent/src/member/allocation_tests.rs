//! The member task's NPU allocation check against the in-memory fakes (see
//! [`super::allocation_check`]): the kubelet (PodResources), the device plugin's
//! annotation and the rank table agreeing, disagreeing, or staying silent past the
//! verification deadline, and members that must not be checked (CPU groups, serving
//! members).

use std::time::Duration;

use hcomm_crds::contract::{POD_MEMBER_READY, POD_VERIFIED, PodReason};

use super::task_kit::Kit;
use crate::member::allocation::NpuRequest;
use crate::member::ranktable::RankTable;
use hcomm_crds::contract::ascend::{RESOURCE_ASCEND910, kubelet_device_id};
use hcomm_crds::local_api::ProcessAssignment;
use hcomm_kubelet::PodResourcesError;

/// This member holds ranks 0 and 1 on physical NPUs 6 and 4 of node-a; a peer on
/// node-b holds rank 2.
fn npu_table() -> RankTable {
    RankTable::parse(
        r#"{"version":"1.0","status":"completed","server_count":"2","server_list":[
        {"server_id":"node-a","host_ip":"127.0.0.1","device":[
          {"device_id":"6","rank_id":"0"},{"device_id":"4","rank_id":"1"}]},
        {"server_id":"node-b","host_ip":"127.0.0.2","device":[{"device_id":"0","rank_id":"2"}]}]}"#,
    )
    .expect("valid table")
}

fn plugin_annotation(devices: &[u32]) -> String {
    let d: Vec<String> = devices
        .iter()
        .map(|i| format!(r#"{{"device_id":"{i}","device_ip":"-1"}}"#))
        .collect();
    format!(r#"{{"pod_name":"m-0","devices":[{}]}}"#, d.join(","))
}

fn kubelet(devices: &[u32]) -> Option<Vec<String>> {
    Some(
        devices
            .iter()
            .map(|i| kubelet_device_id(RESOURCE_ASCEND910, *i))
            .collect(),
    )
}

/// A kit whose member requests two NPUs and whose table is [`npu_table`]; the kubelet
/// and the plugin say `kubelet` and `plugin`.
fn npu_kit(kubelet_says: Option<&[u32]>, plugin_says: Option<&[u32]>) -> Kit {
    let kit = Kit::new();
    kit.cluster.with(|s| s.table = Some((npu_table(), 1)));
    kit.allocations.set(Ok(kubelet_says.and_then(kubelet)));
    kit.pod.send_modify(|p| {
        let p = p.as_mut().unwrap();
        p.devices = Some(vec![6, 4]);
        p.npu = Some(NpuRequest {
            resource: RESOURCE_ASCEND910.into(),
            count: 2,
        });
        p.device_allocation = plugin_says.map(plugin_annotation);
    });
    kit
}

#[tokio::test(start_paused = true)]
async fn an_agreeing_allocation_verifies_and_each_process_gets_its_rank_and_device() {
    let kit = npu_kit(Some(&[4, 6]), Some(&[4, 6]));
    let _task = kit.start();
    kit.until_ready().await;
    let last = kit
        .worker
        .assignments
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(
        last.processes,
        vec![
            ProcessAssignment {
                local_rank: 0,
                rank_id: 0,
                device_id: 1,
                physical_device_id: 6
            },
            ProcessAssignment {
                local_rank: 1,
                rank_id: 1,
                device_id: 0,
                physical_device_id: 4
            },
        ],
        "rank order; logical devices renumbered from 0 in physical order"
    );
}

#[tokio::test(start_paused = true)]
async fn the_plugin_disagreeing_with_the_kubelet_is_allocation_mismatch_naming_both() {
    let kit = npu_kit(Some(&[4, 6]), Some(&[4, 5]));
    let _task = kit.start();
    kit.until("verified=False", |k| {
        k.cluster.condition(POD_VERIFIED) == Some((false, PodReason::AllocationMismatch))
    })
    .await;
    let events = kit.cluster.with(|s| s.events.clone());
    let (warning, reason, message) = events.last().cloned().unwrap();
    assert!(warning);
    assert_eq!(reason, PodReason::VerificationFailed);
    assert!(
        message.contains("[4,6]") && message.contains("[4,5]"),
        "{message}"
    );
    assert_eq!(kit.domain.with(|d| d.serving), None, "never joined");
}

#[tokio::test(start_paused = true)]
async fn a_rank_table_on_other_devices_is_allocation_mismatch() {
    let kit = npu_kit(Some(&[0, 1]), Some(&[0, 1]));
    let _task = kit.start();
    kit.until("verified=False", |k| {
        k.cluster.condition(POD_VERIFIED) == Some((false, PodReason::AllocationMismatch))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn no_kubelet_answer_within_the_deadline_is_allocation_unknown_not_a_hang() {
    let kit = npu_kit(None, Some(&[4, 6]));
    kit.allocations.set(Err(PodResourcesError::SocketMissing(
        "/var/lib/kubelet/pod-resources/missing.sock".into(),
    )));
    let started = tokio::time::Instant::now();
    let _task = kit.start();
    kit.until("verified=False", |k| {
        k.cluster.condition(POD_VERIFIED) == Some((false, PodReason::AllocationUnknown))
    })
    .await;
    let timeout = crate::member::domain::DomainConfig::from_comm(&Default::default())
        .timeouts
        .connect;
    let deadline = crate::member::stages::verify_deadline(timeout);
    assert!(started.elapsed() <= deadline + Duration::from_secs(1));
    assert!(*kit.allocations.calls.lock().unwrap() > 1, "asked again");
    let message = kit.cluster.with(|s| s.events.last().cloned().unwrap().2);
    assert!(message.contains("does not exist"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn an_annotation_written_after_admission_is_waited_for() {
    let kit = npu_kit(Some(&[4, 6]), None);
    let _task = kit.start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(kit.cluster.writes().is_empty(), "still asking");
    kit.pod.send_modify(|p| {
        p.as_mut().unwrap().device_allocation = Some(plugin_annotation(&[6, 4]));
    });
    kit.until_ready().await;
}

#[tokio::test(start_paused = true)]
async fn a_member_requesting_no_npu_is_not_checked() {
    let kit = Kit::new();
    kit.allocations
        .set(Err(PodResourcesError::SocketMissing("/nowhere".into())));
    let _task = kit.start();
    kit.until_ready().await;
    assert_eq!(*kit.allocations.calls.lock().unwrap(), 0);
    let last = kit
        .worker
        .assignments
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(
        last.processes,
        vec![ProcessAssignment {
            local_rank: 0,
            rank_id: 0,
            device_id: 0,
            physical_device_id: 0
        }],
        "CPU members get their processes from the rank table"
    );
}

#[tokio::test(start_paused = true)]
async fn a_serving_member_is_not_rechecked_when_the_kubelet_goes_away() {
    let kit = npu_kit(Some(&[4, 6]), Some(&[4, 6]));
    let _task = kit.start();
    kit.until_ready().await;
    let asked = *kit.allocations.calls.lock().unwrap();
    kit.allocations.set(Err(PodResourcesError::Unavailable {
        path: "/k.sock".into(),
        detail: "connection refused".into(),
    }));
    kit.cluster.with(|s| s.table = Some((npu_table(), 2)));
    kit.nudge.send_replace(());
    kit.until("epoch 2", |k| k.domain.with(|d| d.serving) == Some(2))
        .await;
    assert_eq!(*kit.allocations.calls.lock().unwrap(), asked);
    assert_eq!(
        kit.cluster.condition(POD_MEMBER_READY),
        Some((true, PodReason::MemberReady))
    );
}
