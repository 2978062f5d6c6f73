//! Fresh temporary folders for the weights unit tests (one per call, never reused).

use std::path::PathBuf;

/// `$TMPDIR/hcomm-<area>-<label>-<pid>-<nanos>`, removed first if it exists.
pub fn fresh(area: &str, label: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "hcomm-{area}-{label}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&p);
    p
}
