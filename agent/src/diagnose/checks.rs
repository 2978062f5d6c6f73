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
        super::allocation::check(f),
        logs(f),
    ]
}

#[cfg(test)]
mod tests;
