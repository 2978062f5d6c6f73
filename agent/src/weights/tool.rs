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
