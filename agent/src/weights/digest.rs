//! SHA-256 digests as values: chunk ids, manifest ids. Written `sha256:<64 hex>` (the form
//! of `HcommGroup.spec.weights.digest`); chunks appear in manifests as bare hex.

use std::fmt;

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
    /// SHA-256 of `data`.
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
}
