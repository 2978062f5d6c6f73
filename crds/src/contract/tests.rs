//! Every contract enum variant survives `as_str` → `FromStr`, and unknown names are
//! refused.

use super::*;

fn round_trips<T>(all: &[T])
where
    T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display + std::str::FromStr + AsRef<str>,
    T::Err: std::fmt::Debug,
{
    let mut seen = std::collections::BTreeSet::new();
    for &variant in all {
        let text = variant.to_string();
        assert_eq!(text, variant.as_ref());
        assert_eq!(text.parse::<T>().unwrap(), variant);
        assert!(seen.insert(text.clone()), "{text} is used twice");
    }
}

#[test]
fn every_pod_condition_type_round_trips() {
    round_trips(PodConditionType::ALL);
}

#[test]
fn every_pod_reason_round_trips() {
    round_trips(PodReason::ALL);
}

#[test]
fn every_group_condition_type_round_trips() {
    round_trips(GroupConditionType::ALL);
}

#[test]
fn every_group_reason_round_trips() {
    round_trips(GroupReason::ALL);
}

#[test]
fn unknown_names_are_refused_naming_the_value() {
    let err = "Exploded".parse::<PodReason>().unwrap_err();
    assert_eq!(err.value, "Exploded");
    assert!(err.to_string().contains("Pod condition reason"));
    assert!("hcomm.io/ready".parse::<PodConditionType>().is_err());
    assert!("ready".parse::<GroupConditionType>().is_err());
    assert!("".parse::<GroupReason>().is_err());
}

#[test]
fn every_pod_condition_type_is_in_the_api_group() {
    for t in PodConditionType::ALL {
        assert!(t.as_str().starts_with("hcomm.io/"), "{t}");
    }
    assert_eq!(READINESS_GATE, PodConditionType::MemberReady.as_str());
}

#[test]
fn worker_env_names_are_distinct() {
    let names: std::collections::BTreeSet<_> = env::ALL.iter().collect();
    assert_eq!(names.len(), env::ALL.len());
}
