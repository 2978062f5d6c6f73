//! Verification I/O: gathers the facts [`crate::nic::verify::decide`] judges — the chosen
//! data NIC, link probes to every peer (and, concurrently, through the other local
//! interfaces, so the message can say which would work), device facts, `/dev/shm` (an
//! `hccl` group's versions are [`super::versions_check`]'s). Everything runs under one deadline: the group's
//! connect timeout. Beside it, for a member whose rank-table devices carry `device_ip`s,
//! the NPU network check ([`crate::ascend::hccn::check`]) runs concurrently.

use std::net::SocketAddr;
use std::time::Duration;

use super::ranktable::{ControlPlan, RankTable};
use super::ranktable_members::MemberAddresses;
use super::spec::MemberSpec;
use crate::ascend::hccn::check::{MemberNpus, check};
use crate::ascend::hccn::live::HccnNetwork;
use crate::ascend::hccn::port::NpuNetwork;
use crate::config::Context;
use crate::nic::probe::{ProbeTarget, probe_all};
use crate::nic::select::alternatives;
use crate::nic::verify::{DeviceFacts, Verdict, VerifyFacts, decide};
use crate::nic::{Chosen, IfnameMatcher, NicRule, select_data_nic};
use hcomm_crds::contract::PodReason;

/// At most this many other interfaces are probed for the hint.
pub const MAX_ALTERNATIVES: usize = 3;

/// Told the data NIC's verdict as soon as it passed, with the interface and plan, while the
/// NPU network check still runs (what [`super::prefetch`] starts a sync on).
pub type NicPassed = tokio::sync::oneshot::Sender<(Chosen, ControlPlan)>;

/// A verification's outcome and, on success, what the next stages use.
pub struct Verified {
    pub verdict: Verdict,
    pub chosen: Option<Chosen>,
    pub plan: Option<ControlPlan>,
}

fn fail(reason: PodReason, message: String) -> Verified {
    Verified {
        verdict: Verdict {
            ok: false,
            reason,
            message,
        },
        chosen: None,
        plan: None,
    }
}

/// What a verification checks the member against: the rank table and the group as the
/// member read them just before (so the verification need not read them again).
#[derive(Debug, Clone, Copy)]
pub struct Against<'a> {
    pub table: &'a RankTable,
    /// The table ConfigMap's `resourceVersion` ([`super::group::PublishedTable::revision`]).
    pub table_revision: Option<&'a str>,
    /// The group's UID, which names its secret.
    pub group_uid: &'a str,
}

/// Verifies a member against its group's rank table: the data NIC and the node's facts,
/// and the NPU network through this node's `hccn_tool`.
pub async fn verify(
    ctx: &Context,
    spec: &MemberSpec,
    socket_ifname: Option<&str>,
    connect_timeout: Duration,
    against: Against<'_>,
    nic_passed: Option<NicPassed>,
) -> Verified {
    let table = against.table;
    let timeout = ctx
        .cfg
        .verify_timeout_cap
        .map_or(connect_timeout, |c| c.min(connect_timeout));
    let npu = HccnNetwork::new(ctx).with_group(&spec.namespace, &spec.group);
    let data_ip = ctx.cfg.data_address.map(|a| a.to_string());
    let nic = verify_nic(ctx, spec, socket_ifname, connect_timeout, against);
    let site = NpuSite {
        node: &ctx.cfg.node_name,
        data_ip: data_ip.as_deref(),
        table,
        budget: timeout,
    };
    with_npu_check(nic, &npu, spec, site, nic_passed).await
}

/// Where the NPU check runs: the node, its data address (to find its server when the
/// table names it by address), the table and the time it has.
pub struct NpuSite<'a> {
    pub node: &'a str,
    pub data_ip: Option<&'a str>,
    pub table: &'a RankTable,
    pub budget: Duration,
}

/// Runs `nic` and, when the table gives the member's devices `device_ip`s, the NPU network
/// check beside it; a failure of either fails the verification (the NIC's reason first),
/// with both messages. `nic_passed` is told when `nic` passed while the NPU check may
/// still run (without an NPU check the verdict itself comes as soon).
pub async fn with_npu_check(
    nic: impl std::future::Future<Output = Verified>,
    npu: &dyn NpuNetwork,
    spec: &MemberSpec,
    site: NpuSite<'_>,
    nic_passed: Option<NicPassed>,
) -> Verified {
    let devices = spec.devices.clone().unwrap_or_default();
    let Some(member) = MemberNpus::from_table(site.table, site.node, site.data_ip, &devices) else {
        return nic.await;
    };
    let nic = async {
        let v = nic.await;
        if let (true, Some(chosen), Some(plan), Some(tell)) =
            (v.verdict.ok, &v.chosen, &v.plan, nic_passed)
        {
            let _ = tell.send((chosen.clone(), plan.clone()));
        }
        v
    };
    let (mut v, n) = futures::join!(nic, check(npu, &member, site.budget));
    if !n.ok {
        if v.verdict.ok {
            v.verdict = n;
        } else {
            v.verdict.message = format!("{} | {}", v.verdict.message, n.message);
        }
        v.chosen = None;
        v.plan = None;
    } else if v.verdict.ok {
        v.verdict.message = format!("{}; {}", v.verdict.message, n.message);
    }
    v
}

/// The inventory with its interfaces observed now. The cached inventory is refreshed every
/// `--inventory-interval` (60 s): a member placed on a node whose data link came back
/// moments ago would otherwise be refused `NoDataNic` on the old word, replaced, placed
/// there again and refused again until the next refresh. The fresh list also updates the
/// cache; when `ip` cannot be run the cached list stands.
async fn current_nics(ctx: &Context) -> crate::inventory::Inventory {
    let begun = std::time::Instant::now();
    let nics = crate::inventory::nics::collect(&ctx.cfg.sources.sysfs_net).await;
    tracing::debug!(took = ?begun.elapsed(), "interfaces read");
    let mut cached = ctx.inventory.write().await;
    if !nics.is_empty() {
        cached.nics = nics;
    }
    cached.clone()
}

/// The node's interfaces and the addresses of the group's member nodes, read at once (both
/// are API or system reads on the joiner's path); the members are used only once the table
/// passed its own checks.
async fn interfaces_and_members(
    ctx: &Context,
    spec: &MemberSpec,
    against: Against<'_>,
) -> (
    crate::inventory::Inventory,
    crate::error::Result<MemberAddresses>,
) {
    let begun = std::time::Instant::now();
    let read = futures::join!(
        current_nics(ctx),
        super::ranktable_members::fetch(
            &ctx.client,
            &spec.namespace,
            &spec.group,
            against.table_revision
        )
    );
    tracing::debug!(took = ?begun.elapsed(), "interfaces and the table's members read");
    read
}

/// The data NIC the member's traffic takes, by the group's or the node's rule.
fn choose_nic(
    ctx: &Context,
    inv: &crate::inventory::Inventory,
    socket_ifname: Option<&str>,
) -> Result<Chosen, String> {
    let matcher = socket_ifname
        .map(IfnameMatcher::parse)
        .transpose()
        .map_err(|e| e.to_string())?;
    let rule = NicRule {
        socket_ifname: matcher,
        data_address: ctx.cfg.data_address,
        management: ctx.cfg.management_interface.clone(),
    };
    select_data_nic(&inv.nics, &rule).map_err(|e| e.to_string())
}

/// What a weight sync begun before the member's own rank table starts on
/// ([`super::early_sync`]): the data NIC and the servers of the table the member can
/// already read (the serving members of the epoch before its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlySources {
    pub chosen: Chosen,
    pub peers: Vec<(String, String)>,
}

/// The data NIC and `against`'s servers once they passed the checks anything dialled from a
/// table passes — static address and port rules, and every server a node running one of
/// the group's members ([`super::ranktable_members::check_table`]). Nothing is probed:
/// the sync's own connections carry deadlines, and a sync that fails here is dropped
/// without consequence for the member.
pub async fn early_sources(
    ctx: &Context,
    spec: &MemberSpec,
    socket_ifname: Option<&str>,
    against: Against<'_>,
) -> Result<EarlySources, String> {
    let (inv, members) = interfaces_and_members(ctx, spec, against).await;
    let chosen = choose_nic(ctx, &inv, socket_ifname)?;
    let members = members.map_err(|e| {
        let e = super::ranktable::PeerRefusal::MembersUnknown(e.to_string());
        format!("rank table: {e}")
    })?;
    let rules = super::ranktable_members::PeerRules::from_config(&ctx.cfg);
    super::ranktable_members::check_table(against.table, &members, &rules)
        .map_err(|e| format!("rank table: {e}"))?;
    let ip = chosen.ip.to_string();
    let peers = super::ranktable::sources(against.table, &ctx.cfg.node_name, Some(&ip));
    if peers.is_empty() {
        return Err("the rank table names no other server".into());
    }
    Ok(EarlySources { chosen, peers })
}

async fn verify_nic(
    ctx: &Context,
    spec: &MemberSpec,
    socket_ifname: Option<&str>,
    connect_timeout: Duration,
    against: Against<'_>,
) -> Verified {
    let table = against.table;
    let begun = std::time::Instant::now();
    let (inv, members) = interfaces_and_members(ctx, spec, against).await;
    let chosen = match choose_nic(ctx, &inv, socket_ifname) {
        Ok(c) => c,
        Err(e) => return fail(PodReason::NoDataNic, e),
    };
    let Some(devices) = spec.devices.clone() else {
        return fail(
            PodReason::DeviceMismatch,
            "the pod has no valid hcomm.io/devices annotation".into(),
        );
    };
    let plan = match super::ranktable::plan(
        table,
        &ctx.cfg.node_name,
        Some(&chosen.ip.to_string()),
        &devices,
        ctx.cfg.comm_port_base,
    ) {
        Ok(p) => p,
        Err(e) => return fail(PodReason::DeviceMismatch, format!("rank table: {e}")),
    };
    // Nothing is dialled before every address and port the table yields is checked, and
    // every server is a node running one of the group's members.
    let members = match members {
        Ok(m) => m,
        Err(e) => {
            let e = super::ranktable::PeerRefusal::MembersUnknown(e.to_string());
            return fail(
                super::ranktable::PeerRefusal::REASON,
                format!("rank table: {e}"),
            );
        }
    };
    let rules = super::ranktable_members::PeerRules::from_config(&ctx.cfg);
    if let Err(e) = super::ranktable_members::check_table(table, &members, &rules) {
        return fail(
            super::ranktable::PeerRefusal::REASON,
            format!("rank table: {e}"),
        );
    }
    let targets: Vec<ProbeTarget> = plan
        .peers
        .iter()
        .filter_map(|(name, ip)| {
            Some(ProbeTarget {
                name: name.clone(),
                addr: SocketAddr::new(ip.parse().ok()?, ctx.cfg.probe_port),
            })
        })
        .collect();
    let timeout = ctx
        .cfg
        .verify_timeout_cap
        .map_or(connect_timeout, |c| c.min(connect_timeout));
    let secret = ctx.cfg.probe_secret.clone();
    let alts: Vec<(String, std::net::IpAddr)> =
        alternatives(&inv.nics, &chosen.name, MAX_ALTERNATIVES)
            .into_iter()
            .filter_map(|n| Some((n.name.clone(), n.primary_ip()?)))
            .collect();
    // Primary and alternative probes run together, so a failed check takes one timeout.
    // The alternatives only explain a failure: when every primary probe succeeds they are
    // not waited for (an interface that cannot reach the data network at all — a
    // management NIC — would otherwise cost a whole timeout on every verification).
    let (probes, others) = {
        let mut primary = std::pin::pin!(probe_all(
            &chosen.name,
            chosen.ip,
            &targets,
            &secret,
            timeout
        ));
        let mut others = std::pin::pin!(futures::future::join_all(
            alts.iter()
                .map(|(name, ip)| probe_all(name, *ip, &targets, &secret, timeout)),
        ));
        let mut others_done = None;
        let probes = loop {
            tokio::select! {
                p = &mut primary => break p,
                o = &mut others, if others_done.is_none() => others_done = Some(o),
            }
        };
        let others = match others_done {
            Some(o) => o,
            None if probes.iter().all(|p| p.ok()) => Vec::new(),
            None => others.await,
        };
        (probes, others)
    };
    tracing::debug!(took = ?begun.elapsed(), "peers probed");
    let failed: Vec<&str> = probes
        .iter()
        .filter(|p| !p.ok())
        .map(|p| p.target.name.as_str())
        .collect();
    let alternatives = others
        .into_iter()
        .flatten()
        .filter(|p| failed.contains(&p.target.name.as_str()))
        .collect();
    let facts = VerifyFacts {
        interface: chosen.name.clone(),
        probes,
        alternatives,
        devices: DeviceFacts {
            assigned: devices,
            // ASCEND_VISIBLE_DEVICES only means something on Ascend nodes.
            visible: if ctx.cfg.sources.cpu_devices.is_some() {
                None
            } else {
                spec.visible_devices.clone()
            },
            inventory: inv.devices.iter().map(|d| d.id).collect(),
            rank_table: Some(plan.devices_in_rank_order.clone()),
        },
        shm_bytes: inv.shm_bytes,
        shm_required: ctx.cfg.shm_min_bytes,
    };
    Verified {
        verdict: decide(&facts),
        chosen: Some(chosen),
        plan: Some(plan),
    }
}
