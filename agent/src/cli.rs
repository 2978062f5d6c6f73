//! Command-line parsing (hand-rolled: two subcommands and flat `--flag value` options).
//!
//! ```text
//! hcomm-agent run --node-name NODE [--data-address IP] [--management-interface IF]
//!     [--cpu-devices N] [--socket PATH] [--allowed-uid UID]... [--metrics-addr ADDR]
//!     [--probe-port P] [--comm-port-base P] [--probe-secret-file F] [--group-secret-dir D]
//!     [--poll-interval-ms MS] [--health-interval-secs S] [--inventory-interval-secs S]
//!     [--retry-backoff-ms MS] [--shm-min-bytes B] [--weights-dir D] [--weights-port P]
//!     [--verify-timeout-secs S] [--ascend-root D] [--super-pod X] [--rack X] [--switch X]
//! hcomm-agent diagnose [--socket-ifname S] [--data-address IP] [--management-interface IF]
//!     [--peers name=ip,...] [--rank-table FILE] [--node-name NODE] [--devices 0,1]
//!     [--visible-devices 0,1] [--cpu-devices N] [--pod-epoch N] [--group-epoch N]
//!     [--weights-synced true|false] [--probe-port P] [--probe-secret-file F]
//!     [--probe-timeout-ms MS] [--comm-port-base P] [--agent-url URL] [--log-path P]...
//!     [--message-bytes N] [--format table|tsv]
//! ```
//! `--node-name` defaults to `$NODE_NAME`; `--visible-devices` to
//! `$ASCEND_VISIBLE_DEVICES`; `--pod-epoch` to `$HCOMM_EPOCH`.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::AgentConfig;
use crate::diagnose::DiagnoseArgs;
use crate::error::{Error, Result};
use crate::nic::verify::parse_device_list;

/// A parsed command line.
#[derive(Debug)]
pub enum Command {
    Run(Box<AgentConfig>),
    Diagnose(Box<DiagnoseArgs>),
    Help,
}

/// The usage text.
pub const USAGE: &str = "usage: hcomm-agent run --node-name NODE [options] | hcomm-agent diagnose [options] (see agent/README.md)";

struct Flags {
    pairs: Vec<(String, String)>,
    used: Vec<String>,
}

impl Flags {
    fn parse(args: &[String]) -> Result<Flags> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let Some(flag) = a.strip_prefix("--") else {
                return Err(Error::Config(format!("unexpected argument {a:?}")));
            };
            let (k, v) = match flag.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => {
                    let v = it
                        .next()
                        .ok_or_else(|| Error::Config(format!("--{flag} needs a value")))?;
                    (flag.to_owned(), v.clone())
                }
            };
            pairs.push((k, v));
        }
        Ok(Flags {
            pairs,
            used: Vec::new(),
        })
    }

    fn all(&mut self, k: &str) -> Vec<String> {
        self.used.push(k.to_owned());
        self.pairs
            .iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn one(&mut self, k: &str) -> Option<String> {
        self.all(k).pop()
    }

    fn parsed<T: FromStr>(&mut self, k: &str) -> Result<Option<T>> {
        self.one(k)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|_| Error::Config(format!("--{k}: cannot parse {v:?}")))
            })
            .transpose()
    }

    fn finish(self) -> Result<()> {
        if let Some((k, _)) = self.pairs.iter().find(|(k, _)| !self.used.contains(k)) {
            return Err(Error::Config(format!("unknown flag --{k}")));
        }
        Ok(())
    }
}

fn read_secret(path: Option<String>) -> Result<Option<Arc<Vec<u8>>>> {
    path.map(|p| {
        std::fs::read(&p)
            .map(|s| Arc::new(s.trim_ascii().to_vec()))
            .map_err(Error::io(format!("read secret {p}")))
    })
    .transpose()
}

fn devices(v: Option<String>, what: &str) -> Result<Option<Vec<i32>>> {
    v.map(|s| {
        parse_device_list(&s)
            .ok_or_else(|| Error::Config(format!("{what}: {s:?} is not a device list")))
    })
    .transpose()
}

fn run_args(mut f: Flags) -> Result<AgentConfig> {
    let node = f
        .one("node-name")
        .or_else(|| std::env::var("NODE_NAME").ok())
        .ok_or_else(|| Error::Config("--node-name (or $NODE_NAME) is required".into()))?;
    let mut c = AgentConfig::new(node);
    c.data_address = f.parsed("data-address")?;
    c.management_interface = f.one("management-interface");
    c.sources.cpu_devices = f.parsed("cpu-devices")?;
    if let Some(p) = f.one("socket") {
        c.socket_path = p.into();
    }
    for u in f.all("allowed-uid") {
        c.allowed_uids.push(
            u.parse()
                .map_err(|_| Error::Config(format!("--allowed-uid {u:?}")))?,
        );
    }
    if let Some(a) = f.parsed("metrics-addr")? {
        c.metrics_addr = a;
    }
    if let Some(p) = f.parsed("probe-port")? {
        c.probe_port = p;
    }
    if let Some(p) = f.parsed("comm-port-base")? {
        c.comm_port_base = p;
    }
    if let Some(s) = read_secret(f.one("probe-secret-file"))? {
        c.probe_secret = s;
    }
    c.group_secret_dir = f.one("group-secret-dir").map(PathBuf::from);
    if let Some(ms) = f.parsed::<u64>("poll-interval-ms")? {
        c.poll_interval = Duration::from_millis(ms.max(10));
    }
    if let Some(s) = f.parsed::<f64>("health-interval-secs")? {
        c.health_interval = Duration::from_secs_f64(s.max(0.05));
    }
    if let Some(s) = f.parsed::<f64>("inventory-interval-secs")? {
        c.inventory_interval = Duration::from_secs_f64(s.max(0.1));
    }
    if let Some(ms) = f.parsed::<u64>("retry-backoff-ms")? {
        c.retry_backoff = Duration::from_millis(ms.max(10));
    }
    if let Some(b) = f.parsed("shm-min-bytes")? {
        c.shm_min_bytes = b;
    }
    // `--weights-root` is the older spelling of `--weights-dir`.
    let (dir, root) = (f.one("weights-dir"), f.one("weights-root"));
    if let Some(d) = dir.or(root) {
        c.weights_root = d.into();
    }
    if let Some(p) = f.parsed("weights-port")? {
        c.weights_port = p;
    }
    c.verify_timeout_cap = f
        .parsed::<f64>("verify-timeout-secs")?
        .map(Duration::from_secs_f64);
    if let Some(d) = f.one("ascend-root") {
        c.sources.ascend_root = d.into();
    }
    c.topology.super_pod = f.one("super-pod");
    c.topology.rack = f.one("rack");
    c.topology.switch = f.one("switch");
    f.finish()?;
    Ok(c)
}

fn diagnose_args(mut f: Flags) -> Result<DiagnoseArgs> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let defaults = AgentConfig::new("");
    let a = DiagnoseArgs {
        socket_ifname: f.one("socket-ifname").or_else(|| env("HCCL_SOCKET_IFNAME")),
        data_address: f.parsed("data-address")?,
        management: f.one("management-interface"),
        peers: f
            .one("peers")
            .map(|p| crate::diagnose::collect::parse_peers(&p).map_err(Error::Config))
            .transpose()?
            .unwrap_or_default(),
        probe_port: f.parsed("probe-port")?.unwrap_or(defaults.probe_port),
        probe_secret: read_secret(f.one("probe-secret-file"))?.unwrap_or(defaults.probe_secret),
        probe_timeout: Duration::from_millis(f.parsed("probe-timeout-ms")?.unwrap_or(3000)),
        rank_table: f
            .one("rank-table")
            .or_else(|| env("RANK_TABLE_FILE"))
            .map(PathBuf::from),
        node: f.one("node-name").or_else(|| env("NODE_NAME")),
        devices: devices(f.one("devices"), "--devices")?,
        visible_devices: devices(
            f.one("visible-devices")
                .or_else(|| env("ASCEND_VISIBLE_DEVICES")),
            "--visible-devices",
        )?,
        cpu_devices: f.parsed("cpu-devices")?,
        pod_epoch: match f.parsed("pod-epoch")? {
            Some(e) => Some(e),
            None => env("HCOMM_EPOCH").and_then(|e| e.parse().ok()),
        },
        group_epoch: f.parsed("group-epoch")?,
        weights_synced: f.parsed("weights-synced")?,
        comm_port_base: f
            .parsed("comm-port-base")?
            .unwrap_or(defaults.comm_port_base),
        agent_url: f.one("agent-url"),
        log_paths: f.all("log-path").into_iter().map(PathBuf::from).collect(),
        message_bytes: f.parsed("message-bytes")?,
        tsv: match f.one("format").as_deref() {
            None | Some("table") => false,
            Some("tsv") => true,
            Some(other) => {
                return Err(Error::Config(format!(
                    "--format {other:?}: expected table or tsv"
                )));
            }
        },
    };
    f.finish()?;
    Ok(a)
}

/// Parses `args` (without the program name).
pub fn parse(args: &[String]) -> Result<Command> {
    match args.split_first() {
        Some((cmd, rest)) if cmd == "run" => {
            Ok(Command::Run(Box::new(run_args(Flags::parse(rest)?)?)))
        }
        Some((cmd, rest)) if cmd == "diagnose" => Ok(Command::Diagnose(Box::new(diagnose_args(
            Flags::parse(rest)?,
        )?))),
        Some((cmd, _)) if cmd == "help" || cmd == "--help" || cmd == "-h" => Ok(Command::Help),
        Some((cmd, _)) => Err(Error::Config(format!("unknown command {cmd:?}; {USAGE}"))),
        None => Ok(Command::Help),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn run_flags_fill_the_config_in_both_spellings() {
        let Command::Run(c) = parse(&args("run --node-name n1 --data-address=198.18.0.10 --cpu-devices 2 --allowed-uid 0 --allowed-uid 1000 --health-interval-secs 0.5")).unwrap() else {
            panic!("not run")
        };
        assert_eq!(c.node_name, "n1");
        assert_eq!(c.data_address.unwrap().to_string(), "198.18.0.10");
        assert_eq!(c.sources.cpu_devices, Some(2));
        assert_eq!(c.allowed_uids, [0, 1000]);
        assert_eq!(c.health_interval, Duration::from_millis(500));
        assert_eq!(c.weights_port, 7512);
        assert_eq!(c.weights_root, PathBuf::from("/var/lib/hcomm/weights"));
        let Command::Run(c) = parse(&args(
            "run --node-name n1 --weights-dir /w --weights-port 9000",
        ))
        .unwrap() else {
            panic!("not run")
        };
        assert_eq!(
            (c.weights_root.as_path(), c.weights_port),
            (std::path::Path::new("/w"), 9000)
        );
        let Command::Run(c) = parse(&args("run --node-name n1 --weights-root /old")).unwrap()
        else {
            panic!("not run")
        };
        assert_eq!(c.weights_root, PathBuf::from("/old"));
    }

    #[test]
    fn unknown_flags_bad_values_and_missing_values_are_errors() {
        assert!(
            parse(&args("run --node-name n --bogus 1"))
                .unwrap_err()
                .to_string()
                .contains("--bogus")
        );
        assert!(
            parse(&args("run --node-name n --cpu-devices x"))
                .unwrap_err()
                .to_string()
                .contains("cpu-devices")
        );
        assert!(parse(&args("run --node-name")).is_err());
        assert!(parse(&args("explode")).is_err());
        assert!(matches!(parse(&[]).unwrap(), Command::Help));
    }

    #[test]
    fn diagnose_flags_parse() {
        let Command::Diagnose(d) = parse(&args("diagnose --socket-ifname mgmt --peers a=198.18.0.11 --devices 0,1 --visible-devices 1,0 --log-path /x --log-path /y --weights-synced false")).unwrap() else {
            panic!("not diagnose")
        };
        assert_eq!(d.socket_ifname.as_deref(), Some("mgmt"));
        assert_eq!(d.peers.len(), 1);
        assert_eq!(d.visible_devices, Some(vec![1, 0]));
        assert_eq!(d.log_paths.len(), 2);
        assert_eq!(d.weights_synced, Some(false));
    }
}
