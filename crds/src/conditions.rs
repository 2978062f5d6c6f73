//! Kubernetes-convention conditions: set a condition, keeping `lastTransitionTime` unless
//! the status flips, and read one back.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The status of a condition, as the three strings Kubernetes defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It is not known (yet) whether the condition holds.
    Unknown,
}

impl ConditionStatus {
    /// The string Kubernetes uses for this status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// `True` for `true`, `False` for `false`.
    pub fn from_bool(value: bool) -> Self {
        if value { Self::True } else { Self::False }
    }
}

/// Inserts or updates the condition of type `type_` in `conditions`.
///
/// `lastTransitionTime` changes only when the status flips, as the API conventions ask;
/// reason, message and `observedGeneration` are always refreshed. Returns whether
/// anything changed, so callers can skip a no-op status write.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> bool {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let flipped = existing.status != status.as_str();
            let changed = flipped
                || existing.reason != reason
                || existing.message != message
                || existing.observed_generation != observed_generation;
            if flipped {
                existing.last_transition_time = now;
                existing.status = status.as_str().to_owned();
            }
            existing.reason = reason.to_owned();
            existing.message = message;
            existing.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status: status.as_str().to_owned(),
                reason: reason.to_owned(),
                message,
                observed_generation,
                last_transition_time: now,
            });
            true
        }
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present and `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("valid timestamp"))
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Scaling",
            "2/3",
            Some(1),
            at(10)
        ));
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Scaling",
            "1/3",
            Some(1),
            at(20)
        ));
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "AllMembersReady",
            "3/3",
            Some(2),
            at(30)
        ));
        assert_eq!(conditions[0].last_transition_time, at(30));
        assert_eq!(conditions[0].observed_generation, Some(2));
        assert!(is_true(&conditions, "Ready"));
    }

    #[test]
    fn setting_the_same_condition_twice_reports_no_change() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Degraded",
            ConditionStatus::False,
            "Healthy",
            "",
            Some(3),
            at(1),
        );
        assert!(!set_condition(
            &mut conditions,
            "Degraded",
            ConditionStatus::False,
            "Healthy",
            "",
            Some(3),
            at(2)
        ));
        assert_eq!(conditions.len(), 1);
    }
}
