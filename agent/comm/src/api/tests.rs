//! Unit tests of the collective API types.

use super::*;
use std::time::Duration;

#[test]
fn data_type_sizes_match_the_element_types() {
    assert_eq!(DataType::F32.size(), 4);
    assert_eq!(DataType::F64.size(), 8);
    assert_eq!(DataType::F16.size(), 2);
    assert_eq!(DataType::BF16.size(), 2);
    assert_eq!(DataType::I8.size(), 1);
    assert_eq!(DataType::U8.size(), 1);
    assert_eq!(DataType::I32.size(), 4);
    assert_eq!(DataType::I64.size(), 8);
    for d in DataType::ALL {
        assert_eq!(d.name().parse::<DataType>().unwrap(), d);
    }
}

#[test]
fn algorithm_parses_its_spellings_and_refuses_garbage() {
    assert_eq!("auto".parse::<Algorithm>().unwrap(), Algorithm::Auto);
    assert_eq!("Ring".parse::<Algorithm>().unwrap(), Algorithm::Ring);
    for s in ["tree", "rd", "recursive_doubling"] {
        assert_eq!(s.parse::<Algorithm>().unwrap(), Algorithm::Tree, "{s}");
    }
    for s in ["halving-doubling", "HD", "halving_doubling", "rabenseifner"] {
        assert_eq!(
            s.parse::<Algorithm>().unwrap(),
            Algorithm::HalvingDoubling,
            "{s}"
        );
    }
    let err = "rign".parse::<Algorithm>().unwrap_err();
    assert!(err.to_string().contains("auto|ring|tree"));
    assert_eq!(
        Algorithm::resolve(Some(Algorithm::Ring)).unwrap(),
        Algorithm::Ring
    );
}

#[test]
fn errors_name_peer_address_interface_operation_and_epoch() {
    let e = CommError::Timeout {
        ctx: Box::new(ErrorContext {
            op: "all_reduce".into(),
            epoch: 7,
            peer_rank: Some(3),
            peer_addr: Some("10.0.0.4:4000".into()),
            local: "eth1 (10.0.0.2:4001)".into(),
        }),
        after: Duration::from_secs(2),
    };
    let s = e.to_string();
    for part in ["all_reduce", "epoch 7", "rank 3", "10.0.0.4:4000", "eth1"] {
        assert!(s.contains(part), "{s}");
    }
    assert_eq!(e.category(), "timeout");
    assert_eq!(e.peer_rank(), Some(3));
}
