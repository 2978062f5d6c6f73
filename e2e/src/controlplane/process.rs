//! Process supervision for the control-plane components.
//!
//! Each component runs in a process group of its own (so a terminal's Ctrl-C
//! reaches the harness, not the children, and a stop reaches every process a
//! component forked), with stdout and stderr appended to one log file. Stopping
//! sends SIGTERM to the group, waits up to a grace period, then sends SIGKILL.
//! The same functions stop a detached control plane by pid (`devcluster down`).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::error::{Error, Result};

/// How often a stopping process is checked for having exited.
const POLL: Duration = Duration::from_millis(20);

/// A running component: its child process and log file.
#[derive(Debug)]
pub(crate) struct Supervised {
    component: &'static str,
    pid: u32,
    log: PathBuf,
    /// `None` once the process was reaped or detached.
    child: Option<Child>,
}

impl Supervised {
    /// Starts `binary args...` in a new process group, logging to `log`.
    pub(crate) fn spawn(
        component: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, &Path)],
        log: PathBuf,
    ) -> Result<Self> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(Error::io("open log", &log))?;
        let err = out.try_clone().map_err(Error::io("open log", &log))?;
        let mut command = Command::new(binary);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (key, value) in env {
            command.env(key, value);
        }
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().map_err(|source| Error::Spawn {
            component,
            binary: binary.to_owned(),
            source,
        })?;
        let pid = child.id();
        info!(component, pid, log = %log.display(), "started");
        Ok(Self {
            component,
            pid,
            log,
            child: Some(child),
        })
    }

    pub(crate) fn component(&self) -> &'static str {
        self.component
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// Fails with the log tail when the process has exited.
    pub(crate) fn check_running(&mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.child = None;
                Err(Error::Exited {
                    component: self.component,
                    status: status.to_string(),
                    log: self.log.clone(),
                    log_tail: log_tail(&self.log),
                })
            }
            Err(source) => Err(Error::Io {
                action: "wait for child",
                path: self.log.clone(),
                source,
            }),
        }
    }

    /// Sends SIGTERM to the process group (without waiting).
    pub(crate) fn terminate(&self) {
        if self.child.is_some() {
            signal_group(self.pid, "TERM");
        }
    }

    /// Waits for the process to exit until `deadline`, then SIGKILLs its group
    /// and reaps it.
    pub(crate) fn wait_or_kill(&mut self, deadline: Instant) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    debug!(component = self.component, pid = self.pid, %status, "exited");
                    // Anything the leader forked goes with its group.
                    signal_group(self.pid, "KILL");
                    return Ok(());
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => break,
            }
        }
        warn!(
            component = self.component,
            pid = self.pid,
            "no exit after SIGTERM, sending SIGKILL"
        );
        signal_group(self.pid, "KILL");
        let _ = child.kill();
        let _ = child.wait();
        Ok(())
    }

    /// Forgets the child without stopping it; returns its pid.
    pub(crate) fn detach(mut self) -> u32 {
        self.child = None;
        self.pid
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.terminate();
            let _ = self.wait_or_kill(Instant::now() + Duration::from_secs(5));
        }
    }
}

/// Stops all processes, newest first, in tiers: everything started after
/// the first `base` processes (the apiserver's clients) at once, then the base
/// processes one by one (the apiserver before etcd, so that it does not spend
/// its shutdown retrying a vanished etcd). Each tier gets `grace` after SIGTERM
/// before SIGKILL.
pub(crate) fn stop_all(
    processes: &mut Vec<Supervised>,
    base: usize,
    grace: Duration,
) -> Result<()> {
    let mut first_error = None;
    while !processes.is_empty() {
        let tier = processes.split_off(base.min(processes.len() - 1));
        for process in &tier {
            process.terminate();
        }
        let deadline = Instant::now() + grace;
        for mut process in tier.into_iter().rev() {
            if let Err(error) = process.wait_or_kill(deadline) {
                first_error.get_or_insert(error);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Stops a process that is not our child (a detached control plane), by its
/// pid, which is also its process group id.
pub(crate) fn stop_pid(component: &str, pid: u32, grace: Duration) -> Result<()> {
    if !is_alive(pid) {
        return Ok(());
    }
    signal_group(pid, "TERM");
    let deadline = Instant::now() + grace;
    while is_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    if is_alive(pid) {
        warn!(component, pid, "no exit after SIGTERM, sending SIGKILL");
        signal_group(pid, "KILL");
        let deadline = Instant::now() + Duration::from_secs(5);
        while is_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        if is_alive(pid) {
            return Err(Error::Unkillable {
                component: component.to_owned(),
                pid,
            });
        }
    } else {
        signal_group(pid, "KILL");
    }
    Ok(())
}

/// Whether a process with this pid exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Whether the live process `pid` has `marker` in its command line, to make
/// sure a pid from a state file was not reused by an unrelated process.
pub(crate) fn cmdline_contains(pid: u32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).contains(marker))
        .unwrap_or(false)
}

/// Sends a signal to a whole process group with the `kill` command (the
/// workspace forbids `unsafe`, so no libc).
fn signal_group(pgid: u32, signal: &str) {
    let result = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Err(error) = result {
        warn!(pgid, signal, %error, "could not run kill");
    }
}

/// The last lines of a log file, for error messages.
pub(crate) fn log_tail(path: &Path) -> String {
    const LINES: usize = 30;
    const MAX_BYTES: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return "(no log)".to_owned();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    use std::io::{Read, Seek, SeekFrom};
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LINES)..].join("\n")
}
