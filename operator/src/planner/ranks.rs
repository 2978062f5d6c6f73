//! Member indices and ranks (pure).
//!
//! Member `i` holds ranks `i × devicesPerMember … (i+1) × devicesPerMember − 1`, the HCCL
//! rank-table convention; local rank `j` of member `i` is rank `i × d + j` on the `j`-th
//! device of its `hcomm.io/devices` annotation. Existing members keep their index (and so
//! their ranks) for life; a joiner takes the lowest free index. Scale-in removes the
//! highest indices first: they are the newest members in the common case, and removing
//! them keeps the ranks `0 … n·d − 1` contiguous.

use std::collections::BTreeSet;

use hcomm_crds::RankRange;

/// The rank range of member `index`.
pub fn rank_range(index: i32, devices_per_member: i32) -> RankRange {
    RankRange {
        first: index * devices_per_member,
        count: devices_per_member,
    }
}

/// The `count` lowest indices not in `taken`.
pub fn lowest_free(taken: &BTreeSet<i32>, count: usize) -> Vec<i32> {
    (0..).filter(|i| !taken.contains(i)).take(count).collect()
}

/// The indices to remove: `count` of `indices`, highest first.
pub fn victims(indices: &[i32], count: usize) -> Vec<i32> {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.truncate(count);
    sorted
}

/// The Pod name of member `index` planned at `epoch`. The epoch in the name means a name
/// is never reused for a different member while an old Pod may still be terminating.
pub fn member_name(group: &str, index: i32, epoch: i64) -> String {
    format!("{group}-{index}-e{epoch}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_i_holds_ranks_from_i_times_devices_per_member() {
        assert_eq!(
            rank_range(3, 4),
            RankRange {
                first: 12,
                count: 4
            }
        );
    }

    #[test]
    fn freed_indices_are_reused_lowest_first() {
        let taken = BTreeSet::from([0, 2, 3]);
        assert_eq!(lowest_free(&taken, 3), vec![1, 4, 5]);
    }

    #[test]
    fn scale_in_takes_the_highest_indices() {
        assert_eq!(victims(&[0, 3, 1, 2], 2), vec![3, 2]);
    }
}
