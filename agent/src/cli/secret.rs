//! The agents' shared secret on the command line (`run` and `diagnose`): which file it
//! comes from, and the one explicit way to use the public built-in one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{ArgAction, Args};

use crate::config::INSECURE_DEFAULT_SECRET;
use crate::error::{Error, Result};

/// Where the Helm chart mounts the agents' shared secret (Secret `<release>-agent`, key
/// `probe-secret`); `diagnose` run inside the agent's Pod finds it there.
pub const CHART_SECRET_PATH: &str = "/etc/hcomm/secret/probe-secret";

/// The secret flags both `run` and `diagnose` take.
#[derive(Debug, Clone, Args)]
pub struct SecretArgs {
    /// File holding the agents' shared secret, which authenticates link probes and
    /// weight-sync connections between nodes (the chart mounts it at
    /// /etc/hcomm/secret/probe-secret).
    #[arg(long, value_name = "FILE")]
    pub probe_secret_file: Option<PathBuf>,
    /// Use the public built-in secret (local development and tests only).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true", value_name = "BOOL")]
    pub insecure_default_secret: bool,
}

impl SecretArgs {
    /// The secret: `--probe-secret-file`, else (for `diagnose`, `chart_path`) the chart's
    /// mount if present. The built-in [`INSECURE_DEFAULT_SECRET`] is public, so it is never
    /// a silent fallback: only `--insecure-default-secret` selects it; without either the
    /// command refuses to start.
    pub fn resolve(&self, chart_path: Option<&str>) -> Result<Arc<Vec<u8>>> {
        if let Some(p) = &self.probe_secret_file {
            return read_secret(p);
        }
        if let Some(p) = chart_path.filter(|p| Path::new(p).is_file()) {
            return read_secret(Path::new(p));
        }
        if self.insecure_default_secret {
            return Ok(Arc::new(INSECURE_DEFAULT_SECRET.to_vec()));
        }
        Err(Error::Config(format!(
            "no --probe-secret-file: the agents' shared secret authenticates link probes and \
             weight-sync connections between nodes, and there is no safe default. Pass \
             --probe-secret-file FILE (the Helm chart always does: Secret <release>-agent, key \
             probe-secret, mounted at {CHART_SECRET_PATH}), or --insecure-default-secret for \
             local development and tests only"
        )))
    }
}

fn read_secret(p: &Path) -> Result<Arc<Vec<u8>>> {
    let s = std::fs::read(p).map_err(Error::io(format!("read secret {}", p.display())))?;
    let s = s.trim_ascii();
    if s.is_empty() {
        return Err(Error::Config(format!(
            "--probe-secret-file {} is empty; the agents' shared secret must not be",
            p.display()
        )));
    }
    Ok(Arc::new(s.to_vec()))
}
