//! A fixed-size set of chunk indices: which chunks of a set a store holds verified. Sent
//! as little-endian bytes in `Have` responses.

/// Bits `0..len`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkBits {
    len: usize,
    words: Vec<u64>,
}

impl ChunkBits {
    /// `len` bits, all clear.
    pub fn new(len: usize) -> ChunkBits {
        ChunkBits {
            len,
            words: vec![0; len.div_ceil(64)],
        }
    }

    /// `len` bits, all set.
    pub fn full(len: usize) -> ChunkBits {
        let mut b = ChunkBits::new(len);
        for i in 0..len {
            b.set(i);
        }
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn set(&mut self, i: usize) {
        assert!(i < self.len, "bit {i} outside 0..{}", self.len);
        self.words[i / 64] |= 1 << (i % 64);
    }

    pub fn clear(&mut self, i: usize) {
        if i < self.len {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Number of set bits.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_full(&self) -> bool {
        self.count() == self.len
    }

    /// The bits set here and not in `before` (of the same length), ascending: a word at a
    /// time.
    pub fn added_since<'a>(&'a self, before: &'a ChunkBits) -> impl Iterator<Item = usize> + 'a {
        debug_assert!(before.len == self.len);
        self.words
            .iter()
            .zip(&before.words)
            .enumerate()
            .flat_map(|(w, (now, then))| {
                let mut bits = now & !then;
                std::iter::from_fn(move || {
                    (bits != 0).then(|| {
                        let b = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        w * 64 + b
                    })
                })
            })
    }

    /// Whether every bit set here is set in `a` or `b` (of the same length) too.
    pub fn within(&self, a: &ChunkBits, b: &ChunkBits) -> bool {
        debug_assert!(a.len == self.len && b.len == self.len);
        self.words
            .iter()
            .zip(a.words.iter().zip(&b.words))
            .all(|(w, (x, y))| w & !(x | y) == 0)
    }

    /// Whether each of the bits `0..len` is set in one of `parts` (each `len` long): a
    /// word at a time, where a bit at a time was O(bits × parts) steps.
    pub fn union_is_full(len: usize, parts: &[&ChunkBits]) -> bool {
        debug_assert!(parts.iter().all(|p| p.len == len));
        (0..len.div_ceil(64)).all(|w| {
            let want = if (w + 1) * 64 <= len {
                u64::MAX
            } else {
                (1u64 << (len % 64)) - 1
            };
            parts.iter().fold(0, |acc, p| acc | p.words[w]) & want == want
        })
    }

    /// Little-endian byte form, `len.div_ceil(8)` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        out.truncate(self.len.div_ceil(8));
        out
    }

    /// Inverse of [`ChunkBits::to_bytes`]; `None` if the length does not match or bits
    /// beyond `len` are set.
    pub fn from_bytes(len: usize, bytes: &[u8]) -> Option<ChunkBits> {
        if bytes.len() != len.div_ceil(8) {
            return None;
        }
        let mut b = ChunkBits::new(len);
        for (i, byte) in bytes.iter().enumerate() {
            for bit in 0..8 {
                if byte & (1 << bit) != 0 {
                    let idx = i * 8 + bit;
                    if idx >= len {
                        return None;
                    }
                    b.set(idx);
                }
            }
        }
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_through_bytes_and_reject_stray_bits() {
        let mut b = ChunkBits::new(70);
        for i in [0, 9, 63, 64, 69] {
            b.set(i);
        }
        assert_eq!(b.count(), 5);
        let bytes = b.to_bytes();
        assert_eq!(bytes.len(), 9);
        assert_eq!(ChunkBits::from_bytes(70, &bytes), Some(b));
        assert_eq!(ChunkBits::from_bytes(69, &bytes), None);
        assert!(ChunkBits::full(70).is_full());
    }

    #[test]
    fn a_union_is_full_only_when_every_bit_is_in_some_part() {
        let (mut a, mut b) = (ChunkBits::new(130), ChunkBits::new(130));
        (0..100).for_each(|i| a.set(i));
        (100..129).for_each(|i| b.set(i));
        assert!(
            !ChunkBits::union_is_full(130, &[&a, &b]),
            "bit 129 is in neither"
        );
        b.set(129);
        assert!(ChunkBits::union_is_full(130, &[&a, &b]));
        assert!(ChunkBits::union_is_full(0, &[]));
        assert!(!ChunkBits::union_is_full(1, &[]));
        let mut c = ChunkBits::new(130);
        c.set(5);
        c.set(120);
        assert!(c.within(&a, &b));
        assert!(!c.within(&a, &ChunkBits::new(130)), "bit 120 is only in b");
        let mut d = c.clone();
        d.set(64);
        d.set(129);
        assert_eq!(d.added_since(&c).collect::<Vec<_>>(), vec![64, 129]);
        assert_eq!(c.added_since(&d).count(), 0);
    }
}
