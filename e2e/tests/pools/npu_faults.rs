//! The NPU network's faults under load (issue 15): a device's address missing from
//! hccn.conf, two devices with one address, an NPU link down, TLS switched on where the
//! group has it off, an NPU port that answers no ping. One scenario each, all through
//! [`a_joiner_on_a_faulty_npu_is_refused_and_the_pool_recovers`]: the joiner whose NPU is
//! faulty is refused with the fault's own `PodReason` and a Warning Event within the
//! group's connect deadline, the serving members keep serving, and once the fault is
//! cleared the pool reaches its size.
//!
//! Where the joiner lands is made certain, not predicted: decode is scaled to
//! [`FILLED`] members, which with prefill's two leaves exactly one free NPU on the
//! testbed, and the fault is put on that NPU. The replacement the operator makes for the
//! refused joiner has nowhere else to go either, so recovery is the product's own: the
//! fault is cleared as soon as the refusal is seen, and the next member there verifies.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::PodReason;
use hcomm_e2e::hosts::LinkState;
use hcomm_e2e::hosts::hccn_sim::root::DeviceFault;
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, Testbed};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

use crate::check;

/// Decode members that, with prefill's two (one NPU each), leave one NPU of the ten free.
const FILLED: usize = 7;
/// What the joiner's refusal may take beyond the connect deadline: the Pod's scheduling,
/// the device plugin's admission, the rank table's publication and the agent picking the
/// member up. The verification itself is bounded by the connect deadline.
const PLACEMENT_MARGIN: Duration = Duration::from_secs(10);
/// How long the pool may take to grow back once a fault is cleared: the refused member's
/// replacements kept failing while the fault lasted, so the operator's failure backoff
/// (which starts over once a later member serves, not carrying earlier scenarios' failures)
/// delays the next one by up to a minute; it then joins within a pool's usual wait.
const RECOVERY_WAIT: Duration = Duration::from_secs(60 + POOL_WAIT.as_secs());

/// One fault of the NPU network, as the testbed injects it on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NpuFault {
    /// `address_N` leaves the host's hccn.conf (the driver still knows the address).
    IpMissing,
    /// The host's other device is configured with this device's address.
    IpDuplicate,
    /// The device's port loses carrier.
    LinkDown,
    /// The device's TLS switch is on; the group's other devices have it off.
    TlsOn,
    /// The port keeps carrier but is off the NPU fabric: every ping from it fails.
    PingBlackholed,
}

impl NpuFault {
    /// The reason the joiner must be refused with.
    fn reason(self) -> PodReason {
        match self {
            NpuFault::IpMissing => PodReason::NpuIpMissing,
            NpuFault::IpDuplicate => PodReason::NpuIpDuplicate,
            NpuFault::LinkDown => PodReason::NpuLinkDown,
            NpuFault::TlsOn => PodReason::NpuTlsMismatch,
            NpuFault::PingBlackholed => PodReason::NpuPingFailed,
        }
    }

    fn inject(self, bed: &Testbed, host: usize, device: u32) -> Result<()> {
        let root = bed.ascend_root(host);
        match self {
            NpuFault::IpMissing => root.remove_device_ip(device)?,
            NpuFault::IpDuplicate => {
                let other = bed
                    .hosts()
                    .host(host)?
                    .npus()
                    .iter()
                    .map(|d| d.id)
                    .find(|id| *id != device)
                    .context("the host has a second NPU to give the address to")?;
                root.duplicate_device_ip(other, device)?;
            }
            NpuFault::LinkDown => bed.hosts().set_npu_link(host, device, LinkState::Down)?,
            NpuFault::TlsOn => root.set_fault(
                device,
                DeviceFault {
                    tls: true,
                    ..DeviceFault::default()
                },
            )?,
            NpuFault::PingBlackholed => {
                bed.hosts()
                    .set_npu_link(host, device, LinkState::Blackholed)?
            }
        }
        Ok(())
    }

    /// Undoes [`NpuFault::inject`]: hccn.conf as the fabric was built, no simulator
    /// fault, the port on the fabric with carrier.
    fn clear(self, bed: &Testbed, host: usize, device: u32) -> Result<()> {
        let root = bed.ascend_root(host);
        match self {
            NpuFault::IpMissing | NpuFault::IpDuplicate => {
                root.write_conf(&bed.hosts().hccn_conf(host)?)?
            }
            NpuFault::TlsOn => root.set_fault(device, DeviceFault::default())?,
            NpuFault::LinkDown | NpuFault::PingBlackholed => {
                bed.hosts().set_npu_link(host, device, LinkState::Up)?
            }
        }
        Ok(())
    }
}

/// Device IP missing from hccn.conf → `NpuIpMissing`.
pub async fn a_joiner_whose_npu_has_no_address_in_hccn_conf_is_refused(
    pools: &mut ExamplePools,
) -> Result<()> {
    a_joiner_on_a_faulty_npu_is_refused_and_the_pool_recovers(pools, NpuFault::IpMissing).await
}

/// Two devices of the joiner's node with one address → `NpuIpDuplicate`.
pub async fn a_joiner_whose_node_has_two_npus_with_one_address_is_refused(
    pools: &mut ExamplePools,
) -> Result<()> {
    a_joiner_on_a_faulty_npu_is_refused_and_the_pool_recovers(pools, NpuFault::IpDuplicate).await
}

/// The joiner's NPU link down → `NpuLinkDown`.
pub async fn a_joiner_whose_npu_link_is_down_is_refused(pools: &mut ExamplePools) -> Result<()> {
    a_joiner_on_a_faulty_npu_is_refused_and_the_pool_recovers(pools, NpuFault::LinkDown).await
}

/// TLS on for the joiner's NPU, off for the group's → `NpuTlsMismatch`.
pub async fn a_joiner_whose_npu_tls_differs_from_the_group_is_refused(
    pools: &mut ExamplePools,
) -> Result<()> {
    a_joiner_on_a_faulty_npu_is_refused_and_the_pool_recovers(pools, NpuFault::TlsOn).await
}

/// The joiner's NPU reaches no peer NPU → `NpuPingFailed`.
pub async fn a_joiner_whose_npu_pings_fail_is_refused(pools: &mut ExamplePools) -> Result<()> {
    a_joiner_on_a_faulty_npu_is_refused_and_the_pool_recovers(pools, NpuFault::PingBlackholed).await
}

/// Decode at [`FILLED`], `fault` on the one free NPU, scale to `FILLED + 1`: the joiner
/// is refused with the fault's reason (condition and Warning Event) within the connect
/// deadline, no request fails; the fault is cleared and decode reaches `FILLED + 1`
/// Ready, a member on the faulty NPU's host. Decode goes back to the size it had.
///
/// Precondition: prefill at 2 members of one NPU, decode Ready (any size).
async fn a_joiner_on_a_faulty_npu_is_refused_and_the_pool_recovers(
    pools: &mut ExamplePools,
    fault: NpuFault,
) -> Result<()> {
    let found = pools.bed.members(NS, "decode").await?.len();
    let before = pools.decode_at(FILLED).await?;
    let (bed, timeline) = (&pools.bed, &pools.timeline);
    let connect = connect_timeout(bed, "decode").await?;
    let (host, device) = the_only_free_npu(bed).await?;
    let node = format!("host-{host}");
    fault.inject(bed, host, device)?;
    let injected = Instant::now();
    bed.scale("decode", (FILLED + 1) as u32)?;

    // The joiner (on the only free NPU) is refused, its reason first in the condition.
    // The bound is on the joiner's own time (created → refused); the joiner itself may
    // come late, as the operator spaces new members after recent failures (backoff.rs).
    let bound = connect + PLACEMENT_MARGIN;
    let wait_until = injected + POOL_WAIT;
    let (joiner, marks, refused_at) = loop {
        let refused = timeline.members().into_iter().find(|(name, m)| {
            m.group == "decode"
                && m.refused.is_some()
                && !before.iter().any(|b| &b.name == name)
                && m.created.is_some_and(|c| timeline.origin() + c >= injected)
        });
        if let Some((name, m)) = refused {
            break (name, m, timeline.offset(Instant::now()));
        }
        ensure!(
            Instant::now() < wait_until,
            "{fault:?}: no decode joiner refused {:?} after the scale-out",
            injected.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Cleared at once, so the operator's replacement (which can only go there) verifies.
    fault.clear(bed, host, device)?;
    let took = refused_at.saturating_sub(marks.created.unwrap_or_default());
    let message = marks.refused.clone().unwrap_or_default();
    eprintln!(
        "npu fault {fault:?} on {node} device {device}: {joiner} refused {took:?} after it was created (bound {bound:?}): {message}"
    );
    ensure!(
        marks.node == node,
        "{fault:?}: the joiner {joiner} ran on {} but the only free NPU is on {node}",
        marks.node
    );
    let reason = fault.reason();
    ensure!(
        message.starts_with(&format!("{}:", reason.as_str())),
        "{fault:?}: {joiner} should be refused with {reason}: {message:?}"
    );
    ensure!(
        took <= bound,
        "{fault:?}: {joiner} was refused {took:?} after it was created, past the connect deadline {connect:?} + {PLACEMENT_MARGIN:?}"
    );
    check::verification_warning(bed, &joiner, reason).await?;
    check::clean(
        &pools.decode_load.latest(),
        &format!("decode while a joiner met {fault:?}"),
    )?;

    // Cleared: the pool reaches its size, a member on the once-faulty NPU's host.
    let t = Instant::now();
    let grown = bed
        .wait_pool_ready(NS, "decode", FILLED + 1, RECOVERY_WAIT)
        .await?;
    ensure!(
        grown.iter().any(|m| m.node == node),
        "{fault:?}: no member on {node} after the fault was cleared: {grown:?}"
    );
    let refused: Vec<String> = timeline
        .members()
        .into_iter()
        .filter(|(_, m)| {
            m.group == "decode"
                && m.refused.is_some()
                && m.created.is_some_and(|c| timeline.origin() + c >= injected)
        })
        .map(|(name, _)| name)
        .collect();
    let how = if grown.iter().any(|m| m.name == joiner) {
        "the refused member re-verified"
    } else {
        "the operator replaced the refused member"
    };
    eprintln!(
        "npu fault {fault:?}: decode at {} Ready {:?} after the fault was cleared ({how}); refused members {refused:?}; {} Warning Event(s) on {joiner}",
        FILLED + 1,
        t.elapsed(),
        warnings_on(bed, &joiner).await?
    );
    pools
        .decode_load
        .wait_served(&grown, 1, Duration::from_secs(30))
        .await?;
    check::clean(
        &pools.decode_load.latest(),
        &format!("decode after {fault:?} was cleared"),
    )?;

    // As found: decode's size, no fault left on the host.
    pools.decode_at(found).await?;
    let root = pools.bed.ascend_root(host);
    ensure!(
        root.faults() == Default::default()
            && root.read_conf()? == pools.bed.hosts().hccn_conf(host)?,
        "{fault:?}: {node}'s Ascend files not restored"
    );
    Ok(())
}

/// The group's `comm.connectTimeoutSeconds`: the verification's deadline.
async fn connect_timeout(bed: &Testbed, group: &str) -> Result<Duration> {
    let groups: Api<HcommGroup> = Api::namespaced(bed.client().await?, NS);
    let secs = groups.get(group).await?.spec.comm.connect_timeout_seconds;
    Ok(Duration::from_secs(u64::try_from(secs)?))
}

/// The one NPU no Pod holds (host index, device id), once the device plugin's
/// allocations show exactly one (a drained member's Pod may take a moment to go).
async fn the_only_free_npu(bed: &Testbed) -> Result<(usize, u32)> {
    let plugin = bed.device_plugin().context("the testbed has NPUs")?;
    let deadline = Instant::now() + POOL_WAIT;
    loop {
        let mut free = Vec::new();
        for h in bed.hosts().hosts() {
            let taken: Vec<u32> = plugin
                .allocations(h.name())
                .iter()
                .flat_map(|a| a.devices())
                .collect();
            free.extend(
                (0..plugin.devices_of(h.name()))
                    .filter(|d| !taken.contains(d))
                    .map(|d| (h.index(), d)),
            );
        }
        if let [only] = free[..] {
            return Ok(only);
        }
        ensure!(
            Instant::now() < deadline,
            "with decode at {FILLED} exactly one NPU should be free: {free:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many Warning Events `pod` got (a repeated Event counts each time).
async fn warnings_on(bed: &Testbed, pod: &str) -> Result<i32> {
    let events: Api<Event> = Api::namespaced(bed.client().await?, NS);
    Ok(events
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await?
        .items
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            e.series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1)
        })
        .sum())
}
