//! The one seeded PRNG of the workspace's property and fuzz tests (xorshift64, no
//! dependency): the comm frame decoder's fuzzing here, the local-API line fuzzing in
//! `hcomm-crds` and the weights chunk-protocol fuzzing in the agent all draw from it, so a
//! failing seed replays exactly everywhere. Public only with the `testutil` feature, which
//! those crates enable as a dev-dependency; never for anything secret.

/// A deterministic PRNG from a fixed seed.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform-ish in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Between 0 and `max` random bytes.
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        (0..self.below(max + 1))
            .map(|_| self.next_u64() as u8)
            .collect()
    }
}
