//! What the benchmark binaries (`scale-bench`, `scaleout-bench`, `agent-scale`) share:
//! their start (log filter, a 2-worker runtime, the error line and exit code), their
//! progress clock, and a process's CPU time and RSS read from `/proc`.

use std::future::Future;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};

/// Runs `bench` on a 2-worker runtime with the benchmarks' log filter (`HCOMM_BENCH_LOG`,
/// else warnings only) on stderr; a failure prints `<name> failed: <error chain>`.
pub fn main(name: &str, bench: impl Future<Output = Result<()>>) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HCOMM_BENCH_LOG")
                // The control plane's first seconds answer 500s; the client logs each.
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name} failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Progress lines on stderr, stamped with the time since the benchmark began.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    /// Starts the clock now.
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    /// Time since the clock started.
    pub fn elapsed(&self) -> std::time::Duration {
        self.0.elapsed()
    }

    /// Prints one progress line.
    pub fn say(&self, what: impl std::fmt::Display) {
        eprintln!("[{:>7.1}s] {what}", self.elapsed().as_secs_f64());
    }
}

/// (CPU seconds, RSS MiB) of process `pid`.
pub fn process(pid: u32) -> Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    Ok((cpu_seconds(&stat, clock_ticks())?, rss_mib(&status)?))
}

/// utime + stime (fields 14 and 15) in seconds; the fields after the `)` of the command.
pub fn cpu_seconds(stat: &str, ticks: f64) -> Result<f64> {
    let after = stat
        .rsplit_once(')')
        .ok_or_else(|| anyhow!("no command in /proc stat"))?
        .1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| -> Result<f64> {
        fields
            .get(i)
            .ok_or_else(|| anyhow!("short /proc stat"))?
            .parse::<f64>()
            .context("/proc stat field")
    };
    // After the command: state is field 3, so utime (14) is index 11, stime (15) 12.
    Ok((tick(11)? + tick(12)?) / ticks)
}

/// `VmRSS:` of `/proc/<pid>/status` in MiB.
pub fn rss_mib(status: &str) -> Result<f64> {
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .ok_or_else(|| anyhow!("no VmRSS"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib / 1024.0)
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux when it fails).
pub fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The value of the unlabelled metric `name` in a Prometheus text exposition.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_give_cpu_seconds_and_rss() {
        let stat = "42 (hcomm (op)) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        assert!((cpu_seconds(stat, 100.0).unwrap() - 3.0).abs() < 1e-9);
        assert!((rss_mib("Name:\tx\nVmRSS:\t  20480 kB\n").unwrap() - 20.0).abs() < 1e-9);
    }
}
