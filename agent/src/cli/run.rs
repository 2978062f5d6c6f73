//! `hcomm-agent run`: the node agent's flags, turned into an [`AgentConfig`] (whose
//! defaults they show). The chart's DaemonSet and the e2e testbed pass these flags.
//! Size: one flag per documented option with its help text, and the tests that parse them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::{ArgAction, Args};

use super::secret::SecretArgs;
use crate::config::AgentConfig;
use crate::error::{Error, Result};

fn defaults() -> AgentConfig {
    AgentConfig::new("")
}

/// `--weights-gc-grace-secs`: seconds, or `off` (never collect).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcGrace(pub Option<Duration>);

fn gc_grace(v: &str) -> std::result::Result<GcGrace, String> {
    if v == "off" {
        return Ok(GcGrace(None));
    }
    let secs: f64 = v
        .parse()
        .map_err(|_| format!("expected seconds or `off`, got {v:?}"))?;
    Duration::try_from_secs_f64(secs.max(0.0))
        .map(|d| GcGrace(Some(d)))
        .map_err(|e| format!("{v:?}: {e}"))
}

fn callers(v: &str) -> std::result::Result<crate::local_api::caller::CallerCheck, String> {
    use crate::local_api::caller::CallerCheck;
    match v {
        "strict" => Ok(CallerCheck::Strict),
        "unchecked" => Ok(CallerCheck::Unchecked),
        _ => Err(format!("expected `strict` or `unchecked`, got {v:?}")),
    }
}

/// The flags of `hcomm-agent run`.
#[derive(Debug, Clone, Args)]
#[command(args_override_self = true)]
pub struct RunArgs {
    /// This node's name (the chart passes the Pod's spec.nodeName).
    #[arg(long, env = "NODE_NAME", value_parser = NonEmptyStringValueParser::new())]
    pub node_name: String,
    #[command(flatten)]
    pub secret: SecretArgs,
    /// The data-network address (else found from --socket-ifname or the groups' spec).
    #[arg(long, value_name = "IP")]
    pub data_address: Option<IpAddr>,
    /// The management NIC, never used for collective traffic.
    #[arg(long, value_name = "IF")]
    pub management_interface: Option<String>,
    /// Data NIC selection in HCCL/NCCL SOCKET_IFNAME syntax, when a group sets none.
    #[arg(long, value_name = "S")]
    pub socket_ifname: Option<String>,
    /// How long a member waits for its worker to report ready (minimum 0.1).
    #[arg(long, value_name = "S", default_value_t = defaults().worker_ready_timeout.as_secs_f64())]
    pub worker_ready_timeout_secs: f64,
    /// Simulate N devices instead of reading NPUs (clusters without NPUs, tests).
    #[arg(long, value_name = "N")]
    pub cpu_devices: Option<u32>,
    /// The local API's node socket, for node tools (mounted into no Pod; callers inside a
    /// Pod are refused).
    #[arg(long, value_name = "PATH", default_value_os_t = defaults().socket_path)]
    pub socket: PathBuf,
    /// Where each member Pod's own local-API socket is served, `<dir>/<pod uid>/agent.sock`
    /// (the operator mounts that directory into the Pod).
    #[arg(long, value_name = "D", default_value_os_t = defaults().pod_sockets_dir)]
    pub pod_sockets_dir: PathBuf,
    /// Serve the local API's CSI driver (`local-api.hcomm.io`), through which the kubelet
    /// gives each member Pod its socket without a hostPath; `false` for clusters whose
    /// operator mounts the hostPath directory instead (`--local-api-volume host-path`).
    #[arg(long, action = ArgAction::Set, value_name = "BOOL", default_value_t = true)]
    pub local_api_csi: bool,
    /// The CSI driver's endpoint, where the kubelet calls it.
    #[arg(long, value_name = "PATH", default_value_os_t = crate::config::CsiDriverConfig::default().socket)]
    pub csi_socket: PathBuf,
    /// The kubelet's plugin-registration directory (its plugin watcher finds the driver there).
    #[arg(long, value_name = "D", default_value_os_t = crate::config::CsiDriverConfig::default().registration_dir)]
    pub kubelet_registration_dir: PathBuf,
    /// The kubelet's root directory: CSI publish targets must lie below its `pods/`.
    #[arg(long, value_name = "D", default_value_os_t = defaults().kubelet_root_dir)]
    pub kubelet_root_dir: PathBuf,
    /// How local-API callers are identified: `strict` (each caller's cgroup must name the
    /// socket's Pod, or no Pod on the node socket; needs hostPID) or `unchecked` (file
    /// modes and --allowed-uid only, for an agent that cannot see the workers' pids).
    #[arg(long, value_name = "MODE", default_value = "strict", value_parser = callers)]
    pub local_api_callers: crate::local_api::caller::CallerCheck,
    /// Accept loopback addresses as rank-table peers. Only for a single-machine testbed whose
    /// simulated hosts are loopback addresses (`cargo demo --loopback`); on a node, a table
    /// naming a loopback peer points the agent at the node's own services and is refused.
    #[arg(long)]
    pub allow_loopback_peers: bool,
    /// A uid allowed on the local API besides root and the agent's own (repeatable).
    #[arg(long, value_name = "UID")]
    pub allowed_uid: Vec<u32>,
    /// Where /metrics and /healthz are served.
    #[arg(long, value_name = "ADDR", default_value_t = defaults().metrics_addr)]
    pub metrics_addr: SocketAddr,
    /// Port of the link probes between agents.
    #[arg(long, value_name = "P", default_value_t = defaults().probe_port)]
    pub probe_port: u16,
    /// First port of the collective engine's listeners.
    #[arg(long, value_name = "P", default_value_t = defaults().comm_port_base)]
    pub comm_port_base: u16,
    /// Folder of per-group secret files, `<namespace>_<group>` (development; else the
    /// group's Secret in --secrets-namespace).
    #[arg(long, value_name = "D")]
    pub group_secret_dir: Option<PathBuf>,
    /// Namespace of the groups' Secrets (the release namespace; the chart sets it).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS")]
    pub secrets_namespace: Option<String>,
    /// How often member state is polled (minimum 10).
    #[arg(long, value_name = "MS", default_value_t = defaults().poll_interval.as_millis() as u64)]
    pub poll_interval_ms: u64,
    /// How often peers' links are probed (minimum 0.05).
    #[arg(long, value_name = "S", default_value_t = defaults().health_interval.as_secs_f64())]
    pub health_interval_secs: f64,
    /// How often the HcommNode inventory is refreshed (minimum 0.1).
    #[arg(long, value_name = "S", default_value_t = defaults().inventory_interval.as_secs_f64())]
    pub inventory_interval_secs: f64,
    /// Wait before retrying a failed step (minimum 10).
    #[arg(long, value_name = "MS", default_value_t = defaults().retry_backoff.as_millis() as u64)]
    pub retry_backoff_ms: u64,
    /// Smallest /dev/shm the shared-memory check accepts.
    #[arg(long, value_name = "B", default_value_t = defaults().shm_min_bytes)]
    pub shm_min_bytes: u64,
    /// The weights store (`--weights-root` is the older spelling).
    #[arg(long, alias = "weights-root", value_name = "D",
          default_value_os_t = defaults().weights_root)]
    pub weights_dir: PathBuf,
    /// Port the weights are served to joining members on.
    #[arg(long, value_name = "P", default_value_t = defaults().weights_port)]
    pub weights_port: u16,
    /// Re-read and re-check each chunk's digest before serving it (instead of `sendfile`).
    #[arg(long, action = ArgAction::Set, value_name = "BOOL",
          default_value_t = defaults().weights_verify_on_serve)]
    pub weights_verify_on_serve: bool,
    /// A directory local weight sources may lie below (repeatable; none: peers only).
    #[arg(
        long,
        value_name = "D",
        env = "HCOMM_WEIGHTS_SOURCE_ROOTS",
        value_delimiter = ':'
    )]
    pub weights_source_root: Vec<PathBuf>,
    /// How long an unused weights version is kept, in seconds, or `off`.
    #[arg(long, value_name = "S|off", default_value = "600", value_parser = gc_grace)]
    pub weights_gc_grace_secs: GcGrace,
    /// Caps the group's connect timeout for verification probes.
    #[arg(long, value_name = "S")]
    pub verify_timeout_secs: Option<f64>,
    /// The kubelet's PodResources socket (mount /var/lib/kubelet/pod-resources).
    #[arg(long, value_name = "PATH", env = "HCOMM_POD_RESOURCES_SOCKET",
          default_value_os_t = defaults().pod_resources_socket)]
    pub pod_resources_socket: PathBuf,
    /// Root of the Ascend driver and toolkit.
    #[arg(long, value_name = "D")]
    pub ascend_root: Option<PathBuf>,
    /// The `hccn_tool` binary (the NPU network checks; absent on CPU nodes).
    #[arg(long, env = "HCOMM_HCCN_TOOL", value_name = "PATH",
          default_value_os_t = defaults().sources.hccn_tool)]
    pub hccn_tool: PathBuf,
    /// The NPUs' network configuration file.
    #[arg(long, env = "HCOMM_HCCN_CONF", value_name = "PATH",
          default_value_os_t = defaults().sources.hccn_conf)]
    pub hccn_conf: PathBuf,
    /// Topology label: super-pod.
    #[arg(long, value_name = "X")]
    pub super_pod: Option<String>,
    /// Topology label: rack.
    #[arg(long, value_name = "X")]
    pub rack: Option<String>,
    /// Topology label: switch.
    #[arg(long, value_name = "X")]
    pub switch: Option<String>,
}

impl RunArgs {
    /// The agent's configuration; fails on the shared secret (missing, unreadable, empty).
    pub fn into_config(self) -> Result<AgentConfig> {
        let mut c = AgentConfig::new(self.node_name);
        c.probe_secret = self.secret.resolve(None)?;
        c.data_address = self.data_address;
        c.management_interface = self.management_interface;
        c.socket_ifname = self.socket_ifname;
        c.worker_ready_timeout = secs(self.worker_ready_timeout_secs, 0.1);
        c.sources.cpu_devices = self.cpu_devices;
        c.socket_path = self.socket;
        c.pod_sockets_dir = self.pod_sockets_dir;
        c.local_api_csi = self
            .local_api_csi
            .then_some(crate::config::CsiDriverConfig {
                socket: self.csi_socket,
                registration_dir: self.kubelet_registration_dir,
            });
        c.kubelet_root_dir = self.kubelet_root_dir;
        c.local_api_callers = self.local_api_callers;
        c.allow_loopback_peers = self.allow_loopback_peers;
        c.allowed_uids = self.allowed_uid;
        c.metrics_addr = self.metrics_addr;
        c.probe_port = self.probe_port;
        c.comm_port_base = self.comm_port_base;
        c.group_secret_dir = self.group_secret_dir;
        c.secrets_namespace = self.secrets_namespace.filter(|n| !n.is_empty());
        c.poll_interval = Duration::from_millis(self.poll_interval_ms.max(10));
        c.health_interval = secs(self.health_interval_secs, 0.05);
        c.inventory_interval = secs(self.inventory_interval_secs, 0.1);
        c.retry_backoff = Duration::from_millis(self.retry_backoff_ms.max(10));
        c.shm_min_bytes = self.shm_min_bytes;
        c.weights_root = self.weights_dir;
        c.weights_port = self.weights_port;
        c.weights_verify_on_serve = self.weights_verify_on_serve;
        c.weights_gc_grace = self.weights_gc_grace_secs.0;
        c.weights_source_roots = crate::weights::SourceRoots::new(self.weights_source_root)
            .map_err(|e| Error::Config(format!("--weights-source-root: {e}")))?;
        c.verify_timeout_cap = self.verify_timeout_secs.map(|s| secs(s, 0.0));
        c.pod_resources_socket = self.pod_resources_socket;
        if let Some(d) = self.ascend_root {
            c.sources.ascend_root = d;
        }
        c.sources.hccn_tool = self.hccn_tool;
        c.sources.hccn_conf = self.hccn_conf;
        c.topology.super_pod = self.super_pod;
        c.topology.rack = self.rack;
        c.topology.switch = self.switch;
        Ok(c)
    }
}

/// `s` seconds, at least `min` (a NaN or a huge value is clamped, never a panic).
fn secs(s: f64, min: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(min)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::tests::parse;
    use super::super::{CHART_SECRET_PATH, Command};
    use super::*;
    use crate::config::INSECURE_DEFAULT_SECRET;

    fn run(line: &str) -> Result<AgentConfig> {
        match parse(&format!("run {line}"))
            .map_err(|e| crate::error::Error::Config(e.to_string()))?
            .command
        {
            Command::Run(r) => r.into_config(),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn the_default_ports_are_the_charts() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/hcomm/values.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let values: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let port = |key: &str| {
            values["agent"][key]
                .as_u64()
                .unwrap_or_else(|| panic!("agent.{key} in {path}")) as u16
        };
        let c = run("--node-name n1 --insecure-default-secret").unwrap();
        assert_eq!(c.metrics_addr.port(), port("metricsPort"));
        assert_eq!(c.probe_port, port("dataPort"));
        assert_eq!(c.weights_port, port("weightsPort"));
    }

    #[test]
    fn run_flags_fill_the_config_in_both_spellings() {
        let c = run("--insecure-default-secret --node-name n1 --data-address=198.18.0.10 --cpu-devices 2 --allowed-uid 0 --allowed-uid 1000 --health-interval-secs 0.5").unwrap();
        assert_eq!(c.node_name, "n1");
        assert_eq!(c.data_address.unwrap().to_string(), "198.18.0.10");
        assert_eq!(c.sources.cpu_devices, Some(2));
        assert_eq!(c.allowed_uids, [0, 1000]);
        assert_eq!(c.health_interval, Duration::from_millis(500));
        assert_eq!(c.weights_port, 7512);
        assert_eq!(c.weights_root, PathBuf::from("/var/lib/hcomm/weights"));
        let c =
            run("--node-name n1 --weights-dir /w --weights-port 9000 --insecure-default-secret")
                .unwrap();
        assert_eq!(
            (c.weights_root.as_path(), c.weights_port),
            (Path::new("/w"), 9000)
        );
        let c = run("--node-name n1 --weights-root /old --insecure-default-secret").unwrap();
        assert_eq!(c.weights_root, PathBuf::from("/old"));
    }

    #[test]
    fn weight_source_roots_are_none_by_default_and_must_be_absolute_without_dotdot() {
        let base = "--node-name n --insecure-default-secret";
        assert!(run(base).unwrap().weights_source_roots.roots().is_empty());
        let c = run(&format!(
            "{base} --weights-source-root /data/models/ --weights-source-root /srv/w"
        ))
        .unwrap();
        assert_eq!(
            c.weights_source_roots.roots(),
            [PathBuf::from("/data/models"), PathBuf::from("/srv/w")]
        );
        for bad in ["models", "/data/../etc"] {
            let e = run(&format!("{base} --weights-source-root {bad}")).unwrap_err();
            assert!(e.to_string().contains("--weights-source-root"), "{e}");
        }
    }

    #[test]
    fn without_flags_the_config_has_its_documented_defaults() {
        let c = run("--node-name n --insecure-default-secret").unwrap();
        let d = AgentConfig::new("n");
        assert_eq!(c.metrics_addr, d.metrics_addr);
        assert_eq!(
            (c.probe_port, c.comm_port_base),
            (d.probe_port, d.comm_port_base)
        );
        assert_eq!(c.socket_path, d.socket_path);
        assert_eq!(c.poll_interval, d.poll_interval);
        assert_eq!(c.health_interval, d.health_interval);
        assert_eq!(c.inventory_interval, d.inventory_interval);
        assert_eq!(c.retry_backoff, d.retry_backoff);
        assert_eq!(c.worker_ready_timeout, d.worker_ready_timeout);
        assert_eq!(c.shm_min_bytes, d.shm_min_bytes);
        assert_eq!(c.weights_gc_grace, d.weights_gc_grace);
        assert_eq!(c.verify_timeout_cap, None);
        assert!(!c.weights_verify_on_serve);
        assert_eq!(
            c.pod_resources_socket,
            Path::new(hcomm_crds::contract::ascend::POD_RESOURCES_SOCKET)
        );
        let c =
            run("--node-name n --insecure-default-secret --pod-resources-socket /k.sock").unwrap();
        assert_eq!(c.pod_resources_socket, Path::new("/k.sock"));
        assert_eq!(
            c.sources.hccn_tool,
            PathBuf::from("/usr/local/Ascend/driver/tools/hccn_tool")
        );
        assert_eq!(c.sources.hccn_conf, PathBuf::from("/etc/hccn.conf"));
    }

    #[test]
    fn the_hccn_paths_come_from_their_flags() {
        let c = run(
            "--node-name n --insecure-default-secret --hccn-tool /opt/hccn_tool --hccn-conf=/h.conf",
        )
        .unwrap();
        assert_eq!(c.sources.hccn_tool, PathBuf::from("/opt/hccn_tool"));
        assert_eq!(c.sources.hccn_conf, PathBuf::from("/h.conf"));
    }

    /// agent-daemonset.yaml's `args` as `helm template` renders them with the default
    /// values.yaml and `agent.mode=cpu`, every optional value set (`agent.socketIfname==eth1`,
    /// `agent.managementInterface=eth0`), and `$(NODE_NAME)` substituted by the kubelet.
    const CHART_ARGS: [&str; 14] = [
        "run",
        "--node-name=node-a",
        "--metrics-addr=0.0.0.0:7511",
        "--probe-port=7510",
        "--weights-port=7512",
        "--weights-dir=/var/lib/hcomm/weights",
        "--weights-gc-grace-secs=600",
        "--socket=/run/hcomm/agent.sock",
        "--pod-sockets-dir=/run/hcomm/pods",
        "--probe-secret-file=/etc/hcomm/secret/probe-secret",
        "--cpu-devices=8",
        "--socket-ifname==eth1",
        "--management-interface=eth0",
        "--health-interval-secs=10",
    ];

    #[test]
    fn the_charts_arguments_parse() {
        use clap::Parser;
        let cli =
            super::super::Cli::try_parse_from(std::iter::once("hcomm-agent").chain(CHART_ARGS))
                .unwrap();
        let Command::Run(mut r) = cli.command else {
            panic!("not run")
        };
        assert_eq!(
            r.secret.probe_secret_file.as_deref(),
            Some(Path::new(CHART_SECRET_PATH))
        );
        // The secret is mounted only in the Pod: read a stand-in here.
        let f = secret_file("chart", b"chart-secret\n");
        r.secret.probe_secret_file = Some(f.clone());
        let c = r.into_config().unwrap();
        assert_eq!(c.node_name, "node-a");
        assert_eq!(c.metrics_addr, "0.0.0.0:7511".parse().unwrap());
        assert_eq!((c.probe_port, c.weights_port), (7510, 7512));
        assert_eq!(c.weights_root, PathBuf::from("/var/lib/hcomm/weights"));
        assert_eq!(c.weights_gc_grace, Some(Duration::from_secs(600)));
        assert_eq!(c.socket_path, PathBuf::from("/run/hcomm/agent.sock"));
        assert_eq!(c.probe_secret.as_slice(), b"chart-secret");
        assert_eq!(c.sources.cpu_devices, Some(8));
        assert_eq!(c.socket_ifname.as_deref(), Some("=eth1"));
        assert_eq!(c.management_interface.as_deref(), Some("eth0"));
        assert_eq!(c.health_interval, Duration::from_secs(10));
        // Ascend mode renders the same list without --cpu-devices.
        let ascend: Vec<&str> = CHART_ARGS
            .iter()
            .copied()
            .filter(|a| !a.starts_with("--cpu-devices"))
            .collect();
        let cli = super::super::Cli::try_parse_from(std::iter::once("hcomm-agent").chain(ascend))
            .unwrap();
        assert!(matches!(cli.command, Command::Run(r) if r.cpu_devices.is_none()));
        let _ = std::fs::remove_file(f);
    }

    #[test]
    fn the_testbeds_arguments_parse() {
        let c = run(
            "--node-name host-0 --data-address 198.18.0.10 --management-interface mgmt0 \
                     --cpu-devices 2 --socket /tmp/a.sock --metrics-addr 10.0.0.1:9464 \
                     --probe-port 7510 --weights-port 7512 --comm-port-base 7600 \
                     --weights-dir /tmp/w --weights-gc-grace-secs 0.5 \
                     --insecure-default-secret --health-interval-secs 0.2 \
                     --poll-interval-ms 300 --retry-backoff-ms 500 --shm-min-bytes 1",
        )
        .unwrap();
        assert_eq!(c.comm_port_base, 7600);
        assert_eq!(c.poll_interval, Duration::from_millis(300));
        assert_eq!(c.retry_backoff, Duration::from_millis(500));
        assert_eq!(c.shm_min_bytes, 1);
        assert_eq!(c.weights_gc_grace, Some(Duration::from_millis(500)));
    }

    #[test]
    fn unknown_flags_bad_values_and_missing_values_are_errors_naming_the_flag() {
        let e = run("--node-name n --insecure-default-secret --bogus 1").unwrap_err();
        assert!(e.to_string().contains("--bogus"), "{e}");
        let e = run("--node-name n --insecure-default-secret --cpu-devices x").unwrap_err();
        assert!(e.to_string().contains("--cpu-devices"), "{e}");
        let e = run("--node-name").unwrap_err();
        assert!(e.to_string().contains("--node-name"), "{e}");
        let e = run("--node-name n --insecure-default-secret stray").unwrap_err();
        assert!(e.to_string().contains("stray"), "{e}");
    }

    fn secret_file(label: &str, content: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("hcomm-cli-{label}-{}", std::process::id()));
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn run_refuses_the_built_in_secret_unless_asked_for_it() {
        let e = run("--node-name n").unwrap_err().to_string();
        for part in [
            "--probe-secret-file",
            "Secret <release>-agent",
            CHART_SECRET_PATH,
            "--insecure-default-secret",
        ] {
            assert!(e.contains(part), "{part:?} missing in {e}");
        }
        let c = run("--node-name n --insecure-default-secret").unwrap();
        assert_eq!(c.probe_secret.as_slice(), INSECURE_DEFAULT_SECRET);
        let c = run("--node-name n --insecure-default-secret=true").unwrap();
        assert_eq!(c.probe_secret.as_slice(), INSECURE_DEFAULT_SECRET);
        assert!(run("--node-name n --insecure-default-secret=false").is_err());
    }

    #[test]
    fn the_chart_secret_file_is_read() {
        let f = secret_file("ok", b"  s3cret\n");
        let c = run(&format!(
            "--node-name n --probe-secret-file {}",
            f.display()
        ))
        .unwrap();
        assert_eq!(c.probe_secret.as_slice(), b"s3cret");
        assert!(!c.weights_verify_on_serve);
        let empty = secret_file("empty", b"\n");
        let e = run(&format!(
            "--node-name n --probe-secret-file {}",
            empty.display()
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("empty"), "{e}");
        let c = run("--node-name n --insecure-default-secret=true --weights-verify-on-serve true")
            .unwrap();
        assert!(c.weights_verify_on_serve);
        let _ = (std::fs::remove_file(f), std::fs::remove_file(empty));
    }

    #[test]
    fn weights_gc_grace_takes_seconds_or_off() {
        let with = |extra: &str| run(&format!("--node-name n --insecure-default-secret {extra}"));
        assert_eq!(
            with("").unwrap().weights_gc_grace,
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            with("--weights-gc-grace-secs 2.5")
                .unwrap()
                .weights_gc_grace,
            Some(Duration::from_millis(2500))
        );
        assert_eq!(
            with("--weights-gc-grace-secs off")
                .unwrap()
                .weights_gc_grace,
            None
        );
        let e = with("--weights-gc-grace-secs soon")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--weights-gc-grace-secs") && e.contains("off"),
            "{e}"
        );
    }

    #[test]
    fn a_repeated_flag_takes_the_last_value() {
        let c = run("--node-name a --node-name b --insecure-default-secret").unwrap();
        assert_eq!(c.node_name, "b");
    }
}
