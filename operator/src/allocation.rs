//! Decisions from scheduling and device allocation (pure): which members wait for the
//! scheduler or the device plugin, and which waited too long and are to be replaced.
//!
//! A member Pod requests its NPUs; the scheduler binds it (or reports it `Unschedulable`)
//! and the Ascend device plugin writes its allocation annotation at admission. Until that
//! annotation is there the operator does not know which NPUs the member holds, so the
//! epoch's rank table is held back ([`GroupReason::WaitingForAllocation`]). A member whose
//! annotation does not come within the deadline, or is unusable (unreadable, or not
//! `devicesPerMember` devices), is counted as failed, like a member that failed
//! verification: the planner replaces it (avoiding its node) and deletes it without a drain,
//! since it never served.
//!
//! Data flow: `observe` → [`judged`] (with `isolation::judged`) → `planner` and `status`.

use hcomm_crds::contract::GroupReason;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::phase::ObservedMember;

/// The shortest wait for a member's placement and allocation, whatever the group's connect
/// timeout: scheduling (a gang scheduler may wait for the whole group) and admission take
/// more than a network round trip.
pub const MIN_DEADLINE: SignedDuration = SignedDuration::from_secs(60);

/// How long a member may wait to be placed and allocated: twice the group's connect
/// timeout (the agent's join deadline), at least [`MIN_DEADLINE`].
pub fn deadline(connect_timeout_seconds: i32) -> SignedDuration {
    SignedDuration::from_secs(2 * i64::from(connect_timeout_seconds.max(0))).max(MIN_DEADLINE)
}

/// The members as judged, and when the nearest pending deadline falls (to look again then).
pub fn judged(
    members: &[ObservedMember],
    devices_per_member: i32,
    deadline: SignedDuration,
    now: Timestamp,
) -> (Vec<ObservedMember>, Option<SignedDuration>) {
    let mut recheck: Option<SignedDuration> = None;
    let judged = members
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if m.failed || !m.in_set() {
                return m;
            }
            let waited = m
                .created_at
                .map_or(SignedDuration::ZERO, |c| now.duration_since(c));
            let late = waited >= deadline;
            let (reason, message, give_up) = match (&m.allocation, &m.unschedulable) {
                (Some(Ok(a)), _) if a.devices.len() == devices_per_member.max(0) as usize => {
                    return m;
                }
                (Some(Ok(a)), _) => (
                    GroupReason::AllocationMissing,
                    format!(
                        "the device plugin allocated {} device(s), the group needs {devices_per_member}",
                        a.devices.len()
                    ),
                    true,
                ),
                (Some(Err(e)), _) => (GroupReason::AllocationMissing, e.clone(), true),
                (None, Some(why)) => (
                    GroupReason::Unschedulable,
                    format!("the scheduler cannot place it: {why}"),
                    late,
                ),
                (None, None) => (
                    GroupReason::WaitingForAllocation,
                    if late {
                        format!(
                            "no device-plugin allocation within {}s",
                            deadline.as_secs()
                        )
                    } else {
                        "waiting for the scheduler and the device plugin's allocation".to_owned()
                    },
                    late,
                ),
            };
            if give_up {
                m.failed = true;
                m.blocked = Some(match reason {
                    GroupReason::WaitingForAllocation => GroupReason::AllocationMissing,
                    other => other,
                });
            } else {
                let left = deadline - waited;
                recheck = Some(recheck.map_or(left, |r| r.min(left)));
                m.blocked = Some(reason);
            }
            m.message = Some(message);
            m
        })
        .collect();
    (judged, recheck)
}

#[cfg(test)]
mod tests {
    use hcomm_crds::MemberPhase;
    use hcomm_crds::contract::ascend::{AllocatedDevice, DeviceAllocation};

    use super::*;

    fn t(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    pub(crate) fn allocation(ids: &[u32]) -> DeviceAllocation {
        DeviceAllocation {
            pod_name: String::new(),
            server_id: String::new(),
            host_ip: String::new(),
            super_pod_id: None,
            devices: ids
                .iter()
                .map(|id| AllocatedDevice {
                    device_id: id.to_string(),
                    device_ip: format!("192.168.0.{id}"),
                    super_device_id: None,
                })
                .collect(),
        }
    }

    fn member(allocation: Option<Result<DeviceAllocation, String>>) -> ObservedMember {
        ObservedMember {
            name: "g-0-e1".into(),
            index: 0,
            epoch: 1,
            node: Some("n1".into()),
            devices: Vec::new(),
            allocation,
            unschedulable: None,
            blocked: None,
            phase: MemberPhase::Pending,
            failed: false,
            message: None,
            drain_requested_at: None,
            drained: false,
            serving: false,
            standby: false,
            weights_digest: None,
            revision: None,
            unreachable: false,
            deleting: false,
            running: false,
            created_at: Some(t(0)),
        }
    }

    const D: SignedDuration = SignedDuration::from_secs(60);

    #[test]
    fn an_allocated_member_is_left_alone() {
        let (out, recheck) = judged(&[member(Some(Ok(allocation(&[0, 1]))))], 2, D, t(500));
        assert_eq!(
            (out[0].failed, out[0].blocked, recheck),
            (false, None, None)
        );
    }

    #[test]
    fn a_member_without_allocation_waits_then_is_given_up_with_a_reason() {
        let (out, recheck) = judged(&[member(None)], 2, D, t(20));
        assert!(!out[0].failed);
        assert_eq!(out[0].blocked, Some(GroupReason::WaitingForAllocation));
        assert_eq!(recheck, Some(SignedDuration::from_secs(40)));
        let (out, recheck) = judged(&[member(None)], 2, D, t(60));
        assert!(out[0].failed);
        assert_eq!(out[0].blocked, Some(GroupReason::AllocationMissing));
        assert!(out[0].message.as_deref().unwrap().contains("within 60s"));
        assert_eq!(recheck, None);
    }

    #[test]
    fn an_unschedulable_member_says_so_and_is_replaced_after_the_deadline() {
        let mut m = member(None);
        m.unschedulable = Some("0/2 nodes are available".into());
        let (out, _) = judged(std::slice::from_ref(&m), 1, D, t(1));
        assert_eq!(
            (out[0].failed, out[0].blocked),
            (false, Some(GroupReason::Unschedulable))
        );
        assert!(out[0].message.as_deref().unwrap().contains("0/2 nodes"));
        let (out, _) = judged(&[m], 1, D, t(61));
        assert_eq!(
            (out[0].failed, out[0].blocked),
            (true, Some(GroupReason::Unschedulable))
        );
    }

    #[test]
    fn an_unusable_allocation_fails_the_member_at_once() {
        let (out, _) = judged(&[member(Some(Ok(allocation(&[0]))))], 2, D, t(1));
        assert_eq!(
            (out[0].failed, out[0].blocked),
            (true, Some(GroupReason::AllocationMissing))
        );
        let (out, _) = judged(&[member(Some(Err("not JSON".into())))], 2, D, t(1));
        assert!(out[0].failed);
    }

    #[test]
    fn the_deadline_is_twice_the_connect_timeout_and_never_below_a_minute() {
        assert_eq!(deadline(10), MIN_DEADLINE);
        assert_eq!(deadline(120), SignedDuration::from_secs(240));
    }
}
