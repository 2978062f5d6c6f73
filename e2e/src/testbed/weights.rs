//! Model weights for pools under test: a deterministic set written by the agent's own
//! generator (`hcomm-agent weights generate`), and its digest as `spec.weights.digest`
//! must carry it (`hcomm-agent weights manifest`) — the same commands a user runs.

use std::path::Path;
use std::process::Command;

use super::binaries;
use super::error::{Error, Result};

/// Writes `mib` MiB of pseudo-random weights for `seed` into `dir` (replacing what is
/// there) and returns their digest (`sha256:<hex>`). Same size and seed, same digest.
pub fn generate(dir: &Path, mib: u64, seed: u64) -> Result<String> {
    let agent = binaries::find(binaries::AGENT)?;
    let run = |args: &[&str]| -> Result<String> {
        let what = format!("hcomm-agent {}", args.join(" "));
        let out = Command::new(&agent)
            .args(args)
            .output()
            .map_err(Error::io(what.clone()))?;
        if !out.status.success() {
            return Err(Error::Io {
                what,
                source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let _ = std::fs::remove_dir_all(dir);
    let d = dir.display().to_string();
    let (size, seed) = (format!("{mib}MiB"), seed.to_string());
    run(&["weights", "generate", &d, "--size", &size, "--seed", &seed])?;
    let digest = run(&["weights", "manifest", &d])?;
    if !(digest.starts_with("sha256:") && digest.len() == 71) {
        return Err(Error::Io {
            what: format!("hcomm-agent weights manifest {d}"),
            source: std::io::Error::other(format!("unexpected digest {digest:?}")),
        });
    }
    Ok(digest)
}
