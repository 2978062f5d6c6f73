//! Loading the weights the agent says are ready: pin the version directory and compute
//! the digest the group declares.
//!
//! The agent hands out `<weights-dir>/current`, a symlink it swaps atomically when a new
//! version is activated. A real engine maps the files once and keeps serving them; this
//! worker does the same by resolving the symlink ONCE to the immutable
//! `versions/<hex>` directory and digesting that. A later swap of `current` (another
//! version rolled onto the node) therefore never changes what this worker serves or says
//! it serves.

use std::path::Path;

use hcomm_agent::weights::{DEFAULT_CHUNK_SIZE, manifest_digest};

use super::state::{LoadedWeights, NO_WEIGHTS};
use crate::error::{Error, Result};

/// Loads the weights at `path` (`None`: the group has no weights). Blocking: reads and
/// hashes every byte, so call it from `spawn_blocking`.
pub fn load(path: Option<&Path>) -> Result<LoadedWeights> {
    let Some(path) = path else {
        return Ok(LoadedWeights {
            dir: None,
            digest: NO_WEIGHTS.into(),
        });
    };
    let weights_err = |message: String| Error::Weights {
        path: path.to_owned(),
        message,
    };
    let real = std::fs::canonicalize(path).map_err(|e| weights_err(format!("resolve: {e}")))?;
    if !real.is_dir() {
        return Err(weights_err(format!(
            "{} is not a directory",
            real.display()
        )));
    }
    // The agent's store is content-addressed: `versions/<hex>` holds exactly the set whose
    // manifest hashes to `<hex>`, verified chunk by chunk before it was installed. Taking
    // the digest from there costs nothing, so the worker is serving the moment the agent
    // says the weights are ready (the agent turns the readiness gate True right after).
    // Anywhere else, hash the set as `spec.weights.digest` is defined: SHA-256 of the
    // canonical manifest built with the default chunk size and chunk hash (a set digested
    // with `--chunk-hash sha256` then reports another digest than its spec's).
    let digest = match content_address(&real) {
        Some(hex) => format!("sha256:{hex}"),
        None => manifest_digest(&real, DEFAULT_CHUNK_SIZE)
            .map_err(|e| weights_err(format!("digest of {}: {e}", real.display())))?
            .to_string(),
    };
    Ok(LoadedWeights {
        dir: Some(real),
        digest,
    })
}

/// `<hex>` when `dir` is `…/versions/<64 lowercase hex digits>` (the agent's store).
fn content_address(dir: &Path) -> Option<String> {
    let name = dir.file_name()?.to_str()?;
    let parent = dir.parent()?.file_name()?.to_str()?;
    let is_hex = name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (parent == "versions" && is_hex).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_symlink_is_resolved_once_and_the_digest_is_the_manifest_one() {
        let root = std::env::temp_dir().join(format!("hcomm-ex-weights-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let v1 = root.join("versions/a");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("model.bin"), vec![7u8; 10_000]).unwrap();
        let current = root.join("current");
        std::os::unix::fs::symlink("versions/a", &current).unwrap();

        let w = load(Some(&current)).unwrap();
        assert_eq!(
            w.dir.as_deref(),
            Some(std::fs::canonicalize(&v1).unwrap().as_path())
        );
        let want = manifest_digest(&v1, DEFAULT_CHUNK_SIZE)
            .unwrap()
            .to_string();
        assert_eq!(w.digest, want);
        assert!(w.digest.starts_with("sha256:") && w.digest.len() == 7 + 64);

        assert_eq!(load(None).unwrap().digest, NO_WEIGHTS);
        // In the agent's content-addressed store the directory name is the digest.
        let hex = "ab".repeat(32);
        let stored = root.join("versions").join(&hex);
        std::fs::create_dir_all(&stored).unwrap();
        assert_eq!(load(Some(&stored)).unwrap().digest, format!("sha256:{hex}"));
        assert!(load(Some(&root.join("missing"))).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
