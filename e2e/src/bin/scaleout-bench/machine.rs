//! The machine around the benchmark: CPU accounting from `/proc` (whole machine and the
//! agents' processes) and the provenance lines of the report (date, host, revision,
//! build).

use std::process::Command;

use hcomm_e2e::testbed::{self, binaries};

/// Where and when the benchmark ran ([`provenance`]).
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    pub date: String,
    pub host: String,
    pub revision: String,
    pub build: String,
}

/// Where and when the benchmark ran, for the report's header.
pub fn provenance() -> Provenance {
    Provenance {
        date: utc_now(),
        host: host_line(),
        revision: git_rev(),
        build: build_line(),
    }
}

/// (busy, total) jiffies of all cores, from `/proc/stat`.
pub fn machine_cpu() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

pub fn busy_between(a: (u64, u64), b: (u64, u64)) -> f64 {
    let total = b.1.saturating_sub(a.1);
    if total == 0 {
        return 0.0;
    }
    b.0.saturating_sub(a.0) as f64 / total as f64
}

/// CPU seconds (user + system) the processes used so far.
pub fn process_cpu_s(pids: &[u32]) -> f64 {
    let hz = hcomm_e2e::bench::clock_ticks();
    pids.iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            hcomm_e2e::bench::cpu_seconds(&stat, hz).ok()
        })
        .sum()
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn host_line() -> String {
    let uname = Command::new("uname")
        .args(["-srm"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib as f64 / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    format!("{uname}, {cores} cores, {mem_gib:.0} GiB")
}

fn git_rev() -> String {
    let root = testbed::pools::workspace_root();
    let rev = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(root)
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{rev} + uncommitted changes")
    } else {
        rev
    }
}

/// The profile of the agent the testbed runs (the folder it was found in).
fn build_line() -> String {
    match binaries::find(binaries::AGENT) {
        Ok(p) => {
            let profile = p
                .parent()
                .and_then(|d| d.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let kind = match profile.as_str() {
                "debug" => "debug build (dependencies at opt-level 1)",
                "release" => "release build",
                _ => "build",
            };
            let built = Command::new("date")
                .args(["-u", "-r", &p.display().to_string(), "+%Y-%m-%dT%H:%M:%SZ"])
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default();
            format!(
                "{kind} of agent, operator, worker ({}, built {built})",
                p.display()
            )
        }
        Err(_) => "agent not found".into(),
    }
}
