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
}
