//! Unit tests of `diagnose::checks`.

use super::*;
use crate::diagnose::facts::{CommCounters, LogMatch};
use crate::inventory::nics::Nic;
use crate::nic::probe::{ProbeOutcome, ProbeTarget};
use crate::nic::verify::DeviceFacts;
use std::time::Duration;

fn probe(peer: &str, ok: bool) -> ProbeOutcome {
    ProbeOutcome {
        target: ProbeTarget {
            name: peer.into(),
            addr: "198.18.0.11:29499".parse().unwrap(),
        },
        interface: "data0".into(),
        rtt: ok.then(|| Duration::from_micros(50)),
        error: (!ok).then(|| "connect: Connection timed out".into()),
    }
}

fn healthy() -> Facts {
    let mut data = Nic::fixture("data0", "198.18.0.10");
    data.speed_mbps = Some(100_000);
    data.numa_node = Some(0);
    Facts {
        nics: vec![Nic::fixture("mgmt0", "198.19.0.10"), data],
        socket_ifname: Some("data".into()),
        data_address: Some("198.18.0.10".parse().unwrap()),
        management: Some("mgmt0".into()),
        peer_probes: vec![probe("host-0", true), probe("host-2", true)],
        rank0_peer: Some("host-0".into()),
        port_check: Some(Ok(())),
        devices: DeviceFacts {
            assigned: vec![0, 1],
            visible: Some(vec![0, 1]),
            inventory: vec![0, 1],
            rank_table: Some(vec![0, 1]),
        },
        pod_epoch: Some(3),
        rank_table_epoch: Some(3),
        group_epoch: Some(3),
        weights_synced: Some(true),
        comm: Some(CommCounters {
            created: 10,
            destroyed: 9,
            open: 1,
        }),
        open_fds: Some(40),
        fd_limit: Some(1024),
        process_numa: vec![0],
        cluster: member(&[
            (
                hcomm_crds::contract::POD_VERIFIED,
                "True",
                hcomm_crds::contract::PodReason::Verified.as_str(),
            ),
            (hcomm_crds::contract::POD_WEIGHTS_SYNCED, "True", "Synced"),
            (
                hcomm_crds::contract::POD_JOINED,
                "True",
                hcomm_crds::contract::PodReason::Joined.as_str(),
            ),
            (hcomm_crds::contract::POD_MEMBER_READY, "True", "Serving"),
        ]),
        allocation: Some(crate::diagnose::allocation::AllocationSeen {
            pod: "ns/m-0".into(),
            request: crate::member::allocation::NpuRequest {
                resource: hcomm_crds::contract::ascend::RESOURCE_ASCEND910.into(),
                count: 2,
            },
            kubelet: Ok(Some(
                [0, 1]
                    .map(|i| {
                        hcomm_crds::contract::ascend::kubelet_device_id(
                            hcomm_crds::contract::ascend::RESOURCE_ASCEND910,
                            i,
                        )
                    })
                    .to_vec(),
            )),
            annotation: Some(r#"{"devices":[{"device_id":"0"},{"device_id":"1"}]}"#.into()),
            table: Ok(vec![(0, 0), (1, 1)]),
        }),
        ..Default::default()
    }
}

fn outcome(rows: &[Finding], id: &str) -> Outcome {
    rows.iter().find(|r| r.id == id).unwrap().outcome
}

#[test]
fn a_healthy_node_passes_every_check() {
    let rows = run_all(&healthy());
    for r in &rows {
        assert_eq!(r.outcome, Outcome::Pass, "{r:?}");
    }
}

#[test]
fn socket_ifname_pointing_at_the_management_nic_is_the_handshake_cause() {
    let mut f = healthy();
    f.socket_ifname = Some("mgmt".into());
    f.data_address = None;
    let r = nic_choice(&f);
    assert_eq!(r.outcome, Outcome::Fail);
    assert!(
        r.detail.contains("mgmt0") && r.detail.contains("management"),
        "{}",
        r.detail
    );
    f.socket_ifname = Some("=eth9".into());
    assert!(nic_choice(&f).detail.contains("matches no up interface"));
}

#[test]
fn an_unreachable_rank_0_is_named() {
    let mut f = healthy();
    f.peer_probes[0] = probe("host-0", false);
    let r = peer_reachability(&f);
    assert_eq!(r.outcome, Outcome::Fail);
    assert!(
        r.detail.starts_with("rank 0 is unreachable"),
        "{}",
        r.detail
    );
    assert!(r.detail.contains("host-0 (198.18.0.11:29499) via data0"));
}

#[test]
fn a_down_data_link_is_the_hang_cause() {
    let mut f = healthy();
    f.nics[1].up = false;
    f.peer_probes = vec![probe("host-0", false)];
    let r = link_or_device_down(&f);
    assert_eq!(r.outcome, Outcome::Fail);
    assert!(
        r.detail.contains("data0 is down") && r.detail.contains("1 of 1 peer links"),
        "{}",
        r.detail
    );
    let mut f = healthy();
    f.unhealthy_devices = vec![3];
    assert!(link_or_device_down(&f).detail.contains("[3]"));
}

#[test]
fn a_device_mapping_mismatch_is_the_wrong_results_cause() {
    let mut f = healthy();
    f.devices.visible = Some(vec![1, 0]);
    let r = device_mapping(&f);
    assert_eq!(r.outcome, Outcome::Fail);
    assert!(r.detail.contains("ASCEND_VISIBLE_DEVICES=1,0"));
    assert_eq!(
        outcome(&run_all(&Facts::default()), "device-mapping"),
        Outcome::Skip
    );
}

#[test]
fn slow_far_nics_and_small_messages_warn() {
    let mut f = healthy();
    f.nics[1].speed_mbps = Some(1000);
    f.process_numa = vec![1];
    f.message_bytes = Some(4096);
    let r = throughput(&f);
    assert_eq!(r.outcome, Outcome::Warn);
    for part in ["1000 Mbit/s", "NUMA node 0", "4096 B"] {
        assert!(r.detail.contains(part), "{}", r.detail);
    }
}

#[test]
fn leaked_communicators_and_fd_pressure_are_reported() {
    let mut f = healthy();
    f.comm = Some(CommCounters {
        created: 100,
        destroyed: 50,
        open: 1,
    });
    assert_eq!(churn(&f).outcome, Outcome::Fail);
    assert!(churn(&f).detail.contains("49 communicators"));
    let mut f = healthy();
    f.open_fds = Some(1000);
    assert_eq!(churn(&f).outcome, Outcome::Warn);
}

#[test]
fn unsynced_weights_and_stale_rank_tables_fail_new_members() {
    let mut f = healthy();
    f.weights_synced = Some(false);
    f.rank_table_epoch = Some(2);
    f.pod_epoch = Some(3);
    let r = new_member(&f);
    assert_eq!(r.outcome, Outcome::Fail);
    assert!(
        r.detail.contains("not synced") && r.detail.contains("planned at epoch 3"),
        "{}",
        r.detail
    );
}

fn member(conditions: &[(&str, &str, &str)]) -> ClusterRead {
    use crate::diagnose::facts::{MemberConditions, PodCondition};
    ClusterRead::Read(MemberConditions {
        pod: Some("ai/decode-1-e2".into()),
        pod_found: true,
        conditions: conditions
            .iter()
            .map(|(t, s, r)| PodCondition {
                type_: (*t).into(),
                status: (*s).into(),
                reason: (*r).into(),
                message: if *s == "False" {
                    "rank 0 198.18.0.10:30000 refused".into()
                } else {
                    String::new()
                },
            })
            .collect(),
        ..Default::default()
    })
}

#[test]
fn member_conditions_name_the_failed_step_or_the_missing_ones() {
    use hcomm_crds::contract::{POD_JOINED, POD_MEMBER_READY, POD_VERIFIED, POD_WEIGHTS_SYNCED};
    let mut f = healthy();
    f.cluster = ClusterRead::NotAsked;
    assert_eq!(member_conditions(&f).outcome, Outcome::Skip);

    f.cluster = member(&[
        (
            POD_VERIFIED,
            "True",
            hcomm_crds::contract::PodReason::Verified.as_str(),
        ),
        (POD_WEIGHTS_SYNCED, "True", "Synced"),
        (
            POD_JOINED,
            "True",
            hcomm_crds::contract::PodReason::Joined.as_str(),
        ),
        (POD_MEMBER_READY, "True", "Serving"),
    ]);
    let r = member_conditions(&f);
    assert_eq!(r.outcome, Outcome::Pass, "{}", r.detail);
    assert!(r.checked.ends_with("on ai/decode-1-e2"), "{}", r.checked);

    f.cluster = member(&[
        (
            POD_VERIFIED,
            "True",
            hcomm_crds::contract::PodReason::Verified.as_str(),
        ),
        (POD_WEIGHTS_SYNCED, "True", "Synced"),
        (
            POD_JOINED,
            "False",
            hcomm_crds::contract::PodReason::JoinFailed.as_str(),
        ),
    ]);
    let r = member_conditions(&f);
    assert_eq!(r.outcome, Outcome::Fail);
    assert_eq!(
        r.detail,
        "hcomm.io/joined=False (JoinFailed): rank 0 198.18.0.10:30000 refused"
    );

    f.cluster = member(&[(
        POD_VERIFIED,
        "True",
        hcomm_crds::contract::PodReason::Verified.as_str(),
    )]);
    let r = member_conditions(&f);
    assert_eq!(r.outcome, Outcome::Warn);
    assert!(
        r.detail
            .contains("weights-synced, hcomm.io/joined, hcomm.io/member-ready")
    );

    f.cluster = ClusterRead::Unreachable("get Pod ai/x: no answer within 5s".into());
    let r = member_conditions(&f);
    assert_eq!(r.outcome, Outcome::Warn);
    assert!(r.detail.starts_with("API server unreachable") && r.detail.contains("5s"));
}

#[test]
fn log_matches_warn_with_their_keywords() {
    let mut f = healthy();
    f.log_matches = vec![LogMatch {
        file: "a".into(),
        line_no: 1,
        keyword: "link down",
        context: vec![],
    }];
    let r = logs(&f);
    assert_eq!(r.outcome, Outcome::Warn);
    assert!(r.detail.contains("link down"));
}

#[test]
fn port_problems_fail() {
    let mut f = healthy();
    f.port_check = Some(Err("port 29600 in use".into()));
    assert_eq!(port_range(&f).outcome, Outcome::Fail);
}
