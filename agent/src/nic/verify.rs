//! The verification verdict (pure): given the probe outcomes, the device facts and the
//! shared-memory size, decide `hcomm.io/verified` with a reason and a
//! message that says what to fix. The I/O that gathers these facts is in
//! [`crate::member::verify`].

use hcomm_crds::contract::PodReason;

use super::probe::ProbeOutcome;

/// What the member's devices look like from every side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    /// `hcomm.io/devices` (the operator's assignment), in local-rank order.
    pub assigned: Vec<i32>,
    /// `ASCEND_VISIBLE_DEVICES` of the worker container, when set.
    pub visible: Option<Vec<i32>>,
    /// Device ids the node's inventory holds.
    pub inventory: Vec<i32>,
    /// The device ids the rank table gives this member, in rank order.
    pub rank_table: Option<Vec<i32>>,
}

/// Everything the verdict looks at.
#[derive(Debug, Clone, Default)]
pub struct VerifyFacts {
    pub interface: String,
    pub probes: Vec<ProbeOutcome>,
    /// Probes of the unreachable peers through other local interfaces.
    pub alternatives: Vec<ProbeOutcome>,
    pub devices: DeviceFacts,
    pub shm_bytes: Option<u64>,
    pub shm_required: u64,
}

/// The outcome of verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub ok: bool,
    pub reason: PodReason,
    pub message: String,
}

impl Verdict {
    /// Every check passed.
    pub fn verified(message: String) -> Verdict {
        Verdict {
            ok: true,
            reason: PodReason::Verified,
            message,
        }
    }

    /// The refusal from `checks` (each check's reason and, when it failed, what to fix),
    /// or None when none failed. The reason is the first failing check's, in the order
    /// given; the message holds every failing check's, joined by ` | `, so one pass names
    /// everything to fix. Shared by the NIC and the NPU network verdicts.
    pub fn refused(
        checks: impl IntoIterator<Item = (PodReason, Option<String>)>,
    ) -> Option<Verdict> {
        let failures: Vec<(PodReason, String)> = checks
            .into_iter()
            .filter_map(|(r, m)| Some((r, m?)))
            .collect();
        let &(reason, _) = failures.first()?;
        Some(Verdict {
            ok: false,
            reason,
            message: failures
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join(" | "),
        })
    }
}

/// Parses a comma-separated device list (`hcomm.io/devices`, `ASCEND_VISIBLE_DEVICES`).
pub fn parse_device_list(s: &str) -> Option<Vec<i32>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().ok())
        .collect()
}

fn nic_failure(f: &VerifyFacts) -> Option<String> {
    let bad: Vec<&ProbeOutcome> = f.probes.iter().filter(|p| !p.ok()).collect();
    if bad.is_empty() {
        return None;
    }
    let peers = bad
        .iter()
        .map(|p| {
            format!(
                "{} ({}): {}",
                p.target.name,
                p.target.addr,
                p.error.as_deref().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut hint = Vec::new();
    let mut ifaces: Vec<&str> = f
        .alternatives
        .iter()
        .map(|p| p.interface.as_str())
        .collect();
    ifaces.sort_unstable();
    ifaces.dedup();
    for iface in &ifaces {
        let reached: Vec<&str> = f
            .alternatives
            .iter()
            .filter(|p| p.interface == *iface && p.ok())
            .map(|p| p.target.name.as_str())
            .collect();
        if !reached.is_empty() {
            hint.push(format!("{iface} reaches {}", reached.join(", ")));
        }
    }
    let hint = if hint.is_empty() {
        if ifaces.is_empty() {
            "no other local interface to try".to_owned()
        } else {
            format!(
                "no other local interface reaches them (tried {})",
                ifaces.join(", ")
            )
        }
    } else {
        format!(
            "{}; set spec.comm.socketIfname accordingly",
            hint.join("; ")
        )
    };
    Some(format!(
        "data interface {} cannot reach {} of {} peers: {peers}; {hint}",
        f.interface,
        bad.len(),
        f.probes.len()
    ))
}

pub(crate) fn device_failure(d: &DeviceFacts) -> Option<String> {
    let mut problems = Vec::new();
    if d.assigned.is_empty() {
        problems.push("the pod has no hcomm.io/devices assignment".to_owned());
    }
    let missing: Vec<String> = d
        .assigned
        .iter()
        .filter(|id| !d.inventory.contains(id))
        .map(ToString::to_string)
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "assigned devices [{}] are not on this node (node has [{}])",
            missing.join(","),
            join(&d.inventory)
        ));
    }
    if let Some(v) = &d.visible
        && v != &d.assigned
    {
        problems.push(format!(
            "ASCEND_VISIBLE_DEVICES={} but hcomm.io/devices={} (ranks would drive the wrong devices)",
            join(v),
            join(&d.assigned)
        ));
    }
    if let Some(rt) = &d.rank_table
        && rt != &d.assigned
    {
        problems.push(format!(
            "the rank table maps this member's ranks to devices [{}] but hcomm.io/devices={}",
            join(rt),
            join(&d.assigned)
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn join(v: &[i32]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn shm_failure(f: &VerifyFacts) -> Option<String> {
    match f.shm_bytes {
        Some(have) if have < f.shm_required => Some(format!(
            "/dev/shm is {} MiB, the group needs {} MiB",
            have >> 20,
            f.shm_required >> 20
        )),
        _ => None,
    }
}

/// Decides. Every failing check is in the message; the reason is the first of
/// NicUnreachable, DeviceMismatch, ShmTooSmall. (Versions are
/// [`crate::member::versions_check`]'s, for `hccl` groups.)
pub fn decide(f: &VerifyFacts) -> Verdict {
    Verdict::refused([
        (PodReason::NicUnreachable, nic_failure(f)),
        (PodReason::DeviceMismatch, device_failure(&f.devices)),
        (PodReason::ShmTooSmall, shm_failure(f)),
    ])
    .unwrap_or_else(|| {
        Verdict::verified(format!(
            "data interface {} reaches all {} peers; devices {} match; /dev/shm ok",
            f.interface,
            f.probes.len(),
            join(&f.devices.assigned)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::probe::ProbeTarget;
    use std::time::Duration;

    fn outcome(iface: &str, peer: &str, addr: &str, ok: bool) -> ProbeOutcome {
        ProbeOutcome {
            target: ProbeTarget {
                name: peer.into(),
                addr: addr.parse().unwrap(),
            },
            interface: iface.into(),
            rtt: ok.then(|| Duration::from_micros(80)),
            error: (!ok).then(|| "connect: No route to host".to_owned()),
        }
    }

    fn healthy() -> VerifyFacts {
        VerifyFacts {
            interface: "data0".into(),
            probes: vec![
                outcome("data0", "host-1", "198.18.0.11:29499", true),
                outcome("data0", "host-2", "198.18.0.12:29499", true),
            ],
            devices: DeviceFacts {
                assigned: vec![0, 1],
                visible: Some(vec![0, 1]),
                inventory: vec![0, 1, 2, 3],
                rank_table: Some(vec![0, 1]),
            },
            shm_bytes: Some(1 << 30),
            shm_required: 64 << 20,
            ..Default::default()
        }
    }

    #[test]
    fn all_checks_passing_is_verified() {
        let v = decide(&healthy());
        assert!(v.ok, "{v:?}");
        assert_eq!(v.reason, PodReason::Verified);
    }

    #[test]
    fn an_unreachable_peer_names_interface_peer_address_error_and_the_interface_that_works() {
        let mut f = healthy();
        f.interface = "mgmt0".into();
        f.probes[1] = outcome("mgmt0", "host-2", "198.18.0.12:29499", false);
        f.alternatives = vec![outcome("data0", "host-2", "198.18.0.12:29499", true)];
        let v = decide(&f);
        assert!(!v.ok);
        assert_eq!(v.reason, PodReason::NicUnreachable);
        for part in [
            "mgmt0",
            "host-2",
            "198.18.0.12:29499",
            "No route",
            "data0 reaches host-2",
            "1 of 2",
        ] {
            assert!(v.message.contains(part), "{part} missing in {}", v.message);
        }
    }

    #[test]
    fn when_no_other_interface_helps_the_message_says_so() {
        let mut f = healthy();
        f.probes[0] = outcome("data0", "host-1", "198.18.0.11:29499", false);
        f.alternatives = vec![outcome("mgmt0", "host-1", "198.18.0.11:29499", false)];
        let v = decide(&f);
        assert!(
            v.message
                .contains("no other local interface reaches them (tried mgmt0)"),
            "{}",
            v.message
        );
    }

    #[test]
    fn visible_devices_differing_from_the_assignment_is_a_device_mismatch() {
        let mut f = healthy();
        f.devices.visible = Some(vec![1, 0]);
        let v = decide(&f);
        assert_eq!(v.reason, PodReason::DeviceMismatch);
        assert!(
            v.message.contains("ASCEND_VISIBLE_DEVICES=1,0"),
            "{}",
            v.message
        );
    }

    #[test]
    fn assigned_devices_missing_from_the_node_or_rank_table_are_device_mismatches() {
        let mut f = healthy();
        f.devices.assigned = vec![6, 7];
        f.devices.visible = None;
        f.devices.rank_table = Some(vec![6, 7]);
        let v = decide(&f);
        assert_eq!(v.reason, PodReason::DeviceMismatch);
        assert!(
            v.message.contains("[6,7] are not on this node"),
            "{}",
            v.message
        );
        let mut f = healthy();
        f.devices.rank_table = Some(vec![2, 3]);
        assert!(decide(&f).message.contains("rank table maps"));
    }

    #[test]
    fn small_shm_fails_and_unknown_shm_passes() {
        let mut f = healthy();
        f.shm_bytes = Some(16 << 20);
        let v = decide(&f);
        assert_eq!(v.reason, PodReason::ShmTooSmall);
        assert!(v.message.contains("16 MiB"));
        f.shm_bytes = None;
        assert!(decide(&f).ok);
    }

    #[test]
    fn several_failures_are_all_reported_with_the_network_first() {
        let mut f = healthy();
        f.probes[0] = outcome("data0", "host-1", "198.18.0.11:29499", false);
        f.shm_bytes = Some(1);
        let v = decide(&f);
        assert_eq!(v.reason, PodReason::NicUnreachable);
        assert!(v.message.contains("/dev/shm"));
    }

    #[test]
    fn a_refusal_takes_the_first_failing_reason_and_every_message_in_order() {
        assert_eq!(
            Verdict::refused([
                (PodReason::NicUnreachable, None),
                (PodReason::ShmTooSmall, None)
            ]),
            None
        );
        let v = Verdict::refused([
            (PodReason::NicUnreachable, None),
            (PodReason::DeviceMismatch, Some("a".to_owned())),
            (PodReason::ShmTooSmall, Some("b".to_owned())),
        ])
        .unwrap();
        assert_eq!(
            (v.ok, v.reason, v.message.as_str()),
            (false, PodReason::DeviceMismatch, "a | b")
        );
    }

    #[test]
    fn device_lists_parse_with_spaces_and_refuse_garbage() {
        assert_eq!(parse_device_list("0, 1,2"), Some(vec![0, 1, 2]));
        assert_eq!(parse_device_list(""), Some(vec![]));
        assert_eq!(parse_device_list("0,x"), None);
    }
}
