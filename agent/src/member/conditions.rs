//! Pod condition writes (pure): merges the agent's condition updates into the Pod's
//! current conditions and builds the `pods/status` patch.
//!
//! The patch is a *strategic merge* patch whose `conditions` list carries only the agent's
//! condition types: Pod conditions merge by `type`, so the kubelet's (or kwok's) `Ready`,
//! `PodScheduled`, ... are never clobbered. `lastTransitionTime` changes only on a flip.

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::state::CondUpdate;

/// The agent's conditions after applying `updates` to `existing`, or None when nothing
/// changes (so no write is made).
pub fn merge(
    existing: &[PodCondition],
    updates: &[CondUpdate],
    now: &Time,
) -> Option<Vec<PodCondition>> {
    let mut changed = false;
    let mut out: Vec<PodCondition> = Vec::new();
    for u in updates {
        let status = if u.status { "True" } else { "False" };
        let prev = out
            .iter()
            .find(|c| c.type_ == u.type_)
            .cloned()
            .or_else(|| existing.iter().find(|c| c.type_ == u.type_).cloned());
        let same = prev.as_ref().is_some_and(|p| {
            p.status == status
                && p.reason.as_deref() == Some(u.reason.as_str())
                && p.message.as_deref() == Some(u.message.as_str())
        });
        changed |= !same;
        let transition = match &prev {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => Some(now.clone()),
        };
        let c = PodCondition {
            type_: u.type_.to_owned(),
            status: status.to_owned(),
            reason: Some(u.reason.as_str().to_owned()),
            message: Some(truncate(&u.message, 1024)),
            last_transition_time: transition,
            last_probe_time: None,
            observed_generation: None,
        };
        match out.iter_mut().find(|x| x.type_ == u.type_) {
            Some(x) => *x = c,
            None => out.push(c),
        }
    }
    changed.then_some(out)
}

/// The strategic-merge patch body for `pods/status`.
pub fn patch_body(conditions: &[PodCondition]) -> Value {
    json!({ "status": { "conditions": conditions } })
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcomm_crds::contract::PodReason;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    fn up(type_: &'static str, status: bool, reason: PodReason) -> CondUpdate {
        CondUpdate {
            type_,
            status,
            reason,
            message: "m".into(),
        }
    }

    fn kubelet_ready() -> PodCondition {
        PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_patch_carries_only_the_agents_conditions() {
        let out = merge(
            &[kubelet_ready()],
            &[up(
                hcomm_crds::contract::POD_VERIFIED,
                true,
                PodReason::Verified,
            )],
            &at(5),
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        let body = patch_body(&out);
        let list = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(list[0]["type"], hcomm_crds::contract::POD_VERIFIED);
        assert!(list.iter().all(|c| c["type"] != "Ready"));
    }

    #[test]
    fn transition_time_is_kept_unless_the_status_flips() {
        let existing = vec![PodCondition {
            type_: hcomm_crds::contract::POD_JOINED.into(),
            status: "True".into(),
            reason: Some(PodReason::Joined.as_str().into()),
            message: Some("old".into()),
            last_transition_time: Some(at(1)),
            ..Default::default()
        }];
        let out = merge(
            &existing,
            &[up(
                hcomm_crds::contract::POD_JOINED,
                true,
                PodReason::Joined,
            )],
            &at(9),
        )
        .unwrap();
        assert_eq!(out[0].last_transition_time, Some(at(1)));
        let out = merge(
            &existing,
            &[up(hcomm_crds::contract::POD_JOINED, false, PodReason::Left)],
            &at(9),
        )
        .unwrap();
        assert_eq!(out[0].last_transition_time, Some(at(9)));
    }

    #[test]
    fn an_identical_update_writes_nothing() {
        let existing = vec![PodCondition {
            type_: hcomm_crds::contract::POD_DRAINED.into(),
            status: "True".into(),
            reason: Some(PodReason::Drained.as_str().into()),
            message: Some("m".into()),
            last_transition_time: Some(at(1)),
            ..Default::default()
        }];
        assert_eq!(
            merge(
                &existing,
                &[up(
                    hcomm_crds::contract::POD_DRAINED,
                    true,
                    PodReason::Drained
                )],
                &at(2)
            ),
            None
        );
    }

    #[test]
    fn a_later_update_of_the_same_type_in_one_batch_wins() {
        let out = merge(
            &[],
            &[
                up(
                    hcomm_crds::contract::POD_MEMBER_READY,
                    true,
                    PodReason::MemberReady,
                ),
                up(
                    hcomm_crds::contract::POD_MEMBER_READY,
                    false,
                    PodReason::Draining,
                ),
            ],
            &at(3),
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, "False");
    }

    #[test]
    fn long_messages_are_truncated_on_a_char_boundary() {
        let s = "é".repeat(2000);
        let t = truncate(&s, 1024);
        assert!(t.len() <= 1024 && t.ends_with("..."));
    }
}
