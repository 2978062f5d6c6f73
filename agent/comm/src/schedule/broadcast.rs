//! Broadcast/reduce shapes: the pipelined chain (bandwidth-optimal: time ≈ size ÷ link
//! bandwidth plus one segment per hop, independent of the number of receivers) and the
//! binomial tree (latency-optimal: ⌈log2 n⌉ rounds) used for small messages.

/// Position of `r` in the chain starting at `root`, its predecessor and successor ranks.
pub fn chain(n: usize, root: usize, r: usize) -> (Option<usize>, Option<usize>) {
    let pos = (r + n - root) % n;
    let prev = (pos > 0).then(|| (r + n - 1) % n);
    let next = (pos + 1 < n).then(|| (r + 1) % n);
    (prev, next)
}

/// Binomial tree rooted at `root`: (parent, children in send order) of rank `r`.
/// Reduction uses the same tree in reverse (children send to the parent).
pub fn binomial(n: usize, root: usize, r: usize) -> (Option<usize>, Vec<usize>) {
    let v = (r + n - root) % n;
    let abs = |rel: usize| (rel + root) % n;
    let mut mask = 1;
    let mut parent = None;
    while mask < n {
        if v & mask != 0 {
            parent = Some(abs(v - mask));
            break;
        }
        mask <<= 1;
    }
    let mut children = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if v + mask < n {
            children.push(abs(v + mask));
        }
        mask >>= 1;
    }
    (parent, children)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_visits_every_rank_once_from_the_root() {
        for n in 1..=8 {
            for root in 0..n {
                let mut at = root;
                let mut seen = vec![false; n];
                seen[root] = true;
                assert_eq!(chain(n, root, root).0, None);
                while let (_, Some(next)) = chain(n, root, at) {
                    assert_eq!(chain(n, root, next).0, Some(at));
                    assert!(!seen[next]);
                    seen[next] = true;
                    at = next;
                }
                assert!(seen.iter().all(|&s| s));
            }
        }
    }

    #[test]
    fn binomial_tree_reaches_everyone_in_log_rounds_and_is_consistent() {
        for n in 1..=9 {
            for root in 0..n {
                let mut depth = vec![usize::MAX; n];
                depth[root] = 0;
                // Parents are always informed before children (BFS in send order).
                let mut queue = vec![root];
                while let Some(p) = queue.pop() {
                    let (_, kids) = binomial(n, root, p);
                    for k in kids {
                        assert_eq!(binomial(n, root, k).0, Some(p), "n={n} root={root}");
                        depth[k] = depth[p] + 1;
                        queue.push(k);
                    }
                }
                let rounds = usize::BITS - (n - 1).leading_zeros();
                assert!(depth.iter().all(|&d| d <= rounds as usize), "n={n}");
            }
        }
    }
}
