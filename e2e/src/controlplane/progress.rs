//! Progress of the long, silent steps of bringing the control-plane binaries: a cold
//! `go build` of Kubernetes takes about 10 minutes on 2 cores, and a newcomer's first
//! `cargo demo` would otherwise print nothing meanwhile.
//!
//! [`wait_with_progress`] waits for a child process with a deadline and reports a line
//! (step name, elapsed seconds, what the build log last said) at least every
//! [`PROGRESS_EVERY`]. Lines go to the reporter installed with [`on_progress`] (the demo
//! prints them with its clock), else to stderr.

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often a running step reports.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

type Reporter = Box<dyn Fn(&str) + Send + Sync>;

static REPORTER: OnceLock<Reporter> = OnceLock::new();

/// Sends progress lines to `report` instead of stderr (first call wins).
pub fn on_progress(report: impl Fn(&str) + Send + Sync + 'static) {
    let _ = REPORTER.set(Box::new(report));
}

/// Reports one progress line.
pub fn report(line: &str) {
    match REPORTER.get() {
        Some(report) => report(line),
        None => eprintln!("{line}"),
    }
}

/// The progress line of `step` after `elapsed`; `log` is the build log so far (`go build
/// -v` lists each package as it compiles it).
pub fn progress_line(step: &str, elapsed: Duration, log: &str) -> String {
    let packages = log.lines().filter(|l| !l.trim().is_empty()).count();
    let last = log.lines().rev().find(|l| !l.trim().is_empty());
    match last {
        Some(last) => format!(
            "{step}: {}s elapsed, {packages} packages compiled (last: {})",
            elapsed.as_secs(),
            last.trim()
        ),
        None => format!("{step}: {}s elapsed", elapsed.as_secs()),
    }
}

/// Why a waited-for child did not finish.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// Polling the child failed.
    #[error("wait for {step}: {source}")]
    Io {
        /// The step.
        step: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The deadline passed; the child was killed.
    #[error("{step} did not finish within {deadline:?}; stopped it")]
    Timeout {
        /// The step.
        step: String,
        /// The deadline.
        deadline: Duration,
    },
}

/// Waits for `child` (killed at `deadline`), reporting `step`'s progress every `every`
/// with the tail of `log`.
pub fn wait_with_progress(
    child: &mut Child,
    step: &str,
    log: &Path,
    every: Duration,
    deadline: Duration,
) -> Result<ExitStatus, WaitError> {
    let started = Instant::now();
    let mut next = started + every;
    report(&format!("{step}: started (log: {})", log.display()));
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                report(&format!(
                    "{step}: finished in {}s",
                    started.elapsed().as_secs()
                ));
                return Ok(status);
            }
            Ok(None) => {}
            Err(source) => {
                return Err(WaitError::Io {
                    step: step.to_owned(),
                    source,
                });
            }
        }
        if started.elapsed() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(WaitError::Timeout {
                step: step.to_owned(),
                deadline,
            });
        }
        if Instant::now() >= next {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            report(&progress_line(step, started.elapsed(), &text));
            next += every;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    #[test]
    fn a_progress_line_names_the_step_the_seconds_and_the_last_package() {
        let line = progress_line(
            "building kube",
            Duration::from_secs(31),
            "k8s.io/api/core/v1\nk8s.io/apiserver\n",
        );
        assert_eq!(
            line,
            "building kube: 31s elapsed, 2 packages compiled (last: k8s.io/apiserver)"
        );
        assert_eq!(
            progress_line("building kube", Duration::from_secs(3), ""),
            "building kube: 3s elapsed"
        );
    }

    #[test]
    fn a_slow_child_is_reported_while_it_runs_and_killed_at_its_deadline() {
        let dir = std::env::temp_dir().join(format!("hcomm-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("build.log");
        let file = std::fs::File::create(&log).unwrap();
        let mut child = Command::new("sh")
            .args(["-c", "echo pkg/a; sleep 1; echo pkg/b; sleep 1"])
            .stdin(Stdio::null())
            .stdout(file)
            .spawn()
            .unwrap();
        let status = wait_with_progress(
            &mut child,
            "test step",
            &log,
            Duration::from_millis(300),
            Duration::from_secs(20),
        )
        .unwrap();
        assert!(status.success());
        let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        let started = Instant::now();
        let error = wait_with_progress(
            &mut sleeper,
            "sleeper",
            &log,
            Duration::from_millis(300),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(matches!(error, WaitError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
