//! `hcomm-agent weights manifest|generate`: the offline side of weight sync, so operators
//! can compute the `spec.weights.digest` of a directory with the agent's own code (the
//! same function the first members check the source with), and produce reproducible
//! sets for demos and tests. Blocking; the output is returned, not printed, for tests.

use std::path::Path;

use super::error::Result;
use super::generate::{GenerateSpec, generate};
use super::{ChunkHash, Manifest};

/// `weights manifest`: `sha256:<hex>` plus a newline, or with `json` the canonical
/// manifest (its SHA-256 is the digest) plus a newline.
pub fn manifest(dir: &Path, chunk_size: u64, hash: ChunkHash, json: bool) -> Result<String> {
    let m = Manifest::build_with(dir, chunk_size, hash)?;
    Ok(if json {
        let mut s = String::from_utf8(m.canonical_bytes()).expect("JSON is UTF-8");
        s.push('\n');
        s
    } else {
        format!("{}\n", m.digest())
    })
}

/// What `weights manifest` says on stderr when `chunk_size` is one no agent imports with
/// (`IMPORT_CHUNK_SIZES`): the digest is right for the set, but a group whose first
/// members import the set from its declared source would refuse it as a mismatch.
pub fn chunk_size_note(chunk_size: u64) -> Option<String> {
    (!super::IMPORT_CHUNK_SIZES.contains(&chunk_size)).then(|| {
        let sizes: Vec<String> = super::IMPORT_CHUNK_SIZES
            .iter()
            .map(|s| format!("{} MiB", s >> 20))
            .collect();
        format!(
            "note: agents import a declared source only with chunks of {}; a digest of \
             {chunk_size}-byte chunks is for tools and tests, not spec.weights.digest",
            sizes.join(" or ")
        )
    })
}

/// `weights generate`: writes the set and reports what was written and its digest with
/// the default chunk size (what `spec.weights.digest` must carry).
pub fn generate_set(dir: &Path, spec: &GenerateSpec) -> Result<String> {
    let files = generate(dir, spec)?;
    let digest = super::manifest_digest(dir, super::DEFAULT_CHUNK_SIZE)?;
    Ok(format!(
        "wrote {} bytes in {} file(s) to {} (seed {})\n{digest}\n",
        spec.size,
        files.len(),
        dir.display(),
        spec.seed
    ))
}
