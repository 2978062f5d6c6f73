//! The `hcomm-worker` command line (clap) with its environment fallbacks, turned into a
//! [`WorkerConfig`]; and the duration syntax (`500ms`, `30s`, `2m`, bare seconds) both
//! binaries' flags take.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use clap::builder::NonEmptyStringValueParser;

use crate::error::{Error, Result};
use crate::worker::{DEFAULT_AGENT_SOCKET, WorkerConfig, default_listen};

/// `hcomm-worker [options]`: the reference inference worker. Inside a member Pod every
/// setting has a default or comes from the environment the operator gives the Pod.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "hcomm-worker",
    version,
    about = "The reference inference worker of an hcomm pool",
    args_override_self = true
)]
pub struct WorkerArgs {
    /// This worker's Pod name.
    #[arg(long, value_name = "NAME", env = "POD_NAME", value_parser = NonEmptyStringValueParser::new())]
    pub pod: String,
    /// This worker's namespace.
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Where the HTTP API listens [default: $POD_IP:8080, else 0.0.0.0:8080].
    #[arg(long, value_name = "IP:PORT", env = "HCOMM_WORKER_LISTEN")]
    pub listen: Option<String>,
    /// The node agent's local-API socket [default: /run/hcomm/agent.sock].
    #[arg(long, value_name = "PATH", env = hcomm_crds::contract::env::AGENT_SOCKET)]
    pub agent_socket: Option<String>,
    /// Time per generated token, in milliseconds [default: 20].
    #[arg(long, value_name = "MS")]
    pub step_ms: Option<u64>,
    /// The pool's role (prefill, decode, generic) [default: generic].
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// Most tokens one request may ask for [default: 4096].
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// How long SIGTERM waits for requests in flight [default: 25s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,
    /// Bound of one exchange with the agent [default: 2s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub agent_timeout: Option<Duration>,
    #[command(flatten)]
    pub log: hcomm_agent::cli::log_format::LogArgs,
}

impl WorkerArgs {
    /// The worker's configuration; `pod_ip` is `$POD_IP` (the listen default). Empty
    /// values count as unset.
    pub fn into_config(self, pod_ip: Option<&str>) -> Result<WorkerConfig> {
        let set = |v: Option<String>| v.filter(|v| !v.is_empty());
        let listen = set(self.listen).unwrap_or_else(|| default_listen(pod_ip));
        let listen = listen
            .parse()
            .map_err(|e| Error::Config(format!("--listen {listen:?}: {e}")))?;
        let socket = set(self.agent_socket).unwrap_or_else(|| DEFAULT_AGENT_SOCKET.into());
        let mut cfg = WorkerConfig::new(self.pod, listen, PathBuf::from(socket));
        cfg.namespace = set(self.namespace);
        if let Some(ms) = self.step_ms {
            cfg.step = Duration::from_millis(ms);
        }
        if let Some(role) = self.role {
            cfg.role = role;
        }
        if let Some(n) = self.max_tokens {
            cfg.max_tokens = n;
        }
        if let Some(d) = self.shutdown_grace {
            cfg.shutdown_grace = d;
        }
        if let Some(d) = self.agent_timeout {
            cfg.agent_timeout = d;
        }
        Ok(cfg)
    }
}

/// Parses `250ms`, `30s`, `2m`, `1h` or bare seconds (`30`, `0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 500ms, 30s, 2m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<WorkerArgs, clap::Error> {
        WorkerArgs::try_parse_from(std::iter::once("hcomm-worker").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        WorkerArgs::command().debug_assert();
    }

    #[test]
    fn flags_override_the_defaults() {
        let c = parse(&[
            "--pod",
            "w-0",
            "--namespace",
            "ns",
            "--listen",
            "127.0.0.1:9000",
            "--agent-socket",
            "/tmp/a.sock",
            "--step-ms",
            "5",
            "--role",
            "decode",
            "--max-tokens=64",
            "--shutdown-grace",
            "1m",
            "--agent-timeout",
            "500ms",
        ])
        .unwrap()
        .into_config(Some("10.0.0.7"))
        .unwrap();
        assert_eq!(c.pod, "w-0");
        assert_eq!(c.namespace.as_deref(), Some("ns"));
        assert_eq!(c.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(c.agent_socket, PathBuf::from("/tmp/a.sock"));
        assert_eq!(c.step, Duration::from_millis(5));
        assert_eq!(c.role, "decode");
        assert_eq!(c.max_tokens, 64);
        assert_eq!(c.shutdown_grace, Duration::from_secs(60));
        assert_eq!(c.agent_timeout, Duration::from_millis(500));
    }

    #[test]
    fn without_flags_the_documented_defaults_apply() {
        let c = parse(&["--pod", "w-0"])
            .unwrap()
            .into_config(Some("10.0.0.7"))
            .unwrap();
        let d = WorkerConfig::new("w-0", c.listen, DEFAULT_AGENT_SOCKET.into());
        assert_eq!(c.listen, "10.0.0.7:8080".parse().unwrap());
        assert_eq!(c.agent_socket, PathBuf::from(DEFAULT_AGENT_SOCKET));
        assert_eq!(
            (c.step, c.max_tokens, c.role.as_str()),
            (d.step, d.max_tokens, "generic")
        );
        assert_eq!(
            (c.shutdown_grace, c.agent_timeout),
            (d.shutdown_grace, d.agent_timeout)
        );
    }

    #[test]
    fn the_testbeds_and_examples_worker_arguments_parse() {
        // e2e/src/testbed/launch.rs: the example worker's container args.
        let c = parse(&["--pod", "w-0", "--step-ms", "20"]).unwrap();
        assert_eq!(c.step_ms, Some(20));
        // examples/decode-pool.yaml and prefill-pool.yaml: the worker container's args.
        for (args, role) in [
            (["--role", "decode", "--step-ms", "20"], "decode"),
            (["--role", "prefill", "--step-ms", "50"], "prefill"),
        ] {
            let c = parse(&[&["--pod", "w-0"][..], &args].concat()).unwrap();
            assert_eq!(c.role.as_deref(), Some(role));
        }
    }

    #[test]
    fn environment_fallbacks_are_declared() {
        let cmd = WorkerArgs::command();
        for (flag, var) in [
            ("pod", "POD_NAME"),
            ("namespace", "POD_NAMESPACE"),
            ("listen", "HCOMM_WORKER_LISTEN"),
            ("agent-socket", hcomm_crds::contract::env::AGENT_SOCKET),
        ] {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .unwrap_or_else(|| panic!("--{flag} missing"));
            assert_eq!(arg.get_env().and_then(|v| v.to_str()), Some(var), "{flag}");
        }
    }

    #[test]
    fn bad_values_and_unknown_flags_are_errors_naming_the_flag() {
        for (args, flag) in [
            (&["--pod", "w", "--bogus", "1"][..], "--bogus"),
            (&["--pod", "w", "--step-ms", "x"], "--step-ms"),
            (
                &["--pod", "w", "--shutdown-grace", "10x"],
                "--shutdown-grace",
            ),
            (&["--pod"], "--pod"),
            (
                &[
                    "--pod",
                    "a",
                    "--role",
                    "x",
                    "--role",
                    "y",
                    "--max-tokens",
                    "z",
                ],
                "--max-tokens",
            ),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
        let e = parse(&["--pod", "w", "--listen", "nowhere"])
            .unwrap()
            .into_config(None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--listen"), "{e}");
    }

    #[test]
    fn durations_read_like_kubectl_ones() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }
}
