//! Numbers as HCCL writes them in a rank table: JSON strings (`"rank_id": "3"`).
//!
//! Serialisation always writes strings, as HCCL and MindCluster do. Parsing also takes a
//! bare JSON integer, because hand-written tables use them and nothing is lost; anything
//! else (a negative number, `"3a"`, a float) is refused with the offending value named.

use std::fmt;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serializer};

/// Writes `value` as a JSON string.
pub fn serialize<S: Serializer>(value: &u32, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// Reads a non-negative integer written as a JSON string (or as a bare integer).
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    deserializer.deserialize_any(NumVisitor)
}

/// `Option<u32>` fields: `None` is omitted by the field's `skip_serializing_if`.
pub mod option {
    use super::*;

    /// Writes the number as a JSON string; `None` as null (callers skip it).
    pub fn serialize<S: Serializer>(value: &Option<u32>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => serializer.collect_str(v),
            None => serializer.serialize_none(),
        }
    }

    /// Reads an optional number written as a string; null is `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u32>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(deserialize_with = "super::deserialize")] u32);
        Ok(Option::<Wrapped>::deserialize(deserializer)?.map(|w| w.0))
    }
}

struct NumVisitor;

impl Visitor<'_> for NumVisitor {
    type Value = u32;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer written as a string, e.g. \"3\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
        let digits = v.trim();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(E::invalid_value(Unexpected::Str(v), &self));
        }
        digits
            .parse()
            .map_err(|_| E::invalid_value(Unexpected::Str(v), &self))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        u32::try_from(v).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        u32::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }
}
