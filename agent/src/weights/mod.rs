//! Weight sync: how a joining member gets the model weights from members that already
//! hold them, verified chunk by chunk, before it may take traffic (the `Syncing` phase of
//! the member lifecycle; `hcomm.io/weights-synced` turns True only after [`fetch()`] returns).
//!
//! # Data flow
//!
//! ```text
//! first members:  source dir ──Manifest::build──▶ digest == spec.weights.digest?
//!                   └─ WeightStore::import_dir ─▶ versions/<hex>, current ─▶ ChunkServer
//! joiner:         fetch(FetchRequest) ─▶ manifest from any source (hash checked)
//!                   ─▶ chunks striped over ALL sources (schedule + fetch workers)
//!                   ─▶ staging/<hex> (each chunk hashed, written in place, served on)
//!                   ─▶ fsync, rename to versions/<hex>, swap the group's link
//!                   ─▶ worker reads groups/<ns>_<group>/current
//! ```
//!
//! - [`manifest`]: files + chunk digests; canonical JSON whose SHA-256 is THE digest.
//!   CLI entry point: [`manifest_digest`] (`hcomm-agent weights manifest <dir>`).
//! - [`store`]: the on-disk layout, resume, atomic install, verified-chunk lookup.
//! - [`link`]: the per-group `current` links ([`CurrentLink`]) over shared versions.
//! - [`generate`]: deterministic pseudo-random sets for demos and tests
//!   (`hcomm-agent weights generate`).
//! - [`protocol`] and [`auth`]: frames (checked complete, bounded) and the HMAC handshake.
//! - [`server`]: [`ChunkServer::serve`] on the data address, bounded connections;
//!   `sendfile`: a chunk from the page cache to the socket, no user-space copy.
//! - [`schedule`] (pure policy), [`fetch`](mod@fetch) (the driver), `worker` and `conn` (the I/O):
//!   the joiner.
//! - [`progress`]: counters and [`SyncEvent`]s for metrics and Kubernetes Events.
//! - [`error`]: [`WeightsError`] with fixed categories.
//!
//! # Several joiners: a swarm, not k copies
//!
//! Every joiner also runs a [`ChunkServer`] on its own store while it fetches, and lists
//! the other joiners among its sources (the agent passes every other member of the rank
//! table, and its own place in the table as the first `stripe`; once every source said
//! whether it holds the whole set, the joiner stripes among the joiners found, by
//! address: `schedule`). A
//! joiner serves any chunk as soon as it has verified and written it, and tells others
//! what it holds through `Have` bitmaps (polled every `have_poll`, on a connection of their
//! own so the answer does not queue behind chunks). The scheduler asks full sources
//! (existing members) for chunks in a per-joiner order (its stripe, then the rest
//! shuffled), skipping chunks some fellow joiner already holds or is fetching, and asks
//! fellow joiners for what they hold, one chunk at a time each (`partial_parallelism`: a
//! fellow's uplink serves every joiner, and a request queued behind its others made each
//! chunk reach the last joiners later, which they paid for at the end). Sources learned
//! while a fetch runs (`FetchRequest::more_sources`: a joiner's early sync learning its
//! fellows) join it without losing what is in flight.
//! Effect with one existing member S and joiners J0..J2 on equal links of rate L: S's
//! uplink is split three ways into disjoint stripes (each ~L/3), and each joiner receives
//! the other two stripes from its peers (~2L/3), so every joiner's downlink runs at about
//! L and the whole group finishes in about one transfer time instead of three. Each chunk
//! is still verified by every joiner against the manifest, so a corrupt peer cannot
//! spread bad data.
//!
//! # Guarantees
//!
//! - A link (`current`) only ever points at a complete, verified, fsync'd version
//!   directory; moving one group's link never moves another's.
//! - A lost source's outstanding chunks are requeued; the transfer never restarts.
//! - A corrupt chunk is counted, reported, and fetched again from another source.
//! - Chunks already verified in staging survive a restart of the fetch (resume).

pub mod auth;
mod authorize;
pub mod bitset;
mod conn;
pub mod digest;
pub mod error;
pub mod fetch;
pub mod gc;
pub mod generate;
pub mod link;
mod lowat;
pub mod manifest;
pub mod progress;
pub mod protocol;
mod request;
pub mod schedule;
mod sendfile;
pub mod server;
pub mod source;
pub mod store;
#[cfg(test)]
pub(crate) mod test_dirs;
pub mod tool;
mod worker;

use std::path::Path;

pub use auth::{Authority, Grant, GroupId, GroupSecret, SharedSecret};
pub use bitset::ChunkBits;
pub use digest::{ChunkHash, Digest};
pub use error::{Result, SourceFailure, Subject, WeightsError};
pub use fetch::{FetchReport, FetchRequest, Timeouts, fetch};
pub use link::{CURRENT_LINK, CurrentLink};
pub use manifest::{
    ChunkTable, DEFAULT_CHUNK_SIZE, FORMER_DEFAULT_CHUNK_SIZE, FileEntry, IMPORT_CHUNK_SIZES,
    Manifest,
};
pub use progress::{Progress, ProgressSnapshot, SourceStats, SyncEvent};
pub use schedule::Place;
pub use server::{ChunkServer, ServerConfig, ServerStats};
pub use source::{Refusal, SourceDir, SourceRefused, SourceRoots};
pub use store::WeightStore;

/// `hcomm-agent weights manifest <dir> [--chunk-size N]`: the digest to put in
/// `spec.weights.digest` for the weights in `dir` (blocking; hashes every byte).
pub fn manifest_digest(dir: &Path, chunk_size: u64) -> Result<Digest> {
    Ok(Manifest::build(dir, chunk_size)?.digest())
}
