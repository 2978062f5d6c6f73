//! Temporary state folders of test control planes.
//!
//! Named `hcomm-cp-<owner pid>-<n>-<nanos>` under the system temp dir, so the
//! next `start` on the machine can tell a folder whose owner died without
//! cleaning up (SIGKILL, a CI timeout) and stop what it left running.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::warn;

use super::detached::DevCluster;
use super::process::is_alive;

/// Prefix of temporary state folders: `hcomm-cp-<owner pid>-...`.
const TEMP_PREFIX: &str = "hcomm-cp-";

/// Stops the components and removes the state of temporary control planes
/// whose owning process died without cleaning up (killed by a signal).
pub(crate) fn reap_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(TEMP_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if is_alive(owner) {
            continue;
        }
        let dir = entry.path();
        // Only a state file marks a crashed run; a folder without one was
        // stopped cleanly and kept on purpose (HCOMM_E2E_KEEP_STATE).
        let Ok(Some(stale)) = DevCluster::load(&dir) else {
            continue;
        };
        warn!(dir = %dir.display(), owner, "stopping a control plane left behind by a dead process");
        match stale.stop() {
            Ok(()) => {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Err(error) => warn!(%error, "could not stop the stale control plane"),
        }
    }
}

/// A fresh folder under the system temp dir.
pub(crate) fn fresh() -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    std::env::temp_dir().join(format!(
        "{TEMP_PREFIX}{}-{}-{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}
