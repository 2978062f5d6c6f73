//! The checklist (pure): each check maps [`Facts`] to a [`Finding`] row of the table.

use super::facts::{ClusterRead, Facts};
use crate::nic::verify::device_failure;
use crate::nic::{IfnameMatcher, NicRule, select_data_nic};

/// The result of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Pass,
    Skip,
    Warn,
    Fail,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Skip => "SKIP",
            Outcome::Warn => "WARN",
            Outcome::Fail => "FAIL",
        }
    }
}

/// One row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub id: &'static str,
    pub symptom: &'static str,
    pub cause: &'static str,
    pub checked: String,
    pub outcome: Outcome,
    pub detail: String,
}

fn finding(
    id: &'static str,
    symptom: &'static str,
    cause: &'static str,
    checked: impl Into<String>,
) -> Finding {
    Finding {
        id,
        symptom,
        cause,
        checked: checked.into(),
        outcome: Outcome::Pass,
        detail: String::new(),
    }
}

impl Finding {
    fn with(mut self, outcome: Outcome, detail: impl Into<String>) -> Finding {
        self.outcome = outcome;
        self.detail = detail.into();
        self
    }
}

const HANDSHAKE: &str = "handshake timeout on all nodes";
const HANG: &str = "hang mid-run";
const WRONG: &str = "wrong results, no errors";
const SLOW: &str = "low throughput, no errors";
const LONG: &str = "timeouts after long runs";
const NEW: &str = "errors on new members";

/// The data NIC the rule picks versus `socketIfname` and the management interface.
pub fn nic_choice(f: &Facts) -> Finding {
    let row = finding(
        "nic-choice",
        HANDSHAKE,
        "wrong NIC for the data network (e.g. the management NIC)",
        format!(
            "socketIfname={} data-address={} management={}",
            f.socket_ifname.as_deref().unwrap_or("unset"),
            f.data_address.map_or("unset".into(), |a| a.to_string()),
            f.management.as_deref().unwrap_or("unset")
        ),
    );
    let matcher = match f
        .socket_ifname
        .as_deref()
        .map(IfnameMatcher::parse)
        .transpose()
    {
        Ok(m) => m,
        Err(e) => return row.with(Outcome::Fail, e.to_string()),
    };
    let rule = NicRule {
        socket_ifname: matcher,
        data_address: f.data_address,
        management: f.management.clone(),
    };
    match select_data_nic(&f.nics, &rule) {
        Err(e) => row.with(Outcome::Fail, e.to_string()),
        Ok(c) if f.management.as_deref() == Some(c.name.as_str()) => row.with(
            Outcome::Fail,
            format!(
                "the data NIC resolves to {} ({}), the management interface; fix socketIfname",
                c.name, c.ip
            ),
        ),
        Ok(c) => {
            if let Some(addr) = f.data_address
                && c.ip != addr
            {
                return row.with(
                    Outcome::Warn,
                    format!(
                        "resolved {} ({}) but the node's data address is {addr}",
                        c.name, c.ip
                    ),
                );
            }
            row.with(Outcome::Pass, format!("{} ({}) by {}", c.name, c.ip, c.why))
        }
    }
}

/// Whether rank 0 and the other peers answer on the data network.
pub fn peer_reachability(f: &Facts) -> Finding {
    let row = finding(
        "reachability",
        HANDSHAKE,
        "firewall or routing blocks the data network; rank 0 unreachable",
        format!(
            "link probe to {} peers over the data NIC",
            f.peer_probes.len()
        ),
    );
    if f.peer_probes.is_empty() {
        return row.with(Outcome::Skip, "no peers known (pass --peer or --pod)");
    }
    let bad: Vec<String> = f
        .peer_probes
        .iter()
        .filter(|p| !p.ok())
        .map(|p| {
            format!(
                "{} ({}) via {}: {}",
                p.target.name,
                p.target.addr,
                p.interface,
                p.error.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if bad.is_empty() {
        return row.with(Outcome::Pass, "every peer answered");
    }
    let rank0_down = f.rank0_peer.as_ref().is_some_and(|r0| {
        f.peer_probes
            .iter()
            .any(|p| &p.target.name == r0 && !p.ok())
    });
    let prefix = if rank0_down {
        "rank 0 is unreachable; "
    } else {
        ""
    };
    row.with(Outcome::Fail, format!("{prefix}{}", bad.join("; ")))
}

/// The communicator port range.
pub fn port_range(f: &Facts) -> Finding {
    let row = finding(
        "port-range",
        HANDSHAKE,
        "communicator ports out of range or taken",
        "comm port base + device ids, local bind",
    );
    match &f.port_check {
        None => row.with(Outcome::Skip, "not checked"),
        Some(Ok(())) => row.with(Outcome::Pass, "ports free and in range"),
        Some(Err(e)) => row.with(Outcome::Fail, e.clone()),
    }
}

/// Links or devices that went down.
pub fn link_or_device_down(f: &Facts) -> Finding {
    let row = finding(
        "link-down",
        HANG,
        "a data link or device went down",
        "data NIC carrier, peer probes, device health",
    );
    let mut problems = Vec::new();
    let chosen = f
        .nics
        .iter()
        .find(|n| f.data_address.is_some_and(|a| n.holds(a)));
    if let Some(n) = chosen
        && !n.up
    {
        problems.push(format!("data NIC {} is down (no carrier)", n.name));
    }
    let dead = f.peer_probes.iter().filter(|p| !p.ok()).count();
    if dead > 0 {
        problems.push(format!(
            "{dead} of {} peer links do not answer",
            f.peer_probes.len()
        ));
    }
    if !f.unhealthy_devices.is_empty() {
        problems.push(format!(
            "devices {:?} report unhealthy",
            f.unhealthy_devices
        ));
    }
    if problems.is_empty() {
        row.with(Outcome::Pass, "data NIC up, peers answer, devices healthy")
    } else {
        row.with(Outcome::Fail, problems.join("; "))
    }
}

/// Rank ↔ device mapping across the assignment, the container and the rank table.
pub fn device_mapping(f: &Facts) -> Finding {
    let row = finding(
        "device-mapping",
        WRONG,
        "ranks mapped to the wrong physical devices",
        "hcomm.io/devices vs ASCEND_VISIBLE_DEVICES vs rank table vs inventory",
    );
    if f.devices.assigned.is_empty()
        && f.devices.visible.is_none()
        && f.devices.rank_table.is_none()
    {
        return row.with(Outcome::Skip, "no member given (pass --pod or --devices)");
    }
    match device_failure(&f.devices) {
        Some(m) => row.with(Outcome::Fail, m),
        None => row.with(Outcome::Pass, "all four agree"),
    }
}

/// NIC speed, NUMA placement and message size.
pub fn throughput(f: &Facts) -> Finding {
    let row = finding(
        "throughput",
        SLOW,
        "slow NIC, NIC on another NUMA node than the comm threads, small messages",
        "data NIC speed and NUMA node, process CPU affinity, message size",
    );
    let Some(nic) = f
        .nics
        .iter()
        .find(|n| f.data_address.is_some_and(|a| n.holds(a)))
    else {
        return row.with(Outcome::Skip, "data NIC unknown");
    };
    let mut warns = Vec::new();
    if let Some(s) = nic.speed_mbps
        && s < 10_000
    {
        warns.push(format!("{} runs at {s} Mbit/s", nic.name));
    }
    if let Some(numa) = nic.numa_node
        && !f.process_numa.is_empty()
        && !f.process_numa.contains(&numa)
    {
        warns.push(format!("{} is on NUMA node {numa} but the comm threads run on {:?}; pin them (numactl -N {numa})", nic.name, f.process_numa));
    }
    if let Some(m) = f.message_bytes
        && m < 256 << 10
    {
        warns.push(format!(
            "messages of {m} B are latency-bound; batch them or use algorithm tree"
        ));
    }
    if warns.is_empty() {
        row.with(
            Outcome::Pass,
            format!(
                "{} speed {} NUMA {}",
                nic.name,
                nic.speed_mbps
                    .map_or("unknown".into(), |s| format!("{s} Mbit/s")),
                nic.numa_node.map_or("unknown".into(), |n| n.to_string())
            ),
        )
    } else {
        row.with(Outcome::Warn, warns.join("; "))
    }
}

/// Communicator churn and descriptor leaks.
pub fn churn(f: &Facts) -> Finding {
    let row = finding(
        "churn",
        LONG,
        "communicators created and destroyed without bound; leaked sockets",
        "agent counters created/destroyed/open, open fds vs limit",
    );
    let mut problems = Vec::new();
    let mut outcome = Outcome::Pass;
    if let Some(c) = f.comm {
        let leaked = c.created.saturating_sub(c.destroyed).saturating_sub(c.open);
        if leaked > 0 {
            outcome = Outcome::Fail;
            problems.push(format!("{leaked} communicators neither destroyed nor open (created {}, destroyed {}, open {})", c.created, c.destroyed, c.open));
        } else if c.open > 4 {
            outcome = Outcome::Warn;
            problems.push(format!("{} communicators open at once", c.open));
        }
    }
    if let (Some(n), Some(lim)) = (f.open_fds, f.fd_limit)
        && n * 10 > lim * 8
    {
        outcome = outcome.max(Outcome::Warn);
        problems.push(format!("{n} of {lim} file descriptors open"));
    }
    if f.comm.is_none() && f.open_fds.is_none() {
        return row.with(Outcome::Skip, "agent counters not reachable (--agent-url)");
    }
    if problems.is_empty() {
        row.with(
            Outcome::Pass,
            format!(
                "counters {:?}, fds {:?}",
                f.comm.unwrap_or_default(),
                f.open_fds
            ),
        )
    } else {
        row.with(outcome, problems.join("; "))
    }
}

/// Weights and rank-table epoch of a new member.
pub fn new_member(f: &Facts) -> Finding {
    let row = finding(
        "new-member",
        NEW,
        "weights not synced; stale rank table (topology) epoch",
        "hcomm.io/weights-synced, pod epoch vs rank table epoch vs group epoch",
    );
    let mut problems = Vec::new();
    if f.weights_synced == Some(false) {
        problems.push("weights are not synced (hcomm.io/weights-synced is not True)".to_owned());
    }
    if let Some(rt) = f.rank_table_epoch {
        if let Some(g) = f.group_epoch
            && rt < g
        {
            problems.push(format!(
                "rank table is at epoch {rt} but the group is at {g}"
            ));
        }
        if let Some(p) = f.pod_epoch
            && p > rt
        {
            problems.push(format!(
                "the member was planned at epoch {p} but the rank table is at {rt}"
            ));
        }
    }
    if problems.is_empty() {
        if f.weights_synced.is_none() && f.rank_table_epoch.is_none() {
            return row.with(Outcome::Skip, "no member given");
        }
        row.with(Outcome::Pass, "weights synced; rank table current")
    } else {
        row.with(Outcome::Fail, problems.join("; "))
    }
}

/// The member Pod's hcomm conditions as the API server has them: which lifecycle step
/// failed (with the agent's reason and message) or has not happened yet.
pub fn member_conditions(f: &Facts) -> Finding {
    const CHECKED: &str = "hcomm.io/verified, weights-synced, joined, member-ready";
    let cause = "verification, weight sync or join failed; member not let in yet";
    let row = finding(
        "member-conditions",
        NEW,
        cause,
        format!("{CHECKED} on the member Pod (API server)"),
    );
    let m = match &f.cluster {
        ClusterRead::NotAsked => return row.with(Outcome::Skip, "no member given (--pod)"),
        ClusterRead::Unreachable(why) => {
            return row.with(
                Outcome::Warn,
                format!("API server unreachable, cluster state not checked: {why}"),
            );
        }
        ClusterRead::Read(m) => m,
    };
    let Some(pod) = &m.pod else {
        return row.with(
            Outcome::Skip,
            "no member Pod given (--pod); group read only",
        );
    };
    if !m.pod_found {
        return row.with(Outcome::Fail, format!("Pod {pod} not found"));
    }
    let row = finding(
        "member-conditions",
        NEW,
        cause,
        format!("{CHECKED} on {pod}"),
    );
    let failed: Vec<String> = m
        .conditions
        .iter()
        .filter(|c| c.status == "False")
        .map(|c| {
            let mut text = format!("{}=False", c.type_);
            if !c.reason.is_empty() {
                text.push_str(&format!(" ({})", c.reason));
            }
            if !c.message.is_empty() {
                text.push_str(&format!(": {}", c.message));
            }
            text
        })
        .collect();
    let unset: Vec<&str> = super::cluster::MEMBER_CONDITIONS
        .iter()
        .copied()
        .filter(|t| {
            !m.conditions
                .iter()
                .any(|c| c.type_ == *t && c.status != "Unknown")
        })
        .collect();
    if !failed.is_empty() {
        return row.with(Outcome::Fail, failed.join("; "));
    }
    if !unset.is_empty() {
        return row.with(
            Outcome::Warn,
            format!("not yet set by the agent: {}", unset.join(", ")),
        );
    }
    row.with(Outcome::Pass, "verified, weights synced, joined, ready")
}

/// Keywords in the logs.
pub fn logs(f: &Facts) -> Finding {
    let row = finding(
        "logs",
        HANG,
        "errors the runtime logged",
        "HCCL/agent logs for timeout, connect fail, link down",
    );
    if f.log_matches.is_empty() {
        return row.with(Outcome::Pass, "no matches");
    }
    let mut kinds: Vec<&str> = f.log_matches.iter().map(|m| m.keyword).collect();
    kinds.sort_unstable();
    kinds.dedup();
    row.with(
        Outcome::Warn,
        format!(
            "{} matching lines ({}); see below",
            f.log_matches.len(),
            kinds.join(", ")
        ),
    )
}

/// Every check, in table order.
pub fn run_all(f: &Facts) -> Vec<Finding> {
    vec![
        nic_choice(f),
        peer_reachability(f),
        port_range(f),
        link_or_device_down(f),
        device_mapping(f),
        throughput(f),
        churn(f),
        new_member(f),
        member_conditions(f),
        logs(f),
    ]
}

#[cfg(test)]
mod tests {
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
        use hcomm_crds::contract::{
            POD_JOINED, POD_MEMBER_READY, POD_VERIFIED, POD_WEIGHTS_SYNCED,
        };
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
}
