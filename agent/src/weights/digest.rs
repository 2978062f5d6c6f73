//! Digests as values: chunk ids, manifest ids. A manifest id is always SHA-256, written
//! `sha256:<64 hex>` (the form of `HcommGroup.spec.weights.digest`); chunk ids are 32-byte
//! digests under the hash the manifest names ([`ChunkHash`]) and appear in manifests as
//! bare hex.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// Prefix of the textual form.
pub const DIGEST_PREFIX: &str = "sha256:";

/// A digest that does not parse. Displays as `WeightsError::Invalid` does, which it becomes
/// (`From`); the digest stays below the error type that names digests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid weights input: {0}")]
pub struct DigestError(pub String);

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// SHA-256 of `data` (manifest ids; chunk ids come from [`ChunkHash::digest`]).
    pub fn of(data: &[u8]) -> Digest {
        Digest(Sha256::digest(data).into())
    }

    /// Lower-case hex without prefix (file names, manifest entries).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses bare hex (64 characters).
    pub fn from_hex(s: &str) -> Result<Digest, DigestError> {
        let mut out = [0u8; 32];
        if s.len() != 64 || s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(DigestError(format!(
                "digest {s:?} is not 64 lower-case hex characters"
            )));
        }
        hex::decode_to_slice(s, &mut out).map_err(|e| DigestError(format!("digest {s:?}: {e}")))?;
        Ok(Digest(out))
    }
}

/// How a set's chunks are hashed, named by its manifest. Every joiner hashes every byte it
/// receives: on the x86-64 VM of docs/benchmarks.md SHA-256 hashes a GiB in 1.0 CPU-s
/// (`openssl dgst`, SHA-NI) and BLAKE3 in 0.3, and the joiners' CPU per GiB fell by 0.37
/// CPU-s with BLAKE3. Version 1 manifests, and every digest computed before BLAKE3 was
/// added, use SHA-256; an agent importing a source tries both, so those digests stay valid.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ChunkHash {
    /// SHA-256, the hash of `hcomm-weights/v1` manifests.
    Sha256,
    /// BLAKE3 (256-bit output), what `hcomm-agent weights manifest` uses unless told.
    #[default]
    Blake3,
}

impl ChunkHash {
    /// Every hash an agent can verify, the default first.
    pub const ALL: [ChunkHash; 2] = [ChunkHash::Blake3, ChunkHash::Sha256];

    /// The digest of one chunk's bytes.
    pub fn digest(self, data: &[u8]) -> Digest {
        match self {
            ChunkHash::Sha256 => Digest::of(data),
            ChunkHash::Blake3 => Digest(*blake3::hash(data).as_bytes()),
        }
    }

    /// The name used in manifests and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ChunkHash::Sha256 => "sha256",
            ChunkHash::Blake3 => "blake3",
        }
    }
}

impl fmt::Display for ChunkHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ChunkHash {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<ChunkHash, DigestError> {
        ChunkHash::ALL
            .into_iter()
            .find(|h| h.name() == s)
            .ok_or_else(|| DigestError(format!("chunk hash {s:?} is not sha256 or blake3")))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DIGEST_PREFIX}{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DIGEST_PREFIX}{}", &self.hex()[..12])
    }
}

impl Digest {
    /// Parses `sha256:<64 lower-case hex>` (also `str::parse`, whose error is the crate's
    /// `WeightsError`).
    pub fn parse_prefixed(s: &str) -> Result<Digest, DigestError> {
        let hex = s.strip_prefix(DIGEST_PREFIX).ok_or_else(|| {
            DigestError(format!("digest {s:?} must start with {DIGEST_PREFIX:?}"))
        })?;
        Digest::from_hex(hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_round_trip_through_their_text_form() {
        let d = Digest::of(b"hello");
        assert_eq!(
            d.to_string(),
            "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        assert!("2cf24dba".parse::<Digest>().is_err());
        assert!("sha256:XY".parse::<Digest>().is_err());
        assert!(
            d.to_string()
                .to_uppercase()
                .replace("SHA256", "sha256")
                .parse::<Digest>()
                .is_err()
        );
    }

    #[test]
    fn chunk_hashes_are_the_published_functions_and_parse_by_name() {
        // BLAKE3's published digest of the empty input, and SHA-256's.
        assert_eq!(
            ChunkHash::Blake3.digest(b"").hex(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        assert_eq!(
            ChunkHash::Sha256.digest(b"").hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        for h in ChunkHash::ALL {
            assert_eq!(h.name().parse::<ChunkHash>().unwrap(), h);
        }
        assert_eq!(ChunkHash::default(), ChunkHash::Blake3);
        let e = "md5".parse::<ChunkHash>().unwrap_err().to_string();
        assert!(e.contains("md5") && e.contains("blake3"), "{e}");
    }
}
