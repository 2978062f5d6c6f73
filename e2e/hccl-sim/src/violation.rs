//! Violations: what a product must never do to the real runtime (free device memory a
//! collective still uses, free twice, touch freed memory, destroy a busy stream, run
//! collectives that do not match across ranks). Each is printed to stderr and appended, one
//! line each, to the file named by [`VIOLATIONS_ENV`], which tests read and require empty. On
//! real NPUs these are silent memory corruption or hangs; here they are loud.

use std::io::Write;
use std::sync::Mutex;

/// Environment variable naming the file violations are appended to.
pub const VIOLATIONS_ENV: &str = "HCOMM_SIM_VIOLATIONS";

static FILE_LOCK: Mutex<()> = Mutex::new(());

/// Records one violation of kind `kind` (a short fixed word) with a message.
pub fn record(kind: &str, message: &str) {
    let line = format!("{kind}: {message} (pid {})", std::process::id());
    eprintln!("hccl-sim VIOLATION {line}");
    let Some(path) = std::env::var_os(VIOLATIONS_ENV) else {
        return;
    };
    let _guard = FILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(mut f) => {
            let _ = writeln!(f, "{line}");
        }
        Err(e) => eprintln!("hccl-sim: cannot record the violation in {path:?}: {e}"),
    }
}
