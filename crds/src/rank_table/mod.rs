//! The HCCL rank table: the JSON file `RANK_TABLE_FILE` points at, which the operator
//! publishes in the group's ConfigMap and every agent and worker reads. Declared once here
//! as typed structs ([`v1`], [`v12`]), parsed with [`RankTable::parse`] and checked with
//! [`validate`] against the rules HCCL applies when it loads a table.
//!
//! Format and rules: the HCCL rank-table documentation (v1.0 for A2, v1.2 for A3 super
//! pods); see `/work/shared/ASCEND.md` §4 for the source list.

mod config_map;
mod num;
mod server;
pub mod v1;
pub mod v12;
mod validate;
mod view;

pub use config_map::{
    CONFIG_MAP_MAX_BYTES, KEY_EPOCH, KEY_MEMBERS, KEY_RANK_TABLE, MOUNT_DIR, RANK_TABLE_FILE,
    config_map_name,
};
pub use server::ServerOf;
pub use validate::{ValidateError, ValidateOptions, validate};
pub use view::{DeviceView, ServerView};

use serde::{Deserialize, Serialize};

/// Whether the writer has finished the table. HCCL polls a table until it reads
/// `completed` (30 minutes at most); hcomm only publishes completed tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The table is final.
    Completed,
    /// The writer is still filling it in.
    Initializing,
}

/// Why a document is not a rank table.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or a field has the wrong shape (the message names field and value).
    #[error("not a rank table: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The document has no `version`.
    #[error("not a rank table: no \"version\" field")]
    MissingVersion,
    /// A version this crate does not read.
    #[error("rank table version {0:?} is not supported (only \"1.0\" and \"1.2\" are)")]
    UnsupportedVersion(String),
}

/// A rank table in one of the formats HCCL reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankTable {
    /// `version: "1.0"`.
    V1(v1::RankTable),
    /// `version: "1.2"` (A3 super pods).
    V12(v12::RankTable),
}

impl RankTable {
    /// Parses a table, choosing the format by its `version` field.
    pub fn parse(json: &str) -> Result<Self, ParseError> {
        #[derive(Deserialize)]
        struct Peek {
            version: Option<serde_json::Value>,
        }
        let peek: Peek = serde_json::from_str(json)?;
        match peek.version {
            None => Err(ParseError::MissingVersion),
            Some(serde_json::Value::String(v)) if v == v1::VERSION => {
                Ok(Self::V1(serde_json::from_str(json)?))
            }
            Some(serde_json::Value::String(v)) if v == v12::VERSION => {
                Ok(Self::V12(serde_json::from_str(json)?))
            }
            Some(serde_json::Value::String(v)) => Err(ParseError::UnsupportedVersion(v)),
            Some(other) => Err(ParseError::UnsupportedVersion(other.to_string())),
        }
    }

    /// The table as HCCL reads it (pretty-printed JSON, numbers as strings).
    pub fn to_json(&self) -> String {
        let result = match self {
            Self::V1(t) => serde_json::to_string_pretty(t),
            Self::V12(t) => serde_json::to_string_pretty(t),
        };
        result.expect("a rank table has only string keys and serialises")
    }

    /// The table as compact JSON (no whitespace): the same document for HCCL, about half
    /// the bytes of [`Self::to_json`] — what large groups publish (see
    /// `docs/design.md`, "Rank-table and status size").
    pub fn to_compact_json(&self) -> String {
        let result = match self {
            Self::V1(t) => serde_json::to_string(t),
            Self::V12(t) => serde_json::to_string(t),
        };
        result.expect("a rank table has only string keys and serialises")
    }

    /// The table's status.
    pub fn status(&self) -> Status {
        match self {
            Self::V1(t) => t.status,
            Self::V12(t) => t.status,
        }
    }

    /// The servers, in table order, in a version-neutral view.
    pub fn servers(&self) -> Vec<ServerView<'_>> {
        match self {
            Self::V1(t) => t.server_list.iter().map(ServerView::from).collect(),
            Self::V12(t) => t.server_list.iter().map(ServerView::from).collect(),
        }
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.servers().iter().map(|s| s.devices.len()).sum()
    }

    /// The server holding `rank` and that rank's device.
    pub fn rank(&self, rank: u32) -> Option<(ServerView<'_>, DeviceView<'_>)> {
        self.servers().into_iter().find_map(|s| {
            let device = s.devices.iter().find(|d| d.rank_id == rank).cloned();
            device.map(|d| (s, d))
        })
    }
}

impl From<v1::RankTable> for RankTable {
    fn from(table: v1::RankTable) -> Self {
        Self::V1(table)
    }
}

impl From<v12::RankTable> for RankTable {
    fn from(table: v12::RankTable) -> Self {
        Self::V12(table)
    }
}

#[cfg(test)]
mod tests;
