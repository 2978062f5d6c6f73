//! `promtool check metrics` — Prometheus' own linter — over a component's `/metrics` text,
//! so tests prove the exposition is what Prometheus tooling accepts (names with units and
//! `_total`, HELP and TYPE lines, base units), not merely what our encoder writes.
//!
//! promtool comes from `$HCOMM_PROMTOOL` when set, else from the pinned Prometheus release
//! the project builds into its cache (`controlplane::assets::promtool`, also built by
//! `cargo devcluster build`), so nothing has to be installed by hand.

use std::io::Write;
use std::process::{Command, Stdio};

/// Why the metrics text was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum PromtoolError {
    /// promtool could not be built from its pinned Go module (or `$HCOMM_PROMTOOL` is wrong).
    #[error("promtool unavailable: {0}")]
    Unavailable(#[from] crate::controlplane::Error),
    /// promtool would not start.
    #[error("starting promtool at {path}: {source}")]
    Start {
        /// The program that was run.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// promtool ran and found problems.
    #[error("promtool check metrics refused the exposition:\n{0}")]
    Refused(String),
    /// Talking to promtool failed.
    #[error("running promtool: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs `promtool check metrics` on `exposition`; Ok only when promtool reports nothing.
pub fn check_metrics(exposition: &str) -> Result<(), PromtoolError> {
    let program = crate::controlplane::assets::promtool()?;
    let mut child = Command::new(&program)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| PromtoolError::Start {
            path: program.display().to_string(),
            source,
        })?;
    child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?
        .write_all(exposition.as_bytes())?;
    let out = child.wait_with_output()?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && report.trim().is_empty() {
        Ok(())
    } else {
        Err(PromtoolError::Refused(report))
    }
}
