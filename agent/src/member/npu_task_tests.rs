//! The member task with the NPU network check (issue 15): a member of a group whose rank
//! table carries device addresses is verified against a fake NPU network, the real check
//! and verdict in between. One test per failure edge: the named reason on
//! `hcomm.io/verified`, its Warning Event, within the group's connect timeout, and the
//! weight sync begun once the data NIC passed stopped before it finished.

use std::time::Duration;

use hcomm_crds::contract::{POD_JOINED, POD_VERIFIED, POD_WEIGHTS_SYNCED, PodReason};
use hcomm_crds::node::NpuLink;

use super::fakes::{FakeNpu, synced};
use super::task_kit::Kit;
use crate::ascend::hccn::conf;
use crate::ascend::hccn::output::NetHealth;

/// The group's default connect timeout (the check's budget).
const CONNECT: Duration = Duration::from_secs(30);

/// How long each scripted sync takes in [`refused`]: past the slowest refusal (the connect
/// timeout), so every sync is still running when its verification fails.
const SLOW_SYNC: Duration = Duration::from_secs(40);

/// Starts the member with `npu` broken by `breakage`; waits for `verified=False` with
/// `reason` and checks the Event, the time taken, and that no sync finishes, even long
/// after (one begun beside a slow check was stopped with it). Returns the kit.
async fn refused(breakage: impl FnOnce(&FakeNpu), reason: PodReason, says: &str) -> Kit {
    let (kit, npu) = Kit::npu();
    breakage(&npu);
    // Every retry's sync too.
    kit.weights
        .script
        .lock()
        .unwrap()
        .extend((0..64).map(|_| (SLOW_SYNC, Ok(synced()))));
    let started = tokio::time::Instant::now();
    let _task = kit.start();
    kit.until("verified=False", |k| {
        k.cluster.condition(POD_VERIFIED).is_some()
    })
    .await;
    assert_eq!(
        kit.cluster.condition(POD_VERIFIED),
        Some((false, reason)),
        "conditions: {:?}",
        kit.cluster.writes()
    );
    // The check stops at the connect timeout; the test observes it within its 100 ms poll.
    assert!(
        started.elapsed() <= CONNECT + Duration::from_millis(200),
        "took {:?}",
        started.elapsed()
    );
    let events = kit.cluster.with(|s| s.events.clone());
    let event = events
        .iter()
        .find(|(warning, r, _)| *warning && *r == PodReason::VerificationFailed)
        .unwrap_or_else(|| panic!("no VerificationFailed Event in {events:?}"));
    assert!(
        event.2.starts_with(reason.as_str()) && event.2.contains(says),
        "{:?}",
        event.2
    );
    tokio::time::sleep(SLOW_SYNC * 2).await;
    assert_eq!(
        *kit.weights.finished.lock().unwrap(),
        0,
        "every sync was stopped with its verification"
    );
    kit
}

#[tokio::test(start_paused = true)]
async fn the_weight_sync_runs_beside_the_npu_check_once_the_data_nic_passed() {
    let (kit, npu) = Kit::npu();
    let check = Duration::from_secs(5);
    let sync = Duration::from_secs(3);
    npu.with(|s| s.ping_time = check);
    kit.weights
        .script
        .lock()
        .unwrap()
        .push_back((sync, Ok(synced())));
    let started = tokio::time::Instant::now();
    let _task = kit.start();
    kit.until_ready().await;
    // One after the other would take 8 s; the sync ends inside the check's 5 s.
    let took = started.elapsed();
    assert!(
        took >= check && took < check + Duration::from_millis(500),
        "took {took:?}"
    );
    assert_eq!(
        *kit.weights.started.lock().unwrap(),
        1,
        "one sync, taken over"
    );
    assert_eq!(*kit.weights.finished.lock().unwrap(), 1);
    // The lifecycle's order is kept: verified, then weights synced, then joined.
    let order: Vec<&str> = kit
        .cluster
        .writes()
        .into_iter()
        .filter(|(_, status, _)| *status)
        .map(|(type_, ..)| type_)
        .collect();
    let at = |t: &str| order.iter().position(|o| *o == t).unwrap_or(usize::MAX);
    assert!(
        at(POD_VERIFIED) < at(POD_WEIGHTS_SYNCED) && at(POD_WEIGHTS_SYNCED) < at(POD_JOINED),
        "{order:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_healthy_npu_network_lets_the_member_join_after_pinging_only_from_its_own_npus() {
    let (kit, npu) = Kit::npu();
    let _task = kit.start();
    kit.until_ready().await;
    assert_eq!(
        kit.cluster.condition(POD_VERIFIED),
        Some((true, PodReason::Verified))
    );
    // The joiner only pings from its own device to the peer's NPU: the check has no way
    // to write to a serving member.
    let pings = npu.with(|s| s.pings.clone());
    assert_eq!(pings, [(0, "10.0.1.1".parse().unwrap())]);
}

#[tokio::test(start_paused = true)]
async fn a_device_without_an_address_in_hccn_conf_is_refused_as_npu_ip_missing() {
    refused(
        |n| n.with(|s| s.conf = Ok(conf::parse("netmask_0=255.255.255.0\n").unwrap())),
        PodReason::NpuIpMissing,
        "device 0 has no address_0",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_unreadable_hccn_conf_is_refused_as_npu_ip_missing_with_the_cause() {
    refused(
        |n| n.with(|s| s.conf = Err("cannot read /etc/hccn.conf: No such file".into())),
        PodReason::NpuIpMissing,
        "cannot read /etc/hccn.conf",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_tool_address_other_than_the_conf_is_refused_as_npu_ip_mismatch() {
    refused(
        |n| {
            n.with(|s| {
                s.devices[0] = crate::ascend::hccn::observe::DeviceObservation::healthy(
                    0,
                    "10.0.0.7".parse().unwrap(),
                    false,
                )
            })
        },
        PodReason::NpuIpMismatch,
        "hccn_tool -ip -g says 10.0.0.7",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn two_devices_with_one_address_are_refused_as_npu_ip_duplicate() {
    refused(
        |n| {
            n.with(|s| {
                s.conf = Ok(conf::parse("address_0=10.0.0.1\naddress_1=10.0.0.1\n").unwrap())
            })
        },
        PodReason::NpuIpDuplicate,
        "devices 0 and 1 of node-a share 10.0.0.1",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_down_npu_link_is_refused_as_npu_link_down() {
    refused(
        |n| n.with(|s| s.devices[0].link = Ok(NpuLink::Down)),
        PodReason::NpuLinkDown,
        "device 0 on node-a is DOWN",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_faulty_net_health_is_refused_as_npu_unhealthy() {
    refused(
        |n| n.with(|s| s.devices[0].health = Ok(NetHealth("Fault".into()))),
        PodReason::NpuUnhealthy,
        "net health status Fault",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn tls_on_at_a_peer_and_off_here_is_refused_as_npu_tls_mismatch() {
    refused(
        |n| n.with(|s| s.peer_tls[0].enabled = Some(true)),
        PodReason::NpuTlsMismatch,
        "on for node-b device 0 but off for node-a device 0",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_npu_ping_is_refused_as_npu_ping_failed() {
    refused(
        |n| n.with(|s| s.unreachable.push("10.0.1.1".parse().unwrap())),
        PodReason::NpuPingFailed,
        "device 0 -> node-b device 0 (10.0.1.1): 3 sent, 0 received",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_ping_that_hangs_is_cut_at_the_connect_timeout_as_npu_ping_failed() {
    let kit = refused(
        |n| n.with(|s| s.ping_time = Duration::from_secs(3600)),
        PodReason::NpuPingFailed,
        "timed out",
    )
    .await;
    // The sync began beside the hanging ping (and was stopped, above).
    assert!(*kit.weights.started.lock().unwrap() >= 1);
}

#[tokio::test(start_paused = true)]
async fn a_tool_error_is_refused_as_npu_tool_failed() {
    refused(
        |n| {
            n.with(|s| {
                s.devices[0].tls = Err("hccn_tool -tls -g: no `tls switch[...]` field".into())
            })
        },
        PodReason::NpuToolFailed,
        "no `tls switch[...]` field",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cpu_group_without_device_addresses_is_not_npu_checked() {
    let (kit, npu) = Kit::npu();
    kit.cluster
        .with(|s| s.table = Some((super::task_kit::table(), 1)));
    npu.with(|s| s.devices[0].link = Ok(NpuLink::Down));
    let _task = kit.start();
    kit.until_ready().await;
    assert!(npu.with(|s| s.pings.is_empty()));
}
