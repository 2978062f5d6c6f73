//! Recursive doubling for small all-reduces: ⌈log2 p⌉ rounds of full-buffer exchange with
//! the partner at distance 2^k, where p is the largest power of two ≤ n. Non-power-of-two
//! worlds fold first: among the first 2·(n−p) ranks, each even rank hands its data to the odd
//! rank above it and waits; the odd ranks take part in the doubling and hand the result back.

/// A rank's part in recursive doubling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Sends its buffer to `proxy`, then receives the final result from it.
    Folded { proxy: usize },
    /// Takes part in the rounds; `folded` (if any) is the rank whose data it first absorbs
    /// and to which it returns the result.
    Active {
        folded: Option<usize>,
        partners: Vec<usize>,
    },
}

pub fn recursive_doubling(n: usize, r: usize) -> Role {
    let (p, rem) = fold(n);
    if r < 2 * rem && r.is_multiple_of(2) {
        return Role::Folded { proxy: r + 1 };
    }
    let folded = (r < 2 * rem).then(|| r - 1);
    let vrank = virtual_rank(n, r);
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let mut partners = Vec::new();
    let mut mask = 1;
    while mask < p {
        partners.push(real(vrank ^ mask));
        mask <<= 1;
    }
    Role::Active { folded, partners }
}

/// p, the largest power of two ≤ n (1 for n = 0), and n − p, the number of folded ranks.
fn fold(n: usize) -> (usize, usize) {
    let p = if n == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    };
    (p, n - p)
}

/// An active rank's index among the p active ranks after the fold (meaningless for a
/// folded rank).
pub fn virtual_rank(n: usize, r: usize) -> usize {
    let rem = fold(n).1;
    if r < 2 * rem { r / 2 } else { r - rem }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursive_doubling_sums_every_contribution_once_for_any_world() {
        for n in 1..=12usize {
            let full = (1u32 << n) - 1;
            let roles: Vec<Role> = (0..n).map(|r| recursive_doubling(n, r)).collect();
            let mut state: Vec<u32> = (0..n).map(|r| 1 << r).collect();
            // Fold.
            for (r, role) in roles.iter().enumerate() {
                if let Role::Folded { proxy } = role {
                    assert_eq!(
                        roles[*proxy],
                        Role::Active {
                            folded: Some(r),
                            partners: match &roles[*proxy] {
                                Role::Active { partners, .. } => partners.clone(),
                                _ => unreachable!(),
                            }
                        }
                    );
                    state[*proxy] |= state[r];
                }
            }
            let rounds = roles
                .iter()
                .filter_map(|x| match x {
                    Role::Active { partners, .. } => Some(partners.len()),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            for k in 0..rounds {
                let before = state.clone();
                for (r, role) in roles.iter().enumerate() {
                    if let Role::Active { partners, .. } = role {
                        let q = partners[k];
                        match &roles[q] {
                            Role::Active { partners: qp, .. } => assert_eq!(qp[k], r),
                            _ => panic!("partner of {r} is folded, n={n}"),
                        }
                        assert_eq!(before[r] & before[q], 0, "double count n={n}");
                        state[r] = before[r] | before[q];
                    }
                }
            }
            for (r, role) in roles.iter().enumerate() {
                if let Role::Folded { proxy } = role {
                    state[r] = state[*proxy];
                }
            }
            assert!(state.iter().all(|&m| m == full), "n={n}: {state:?}");
        }
    }
}
