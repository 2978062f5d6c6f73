//! Parsing and validation of rank tables: a property-style sweep over group shapes that
//! must all validate, and one refused table per rule.

use super::*;

/// A v1.0 table of `members` members of `dpm` devices, `per_server` members per server,
/// with device addresses or without.
fn v1_table(members: u32, dpm: u32, per_server: u32, device_ips: bool) -> v1::RankTable {
    let servers = members.div_ceil(per_server);
    let server_list = (0..servers)
        .map(|s| {
            let first_member = s * per_server;
            let last_member = (first_member + per_server).min(members);
            let device = (first_member..last_member)
                .flat_map(|m| (0..dpm).map(move |local| (m, local)))
                .map(|(m, local)| v1::Device {
                    device_id: (m - first_member) * dpm + local,
                    device_ip: device_ips
                        .then(|| format!("192.168.{s}.{}", (m - first_member) * dpm + local)),
                    rank_id: m * dpm + local,
                })
                .collect();
            v1::Server {
                server_id: format!("10.0.0.{s}"),
                host_ip: Some(format!("10.0.0.{s}")),
                device,
            }
        })
        .collect();
    v1::RankTable::completed(server_list)
}

/// The v1.2 form of a v1.0 table: super pods of `pod_size` servers, super device ids
/// numbered through each pod.
fn v12_table(table: &v1::RankTable, pod_size: usize) -> v12::RankTable {
    let server_list: Vec<v12::Server> = table
        .server_list
        .iter()
        .enumerate()
        .map(|(i, s)| v12::Server {
            server_id: s.server_id.clone(),
            host_ip: s.host_ip.clone(),
            device: s
                .device
                .iter()
                .map(|d| v12::Device {
                    device_id: d.device_id,
                    device_ip: d.device_ip.clone(),
                    super_device_id: ((i % pod_size) * 16) as u32 + d.device_id,
                    backup_device_ip: None,
                    backup_device_port: None,
                    rank_id: d.rank_id,
                })
                .collect(),
        })
        .collect();
    let super_pod_list = server_list
        .chunks(pod_size)
        .enumerate()
        .map(|(p, chunk)| v12::SuperPod {
            super_pod_id: p.to_string(),
            server_list: chunk
                .iter()
                .map(|s| v12::SuperPodServer {
                    server_id: s.server_id.clone(),
                })
                .collect(),
        })
        .collect();
    v12::RankTable {
        version: v12::VERSION.into(),
        status: Status::Completed,
        server_count: Some(server_list.len() as u32),
        server_list,
        super_pod_list,
    }
}

fn refused(table: impl Into<RankTable>) -> ValidateError {
    validate(&table.into(), ValidateOptions::HCCL).expect_err("the table breaks a rule")
}

#[test]
fn every_group_shape_builds_a_table_that_validates_and_round_trips() {
    let mut checked = 0;
    for members in 1..=64u32 {
        for dpm in [1, 2, 4, 8, 16] {
            for per_server in [1, 2, 4, 8, 16].into_iter().filter(|p| p * dpm <= 16) {
                for device_ips in [true, false] {
                    let table = v1_table(members, dpm, per_server, device_ips);
                    let servers = table.server_list.len();
                    let table = RankTable::V1(table);
                    assert_eq!(table.world(), (members * dpm) as usize);
                    assert_eq!(validate(&table, ValidateOptions::TCP), Ok(()));
                    let hccl = validate(&table, ValidateOptions::HCCL);
                    if device_ips || servers == 1 {
                        assert_eq!(hccl, Ok(()), "{members}×{dpm}, {per_server}/server");
                    } else {
                        assert_eq!(hccl, Err(ValidateError::DeviceIpsRequired { servers }));
                    }
                    assert_eq!(RankTable::parse(&table.to_json()).unwrap(), table);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 64 * 5, "the sweep covered {checked} shapes");
}

#[test]
fn every_super_pod_layout_validates_and_round_trips() {
    for members in 1..=64u32 {
        for dpm in [1, 2, 4, 8, 16] {
            for pod_size in [1, 2, 4] {
                let table = RankTable::V12(v12_table(&v1_table(members, dpm, 1, true), pod_size));
                assert_eq!(validate(&table, ValidateOptions::HCCL), Ok(()));
                assert_eq!(RankTable::parse(&table.to_json()).unwrap(), table);
            }
        }
    }
}

#[test]
fn the_compact_form_is_the_same_table_in_about_half_the_bytes() {
    for table in [
        RankTable::V1(v1_table(64, 16, 1, true)),
        RankTable::V12(v12_table(&v1_table(64, 16, 1, true), 4)),
    ] {
        let (pretty, compact) = (table.to_json(), table.to_compact_json());
        assert_eq!(RankTable::parse(&compact).unwrap(), table);
        assert!(
            !compact.contains('\n') && !compact.contains(": "),
            "{compact}"
        );
        assert!(
            compact.len() * 10 < pretty.len() * 6,
            "{} vs {}",
            compact.len(),
            pretty.len()
        );
    }
}

#[test]
fn numbers_are_written_as_strings_and_read_as_strings_or_integers() {
    let json = v1_table(1, 2, 1, false);
    let text = RankTable::V1(json).to_json();
    assert!(text.contains(r#""rank_id": "1""#), "{text}");
    assert!(text.contains(r#""server_count": "1""#), "{text}");
    let bare = r#"{"version":"1.0","server_count":1,"status":"completed","server_list":[
        {"server_id":"a","device":[{"device_id":3,"rank_id":0}]}]}"#;
    let RankTable::V1(t) = RankTable::parse(bare).unwrap() else {
        panic!("a v1.0 table")
    };
    assert_eq!(
        (t.server_list[0].device[0].device_id, t.server_count),
        (3, 1)
    );
}

#[test]
fn garbage_is_refused_with_a_named_error() {
    assert!(matches!(
        RankTable::parse("{"),
        Err(ParseError::Malformed(_))
    ));
    assert!(matches!(
        RankTable::parse(r#"{"server_list":[]}"#),
        Err(ParseError::MissingVersion)
    ));
    assert!(matches!(
        RankTable::parse(r#"{"version":"2.0"}"#),
        Err(ParseError::UnsupportedVersion(v)) if v == "2.0"
    ));
    let bad_rank = r#"{"version":"1.0","server_count":"1","status":"completed","server_list":[
        {"server_id":"a","device":[{"device_id":"0","rank_id":"zero"}]}]}"#;
    let err = RankTable::parse(bad_rank).unwrap_err();
    assert!(matches!(err, ParseError::Malformed(_)));
    assert!(err.to_string().contains("\"zero\""), "{err}");
    let negative = bad_rank.replace("\"zero\"", "-1");
    assert!(matches!(
        RankTable::parse(&negative),
        Err(ParseError::Malformed(_))
    ));
    let bad_status = bad_rank.replace("completed", "done").replace("zero", "0");
    assert!(matches!(
        RankTable::parse(&bad_status),
        Err(ParseError::Malformed(_))
    ));
}

#[test]
fn a_table_without_ranks_is_refused() {
    assert_eq!(
        refused(v1::RankTable::completed(vec![])),
        ValidateError::Empty
    );
}

#[test]
fn a_repeated_rank_is_refused() {
    let mut t = v1_table(2, 2, 2, true);
    t.server_list[0].device[1].rank_id = 0;
    assert_eq!(refused(t), ValidateError::DuplicateRank { rank: 0 });
}

#[test]
fn a_gap_in_the_ranks_is_refused() {
    let mut t = v1_table(2, 2, 2, true);
    t.server_list[0].device[3].rank_id = 4;
    assert_eq!(
        refused(t),
        ValidateError::RankOutOfRange { rank: 4, world: 4 }
    );
}

#[test]
fn a_server_whose_ranks_have_a_hole_is_refused() {
    let mut t = v1_table(2, 2, 1, true);
    t.server_list[0].device[1].rank_id = 2;
    t.server_list[1].device[0].rank_id = 1;
    assert!(matches!(
        refused(t),
        ValidateError::RanksNotContiguous { server_id, ranks } if server_id == "10.0.0.0" && ranks == [0, 2]
    ));
}

#[test]
fn gaps_in_the_ranks_are_fine_for_tcp_only() {
    let mut t = v1_table(2, 2, 1, false);
    t.server_list[1].device[0].rank_id = 4;
    t.server_list[1].device[1].rank_id = 5;
    let t = RankTable::V1(t);
    assert_eq!(validate(&t, ValidateOptions::TCP), Ok(()));
    assert!(matches!(
        validate(&t, ValidateOptions::HCCL),
        Err(ValidateError::RankOutOfRange { rank: 4, world: 4 })
    ));
}

#[test]
fn non_adjacent_ranks_on_a_server_are_fine_for_tcp_only() {
    let mut t = v1_table(2, 2, 1, false);
    t.server_list[0].device[1].rank_id = 2;
    t.server_list[1].device[0].rank_id = 1;
    let t = RankTable::V1(t);
    assert_eq!(validate(&t, ValidateOptions::TCP), Ok(()));
    assert!(matches!(
        validate(&t, ValidateOptions::HCCL),
        Err(ValidateError::RanksNotContiguous { .. })
    ));
}

#[test]
fn servers_listed_out_of_rank_order_are_refused() {
    let mut t = v1_table(2, 2, 1, true);
    t.server_list.swap(0, 1);
    assert!(matches!(
        refused(t),
        ValidateError::ServersInterleave { server_id, first: 0, previous_last: 3 } if server_id == "10.0.0.0"
    ));
}

#[test]
fn a_wrong_server_count_is_refused() {
    let mut t = v1_table(2, 1, 1, true);
    t.server_count = 3;
    assert_eq!(
        refused(t),
        ValidateError::ServerCountMismatch {
            declared: 3,
            actual: 2
        }
    );
    let mut t = v12_table(&v1_table(2, 1, 1, true), 2);
    t.server_count = Some(1);
    assert!(matches!(
        refused(t),
        ValidateError::ServerCountMismatch { .. }
    ));
}

#[test]
fn two_servers_with_one_server_id_are_refused_in_both_versions() {
    let mut t = v1_table(2, 1, 1, false);
    t.server_list[1].server_id = t.server_list[0].server_id.clone();
    assert_eq!(
        refused(t.clone()),
        ValidateError::DuplicateServerId {
            server_id: "10.0.0.0".into()
        }
    );
    assert!(matches!(
        refused(v12_table(&t, 2)),
        ValidateError::DuplicateServerId { .. }
    ));
}

#[test]
fn a_device_listed_twice_on_a_server_is_refused() {
    let mut t = v1_table(1, 2, 1, true);
    t.server_list[0].device[1].device_id = 0;
    assert_eq!(
        refused(t),
        ValidateError::DuplicateDeviceId {
            server_id: "10.0.0.0".into(),
            device_id: 0
        }
    );
}

#[test]
fn device_ips_on_some_devices_only_are_refused_by_every_rule_set() {
    let mut t = v1_table(1, 2, 1, true);
    t.server_list[0].device[1].device_ip = None;
    let t = RankTable::V1(t);
    for options in [ValidateOptions::HCCL, ValidateOptions::TCP] {
        assert_eq!(
            validate(&t, options),
            Err(ValidateError::PartialDeviceIps {
                with: 1,
                without: 1
            })
        );
    }
}

#[test]
fn a_device_ip_used_twice_is_refused() {
    let mut t = v1_table(2, 1, 1, true);
    t.server_list[1].device[0].device_ip = t.server_list[0].device[0].device_ip.clone();
    assert_eq!(
        refused(t),
        ValidateError::DuplicateDeviceIp {
            device_ip: "192.168.0.0".into()
        }
    );
}

#[test]
fn a_multi_server_table_without_device_ips_is_refused_for_hccl_only() {
    let t = RankTable::V1(v1_table(2, 1, 1, false));
    assert_eq!(
        validate(&t, ValidateOptions::HCCL),
        Err(ValidateError::DeviceIpsRequired { servers: 2 })
    );
    assert_eq!(validate(&t, ValidateOptions::TCP), Ok(()));
    assert_eq!(
        ValidateOptions::for_backend(crate::Backend::Tcp),
        ValidateOptions::TCP
    );
}

#[test]
fn a_server_in_no_super_pod_is_refused() {
    let mut t = v12_table(&v1_table(2, 1, 1, true), 2);
    t.super_pod_list[0].server_list.pop();
    assert_eq!(
        refused(t),
        ValidateError::ServerWithoutSuperPod {
            server_id: "10.0.0.1".into()
        }
    );
}

#[test]
fn a_server_in_two_super_pods_is_refused() {
    let mut t = v12_table(&v1_table(2, 1, 1, true), 1);
    let first = t.super_pod_list[0].server_list[0].clone();
    t.super_pod_list[1].server_list.push(first);
    assert_eq!(
        refused(t),
        ValidateError::ServerInSeveralSuperPods {
            server_id: "10.0.0.0".into()
        }
    );
}

#[test]
fn a_super_pod_naming_an_unknown_server_is_refused() {
    let mut t = v12_table(&v1_table(1, 1, 1, true), 1);
    t.super_pod_list[0].server_list.push(v12::SuperPodServer {
        server_id: "ghost".into(),
    });
    assert!(matches!(
        refused(t),
        ValidateError::UnknownSuperPodServer { server_id, .. } if server_id == "ghost"
    ));
}

#[test]
fn a_super_device_id_repeated_in_a_super_pod_is_refused() {
    let mut t = v12_table(&v1_table(2, 2, 1, true), 2);
    t.server_list[1].device[0].super_device_id = t.server_list[0].device[0].super_device_id;
    assert_eq!(
        refused(t),
        ValidateError::DuplicateSuperDeviceId {
            super_pod_id: "0".into(),
            super_device_id: 0
        }
    );
}

#[test]
fn the_same_super_device_id_in_two_super_pods_is_fine() {
    let t = RankTable::V12(v12_table(&v1_table(2, 2, 1, true), 1));
    assert_eq!(validate(&t, ValidateOptions::HCCL), Ok(()));
}
