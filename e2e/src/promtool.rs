//! `promtool check metrics` — Prometheus' own linter — over a component's `/metrics` text,
//! so tests prove the exposition is what Prometheus tooling accepts (names with units and
//! `_total`, HELP and TYPE lines, base units), not merely what our encoder writes.

use std::io::Write;
use std::process::{Command, Stdio};

/// Why the metrics text was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum PromtoolError {
    /// promtool is not installed.
    #[error("promtool not found ({0}); install Debian's `prometheus` package (`.ci/run` does)")]
    Missing(std::io::Error),
    /// promtool ran and found problems.
    #[error("promtool check metrics refused the exposition:\n{0}")]
    Refused(String),
    /// Talking to promtool failed.
    #[error("running promtool: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs `promtool check metrics` on `exposition`; Ok only when promtool reports nothing.
pub fn check_metrics(exposition: &str) -> Result<(), PromtoolError> {
    let program = std::env::var("HCOMM_PROMTOOL").unwrap_or_else(|_| "promtool".to_owned());
    let mut child = Command::new(program)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(PromtoolError::Missing)?;
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
