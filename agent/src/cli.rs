//! Command-line parsing (hand-rolled: three subcommands, flat `--flag value` options, a
//! positional directory for `weights`).
//!
//! ```text
//! hcomm-agent run --node-name NODE (--probe-secret-file F | --insecure-default-secret)
//!     [--data-address IP] [--management-interface IF] [--socket-ifname S]
//!     [--worker-ready-timeout-secs S]
//!     [--cpu-devices N] [--socket PATH] [--allowed-uid UID]... [--metrics-addr ADDR]
//!     [--probe-port P] [--comm-port-base P] [--group-secret-dir D]
//!     [--poll-interval-ms MS] [--health-interval-secs S] [--inventory-interval-secs S]
//!     [--retry-backoff-ms MS] [--shm-min-bytes B] [--weights-dir D] [--weights-port P]
//!     [--weights-verify-on-serve true|false] [--weights-gc-grace-secs S|off]
//!     [--verify-timeout-secs S] [--ascend-root D] [--super-pod X] [--rack X] [--switch X]
//! hcomm-agent diagnose [--socket-ifname S] [--data-address IP] [--management-interface IF]
//!     [--peers name=ip,...] [--rank-table FILE] [--node-name NODE] [--devices 0,1]
//!     [--visible-devices 0,1] [--cpu-devices N] [--pod-epoch N] [--group-epoch N]
//!     [--weights-synced true|false] [--probe-port P]
//!     [--probe-secret-file F | --insecure-default-secret]
//!     [--probe-timeout-ms MS] [--comm-port-base P] [--agent-url URL] [--log-path P]...
//!     [--message-bytes N] [--format table|tsv]
//!     [--pod NAME | --group NAME] [--namespace NS] [--api-timeout-ms MS]
//! hcomm-agent weights manifest DIR [--chunk-size N] [--json]
//! hcomm-agent weights generate DIR --size BYTES --seed N [--files K]
//! ```
//! Sizes take units (`4MiB`, `1GB`). `diagnose` without `--probe-secret-file` reads the
//! chart's mount ([`CHART_SECRET_PATH`]) when present.
//! `--node-name` defaults to `$NODE_NAME`; `--visible-devices` to
//! `$ASCEND_VISIBLE_DEVICES`; `--pod-epoch` to `$HCOMM_EPOCH`; `--namespace` to
//! `$POD_NAMESPACE`, else `default`. With `--pod`/`--group`, `diagnose` reads the member's
//! conditions, epochs and rank table from the API server (5 s per call by default).

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{AgentConfig, INSECURE_DEFAULT_SECRET};
use crate::diagnose::DiagnoseArgs;
use crate::error::{Error, Result};
use crate::nic::verify::parse_device_list;
use crate::weights::DEFAULT_CHUNK_SIZE;
use crate::weights::generate::GenerateSpec;

/// A parsed command line.
#[derive(Debug)]
pub enum Command {
    Run(Box<AgentConfig>),
    Diagnose(Box<DiagnoseArgs>),
    Weights(WeightsCommand),
    Help,
}

/// `hcomm-agent weights ...`: offline tools around weights sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsCommand {
    /// Print the digest `spec.weights.digest` must carry for `dir` (or, `json`, the
    /// canonical manifest, whose SHA-256 is that digest).
    Manifest {
        dir: PathBuf,
        chunk_size: u64,
        json: bool,
    },
    /// Write a deterministic pseudo-random set into `dir`.
    Generate { dir: PathBuf, spec: GenerateSpec },
}

/// The usage text.
pub const USAGE: &str = "usage: hcomm-agent run --node-name NODE [options] | hcomm-agent diagnose [options] | hcomm-agent weights manifest DIR [--chunk-size N] [--json] | hcomm-agent weights generate DIR --size BYTES|256MiB --seed N [--files K] (see agent/README.md)";

/// Parses a byte count: digits with an optional unit `B`, `KiB`, `MiB`, `GiB`, `TiB`
/// (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000), e.g. `256MiB` (pure).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn size_flag(f: &mut Flags, k: &str) -> Result<Option<u64>> {
    f.one(k)
        .map(|v| {
            parse_size(&v).ok_or_else(|| {
                Error::Config(format!(
                    "--{k}: {v:?} is not a byte count (e.g. 4194304, 4MiB, 1GB)"
                ))
            })
        })
        .transpose()
}

fn weights_args(args: &[String]) -> Result<WeightsCommand> {
    let Some((sub, rest)) = args.split_first() else {
        return Err(Error::Config(format!(
            "weights: manifest or generate? {USAGE}"
        )));
    };
    let mut f = Flags::parse(rest, &["json"])?;
    let cmd = match sub.as_str() {
        "manifest" => WeightsCommand::Manifest {
            dir: f.take_positional("the weights directory")?.into(),
            chunk_size: size_flag(&mut f, "chunk-size")?.unwrap_or(DEFAULT_CHUNK_SIZE),
            json: f.switch("json")?,
        },
        "generate" => WeightsCommand::Generate {
            dir: f.take_positional("the output directory")?.into(),
            spec: GenerateSpec {
                size: size_flag(&mut f, "size")?
                    .ok_or_else(|| Error::Config("weights generate: --size is required".into()))?,
                seed: f
                    .parsed("seed")?
                    .ok_or_else(|| Error::Config("weights generate: --seed is required".into()))?,
                files: f.parsed("files")?.unwrap_or(4),
            },
        },
        other => {
            return Err(Error::Config(format!(
                "unknown weights command {other:?}; {USAGE}"
            )));
        }
    };
    f.finish()?;
    Ok(cmd)
}

struct Flags {
    pairs: Vec<(String, String)>,
    used: Vec<String>,
    /// Arguments that are not flags, in order (only some commands take them).
    positional: Vec<String>,
}

impl Flags {
    /// `switches` are the flags that take no value (`--json`); they read as `"true"`.
    fn parse(args: &[String], switches: &[&str]) -> Result<Flags> {
        let mut pairs = Vec::new();
        let mut positional = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let Some(flag) = a.strip_prefix("--") else {
                positional.push(a.clone());
                continue;
            };
            let (k, v) = match flag.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None if switches.contains(&flag) => (flag.to_owned(), "true".to_owned()),
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
            positional,
        })
    }

    /// Whether a switch was given (`--x`, or `--x=true|false`).
    fn switch(&mut self, k: &str) -> Result<bool> {
        Ok(self.parsed::<bool>(k)?.unwrap_or(false))
    }

    /// The one positional argument a command requires.
    fn take_positional(&mut self, what: &str) -> Result<String> {
        match self.positional.len() {
            1 => Ok(self.positional.remove(0)),
            0 => Err(Error::Config(format!("{what} is required; {USAGE}"))),
            _ => Err(Error::Config(format!(
                "unexpected argument {:?}",
                self.positional[1]
            ))),
        }
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
        if let Some(a) = self.positional.first() {
            return Err(Error::Config(format!("unexpected argument {a:?}")));
        }
        if let Some((k, _)) = self.pairs.iter().find(|(k, _)| !self.used.contains(k)) {
            return Err(Error::Config(format!("unknown flag --{k}")));
        }
        Ok(())
    }
}

/// Where the Helm chart mounts the agents' shared secret (Secret `<release>-agent`, key
/// `probe-secret`); `diagnose` run inside the agent's Pod finds it there.
pub const CHART_SECRET_PATH: &str = "/etc/hcomm/secret/probe-secret";

fn read_secret(p: &str) -> Result<Arc<Vec<u8>>> {
    let s = std::fs::read(p).map_err(Error::io(format!("read secret {p}")))?;
    let s = s.trim_ascii();
    if s.is_empty() {
        return Err(Error::Config(format!(
            "--probe-secret-file {p} is empty; the agents' shared secret must not be"
        )));
    }
    Ok(Arc::new(s.to_vec()))
}

/// The agents' shared secret (it authenticates link probes and weight-sync connections
/// between nodes): `--probe-secret-file`, else (for `diagnose`, `chart_path`) the chart's
/// mount if present. The built-in [`INSECURE_DEFAULT_SECRET`] is public, so it is never a
/// silent fallback: only `--insecure-default-secret` (local development and tests) selects
/// it; without either the command refuses to start.
fn shared_secret(f: &mut Flags, chart_path: Option<&str>) -> Result<Arc<Vec<u8>>> {
    let insecure = f.switch("insecure-default-secret")?;
    if let Some(p) = f.one("probe-secret-file") {
        return read_secret(&p);
    }
    if let Some(p) = chart_path.filter(|p| std::path::Path::new(p).is_file()) {
        return read_secret(p);
    }
    if insecure {
        return Ok(Arc::new(INSECURE_DEFAULT_SECRET.to_vec()));
    }
    Err(Error::Config(format!(
        "no --probe-secret-file: the agents' shared secret authenticates link probes and \
         weight-sync connections between nodes, and there is no safe default. Pass \
         --probe-secret-file FILE (the Helm chart always does: Secret <release>-agent, key \
         probe-secret, mounted at {CHART_SECRET_PATH}), or --insecure-default-secret for \
         local development and tests only"
    )))
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
    c.socket_ifname = f.one("socket-ifname");
    if let Some(s) = f.parsed::<f64>("worker-ready-timeout-secs")? {
        c.worker_ready_timeout = Duration::from_secs_f64(s.max(0.1));
    }
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
    c.probe_secret = shared_secret(&mut f, None)?;
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
    if let Some(v) = f.parsed("weights-verify-on-serve")? {
        c.weights_verify_on_serve = v;
    }
    match f.one("weights-gc-grace-secs").as_deref() {
        None => {}
        Some("off") => c.weights_gc_grace = None,
        Some(v) => {
            let secs: f64 = v.parse().map_err(|_| {
                Error::Config(format!(
                    "--weights-gc-grace-secs: expected seconds or `off`, got {v:?}"
                ))
            })?;
            c.weights_gc_grace = Some(Duration::from_secs_f64(secs.max(0.0)));
        }
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
        socket_ifname: f
            .one("socket-ifname")
            .or_else(|| env(hcomm_crds::contract::env::SOCKET_IFNAME)),
        data_address: f.parsed("data-address")?,
        management: f.one("management-interface"),
        peers: f
            .one("peers")
            .map(|p| crate::diagnose::collect::parse_peers(&p).map_err(Error::Config))
            .transpose()?
            .unwrap_or_default(),
        probe_port: f.parsed("probe-port")?.unwrap_or(defaults.probe_port),
        probe_secret: shared_secret(&mut f, Some(CHART_SECRET_PATH))?,
        probe_timeout: Duration::from_millis(f.parsed("probe-timeout-ms")?.unwrap_or(3000)),
        rank_table: f
            .one("rank-table")
            .or_else(|| env(hcomm_crds::contract::env::RANK_TABLE_FILE))
            .map(PathBuf::from),
        node: f.one("node-name").or_else(|| env("NODE_NAME")),
        devices: devices(f.one("devices"), "--devices")?,
        visible_devices: devices(
            f.one("visible-devices")
                .or_else(|| env(hcomm_crds::contract::env::VISIBLE_DEVICES)),
            "--visible-devices",
        )?,
        cpu_devices: f.parsed("cpu-devices")?,
        pod_epoch: match f.parsed("pod-epoch")? {
            Some(e) => Some(e),
            None => env(hcomm_crds::contract::env::EPOCH).and_then(|e| e.parse().ok()),
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
        // Cluster state of the member (`--pod`/`--group`), every API call bounded.
        cluster: crate::diagnose::cluster::Target {
            pod: f.one("pod"),
            group: f.one("group"),
            namespace: f
                .one("namespace")
                .or_else(|| env("POD_NAMESPACE"))
                .unwrap_or_else(|| "default".into()),
            timeout: Duration::from_millis(f.parsed("api-timeout-ms")?.unwrap_or(5000)),
        },
    };
    f.finish()?;
    Ok(a)
}

/// Parses `args` (without the program name).
pub fn parse(args: &[String]) -> Result<Command> {
    match args.split_first() {
        Some((cmd, rest)) if cmd == "run" => Ok(Command::Run(Box::new(run_args(Flags::parse(
            rest,
            &["insecure-default-secret"],
        )?)?))),
        Some((cmd, rest)) if cmd == "diagnose" => Ok(Command::Diagnose(Box::new(diagnose_args(
            Flags::parse(rest, &["insecure-default-secret"])?,
        )?))),
        Some((cmd, rest)) if cmd == "weights" => Ok(Command::Weights(weights_args(rest)?)),
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
        let Command::Run(c) = parse(&args("run --insecure-default-secret --node-name n1 --data-address=198.18.0.10 --cpu-devices 2 --allowed-uid 0 --allowed-uid 1000 --health-interval-secs 0.5")).unwrap() else {
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
            "run --node-name n1 --weights-dir /w --weights-port 9000 --insecure-default-secret",
        ))
        .unwrap() else {
            panic!("not run")
        };
        assert_eq!(
            (c.weights_root.as_path(), c.weights_port),
            (std::path::Path::new("/w"), 9000)
        );
        let Command::Run(c) = parse(&args(
            "run --node-name n1 --weights-root /old --insecure-default-secret",
        ))
        .unwrap() else {
            panic!("not run")
        };
        assert_eq!(c.weights_root, PathBuf::from("/old"));
    }

    #[test]
    fn unknown_flags_bad_values_and_missing_values_are_errors() {
        assert!(
            parse(&args(
                "run --node-name n --insecure-default-secret --bogus 1"
            ))
            .unwrap_err()
            .to_string()
            .contains("--bogus")
        );
        assert!(
            parse(&args(
                "run --node-name n --insecure-default-secret --cpu-devices x"
            ))
            .unwrap_err()
            .to_string()
            .contains("cpu-devices")
        );
        assert!(parse(&args("run --node-name")).is_err());
        assert!(parse(&args("explode")).is_err());
        assert!(matches!(parse(&[]).unwrap(), Command::Help));
    }

    #[test]
    fn diagnose_reads_the_cluster_only_when_a_pod_or_group_is_named() {
        let Command::Diagnose(d) = parse(&args(
            "diagnose --insecure-default-secret --pod decode-1-e2 --namespace ai --api-timeout-ms 800",
        ))
        .unwrap() else {
            panic!("not diagnose")
        };
        assert_eq!(d.cluster.pod.as_deref(), Some("decode-1-e2"));
        assert_eq!(d.cluster.namespace, "ai");
        assert_eq!(d.cluster.timeout, Duration::from_millis(800));
        assert!(d.cluster.asked());
        let Command::Diagnose(d) = parse(&args("diagnose --insecure-default-secret")).unwrap()
        else {
            panic!("not diagnose")
        };
        assert!(!d.cluster.asked());
    }

    #[test]
    fn diagnose_flags_parse() {
        let Command::Diagnose(d) = parse(&args("diagnose --insecure-default-secret --socket-ifname mgmt --peers a=198.18.0.11 --devices 0,1 --visible-devices 1,0 --log-path /x --log-path /y --weights-synced false")).unwrap() else {
            panic!("not diagnose")
        };
        assert_eq!(d.socket_ifname.as_deref(), Some("mgmt"));
        assert_eq!(d.peers.len(), 1);
        assert_eq!(d.visible_devices, Some(vec![1, 0]));
        assert_eq!(d.log_paths.len(), 2);
        assert_eq!(d.weights_synced, Some(false));
    }

    fn secret_file(label: &str, content: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("hcomm-cli-{label}-{}", std::process::id()));
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn run_refuses_the_built_in_secret_unless_asked_for_it() {
        let e = parse(&args("run --node-name n")).unwrap_err().to_string();
        for part in [
            "--probe-secret-file",
            "Secret <release>-agent",
            CHART_SECRET_PATH,
            "--insecure-default-secret",
        ] {
            assert!(e.contains(part), "{part:?} missing in {e}");
        }
        let Command::Run(c) = parse(&args("run --node-name n --insecure-default-secret")).unwrap()
        else {
            panic!("not run")
        };
        assert_eq!(c.probe_secret.as_slice(), INSECURE_DEFAULT_SECRET);
        let f = secret_file("ok", b"  s3cret\n");
        let Command::Run(c) = parse(&args(&format!(
            "run --node-name n --probe-secret-file {}",
            f.display()
        )))
        .unwrap() else {
            panic!("not run")
        };
        assert_eq!(c.probe_secret.as_slice(), b"s3cret");
        assert!(c.weights_verify_on_serve);
        let empty = secret_file("empty", b"\n");
        let e = parse(&args(&format!(
            "run --node-name n --probe-secret-file {}",
            empty.display()
        )))
        .unwrap_err()
        .to_string();
        assert!(e.contains("empty"), "{e}");
        let Command::Run(c) = parse(&args(
            "run --node-name n --insecure-default-secret=true --weights-verify-on-serve false",
        ))
        .unwrap() else {
            panic!("not run")
        };
        assert!(!c.weights_verify_on_serve);
        let _ = (std::fs::remove_file(f), std::fs::remove_file(empty));
    }

    #[test]
    fn weights_gc_grace_takes_seconds_or_off() {
        let run = |extra: &str| {
            parse(&args(&format!(
                "run --node-name n --insecure-default-secret {extra}"
            )))
        };
        let Command::Run(c) = run("").unwrap() else {
            panic!("not run")
        };
        assert_eq!(c.weights_gc_grace, Some(Duration::from_secs(600)));
        let Command::Run(c) = run("--weights-gc-grace-secs 2.5").unwrap() else {
            panic!("not run")
        };
        assert_eq!(c.weights_gc_grace, Some(Duration::from_millis(2500)));
        let Command::Run(c) = run("--weights-gc-grace-secs off").unwrap() else {
            panic!("not run")
        };
        assert_eq!(c.weights_gc_grace, None);
        let e = run("--weights-gc-grace-secs soon").unwrap_err().to_string();
        assert!(
            e.contains("--weights-gc-grace-secs") && e.contains("off"),
            "{e}"
        );
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("1GB"), Some(1_000_000_000));
        assert_eq!(parse_size("2 GiB"), Some(2 << 30));
        for bad in ["", "MiB", "1.5GiB", "-1", "12XB", "99999999999TiB"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn weights_commands_parse_a_directory_and_their_flags() {
        assert_eq!(
            parse(&args("weights manifest /w --chunk-size 1MiB --json")).unwrap_weights(),
            WeightsCommand::Manifest {
                dir: "/w".into(),
                chunk_size: 1 << 20,
                json: true
            }
        );
        assert_eq!(
            parse(&args("weights manifest --json=false /w")).unwrap_weights(),
            WeightsCommand::Manifest {
                dir: "/w".into(),
                chunk_size: DEFAULT_CHUNK_SIZE,
                json: false
            }
        );
        assert_eq!(
            parse(&args(
                "weights generate /out --size 256MiB --seed 7 --files 2"
            ))
            .unwrap_weights(),
            WeightsCommand::Generate {
                dir: "/out".into(),
                spec: GenerateSpec {
                    size: 256 << 20,
                    seed: 7,
                    files: 2
                }
            }
        );
        for bad in [
            "weights",
            "weights manifest",
            "weights manifest /a /b",
            "weights manifest /a --chunk-size big",
            "weights generate /out --seed 1",
            "weights generate /out --size 1MiB",
            "weights generate /out --size 1MiB --seed 1 --bogus 2",
            "weights explode /x",
            "run --node-name n --insecure-default-secret stray",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }

    trait UnwrapWeights {
        fn unwrap_weights(self) -> WeightsCommand;
    }

    impl UnwrapWeights for Result<Command> {
        fn unwrap_weights(self) -> WeightsCommand {
            match self.unwrap() {
                Command::Weights(w) => w,
                other => panic!("not a weights command: {other:?}"),
            }
        }
    }
}
