//! Pure schedules: who sends which slice to whom at which step. No I/O, no buffers — the
//! executors in `tcp::collectives` follow these plans over the transport, and the tests here
//! check them by simulation (every rank ends with every contribution, exactly once).

pub mod broadcast;
pub mod bruck;
pub mod halving;
pub mod ring;
pub mod select;
pub mod tree;

use std::ops::Range;

/// Splits `count` elements into `parts` contiguous ranges, the first `count % parts` one
/// element longer. Empty ranges appear when `count < parts`.
pub fn split_even(count: usize, parts: usize) -> Vec<Range<usize>> {
    let parts = parts.max(1);
    let (base, extra) = (count / parts, count % parts);
    let mut at = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = at..at + len;
            at += len;
            r
        })
        .collect()
}

/// Cuts `range` into pieces of at most `max` elements (at least one piece; empty stays empty).
pub fn segments(range: Range<usize>, max: usize) -> Vec<Range<usize>> {
    let max = max.max(1);
    if range.is_empty() {
        return vec![range];
    }
    range
        .clone()
        .step_by(max)
        .map(|s| s..(s + max).min(range.end))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_even_covers_everything_in_order() {
        for count in [0, 1, 5, 7, 64, 1001] {
            for parts in 1..9 {
                let r = split_even(count, parts);
                assert_eq!(r.len(), parts);
                assert_eq!(r[0].start, 0);
                assert_eq!(r[parts - 1].end, count);
                for w in r.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert!(w[0].len() >= w[1].len());
                }
            }
        }
    }

    #[test]
    fn segments_respect_the_cap() {
        assert_eq!(segments(3..10, 4), vec![3..7, 7..10]);
        assert_eq!(segments(5..5, 4), vec![5..5]);
        assert_eq!(segments(0..8, 8), vec![0..8]);
    }
}
