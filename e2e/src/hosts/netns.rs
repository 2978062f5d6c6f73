//! Thin, synchronous wrappers around the `ip`, `tc` and `kill` programs: run one command,
//! turn a failure into an [`Error`] that names the command and its stderr. Also the
//! capability check that decides between real namespaces and [`Error::NotPermitted`].

use std::io::ErrorKind;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::error::{Error, Result};

/// Bit numbers in `/proc/self/status` `CapEff` (see capabilities(7)).
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Runs `program args...`, returns its stdout, or an error with the command line, exit
/// status and stderr.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String> {
    let command = format!("{program} {}", args.join(" "));
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| match source.kind() {
            ErrorKind::NotFound => Error::MissingTool {
                program: program.to_owned(),
                source,
            },
            _ => Error::Spawn {
                command: command.clone(),
                source,
            },
        })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if stderr.contains("Operation not permitted") {
        return Err(Error::NotPermitted {
            missing: format!("the permission `{command}` needs ({stderr})"),
        });
    }
    Err(Error::Command {
        command,
        status: output.status.to_string(),
        stderr,
    })
}

/// `ip args...` in the root namespace.
pub(crate) fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

/// `ip -n <netns> args...`: an `ip` command inside a namespace.
pub(crate) fn ip_in(netns: &str, args: &[&str]) -> Result<String> {
    let mut full = vec!["-n", netns];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// `tc args...`, optionally inside a namespace.
pub(crate) fn tc(netns: Option<&str>, args: &[&str]) -> Result<String> {
    let mut full = Vec::with_capacity(args.len() + 2);
    if let Some(ns) = netns {
        full.extend_from_slice(&["-n", ns]);
    }
    full.extend_from_slice(args);
    run("tc", &full)
}

/// Fails with [`Error::NotPermitted`] unless this process may create namespaces and links.
pub(crate) fn check_permitted() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|source| Error::Spawn {
        command: "read /proc/self/status".into(),
        source,
    })?;
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let missing: Vec<&str> = [
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ]
    .into_iter()
    .filter(|(bit, _)| cap_eff & (1 << bit) == 0)
    .map(|(_, name)| name)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::NotPermitted {
            missing: missing.join(" and "),
        })
    }
}

/// Names of all named network namespaces (`ip netns list`).
pub(crate) fn list_netns() -> Result<Vec<String>> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// Names of all links in the root namespace.
pub(crate) fn list_links() -> Result<Vec<String>> {
    let out = ip(&["-o", "link", "show"])?;
    // "12: name@peer: <FLAGS> ..." — keep the part before '@' / ':'.
    Ok(out
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect())
}

/// Pids of the processes living in a namespace (`ip netns pids`).
pub(crate) fn netns_pids(netns: &str) -> Result<Vec<u32>> {
    Ok(ip(&["netns", "pids", netns])?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// SIGKILLs every process in the namespace and waits (bounded) until none is left, so the
/// namespace really disappears when it is deleted.
pub(crate) fn kill_all_in(netns: &str, deadline: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let pids = netns_pids(netns)?;
        if pids.is_empty() {
            return Ok(());
        }
        if start.elapsed() > deadline {
            return Err(Error::ProcessesLinger {
                netns: netns.to_owned(),
                pids,
            });
        }
        let pid_args: Vec<String> = pids.iter().map(u32::to_string).collect();
        let mut args = vec!["-KILL"];
        args.extend(pid_args.iter().map(String::as_str));
        // A pid may exit between listing and killing; that error is expected.
        let _ = run("kill", &args);
        thread::sleep(Duration::from_millis(20));
    }
}

/// Deletes a link, treating "it is already gone" as success.
pub(crate) fn delete_link(name: &str) -> Result<()> {
    match ip(&["link", "del", name]) {
        Err(Error::Command { stderr, .. }) if is_missing(&stderr) => Ok(()),
        other => other.map(drop),
    }
}

/// Deletes a namespace, treating "it is already gone" as success.
pub(crate) fn delete_netns(name: &str) -> Result<()> {
    match ip(&["netns", "del", name]) {
        Err(Error::Command { stderr, .. }) if is_missing(&stderr) => Ok(()),
        other => other.map(drop),
    }
}

fn is_missing(stderr: &str) -> bool {
    stderr.contains("Cannot find device")
        || stderr.contains("No such file")
        || stderr.contains("does not exist")
}
