//! `hcomm-agent diagnose`: the flags of the one-shot node check, turned into
//! [`DiagnoseArgs`]. Inside a member's or the agent's Pod most of them come from the
//! environment the chart and the operator set (`NODE_NAME`, `ASCEND_VISIBLE_DEVICES`,
//! `HCOMM_EPOCH`, `POD_NAMESPACE`, ...); an empty variable counts as unset.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::secret::{CHART_SECRET_PATH, SecretArgs};
use crate::config::AgentConfig;
use crate::diagnose::DiagnoseArgs;
use crate::diagnose::cluster::Target;
use crate::error::{Error, Result};
use crate::nic::verify::parse_device_list;

/// How the result table is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// Tab-separated values for scripts.
    Tsv,
}

/// The flags of `hcomm-agent diagnose`.
#[derive(Debug, Clone, Args)]
#[command(args_override_self = true)]
pub struct DiagnoseCli {
    /// Data NIC selection in HCCL/NCCL SOCKET_IFNAME syntax.
    #[arg(long, value_name = "S", env = hcomm_crds::contract::env::SOCKET_IFNAME)]
    pub socket_ifname: Option<String>,
    /// The data-network address to check.
    #[arg(long, value_name = "IP")]
    pub data_address: Option<IpAddr>,
    /// The management NIC.
    #[arg(long, value_name = "IF")]
    pub management_interface: Option<String>,
    /// Peers to probe, `name=ip,...`.
    #[arg(long, value_name = "name=ip,...", value_parser = peers)]
    pub peers: Option<Peers>,
    /// The rank table to check.
    #[arg(long, value_name = "FILE", env = hcomm_crds::contract::env::RANK_TABLE_FILE)]
    pub rank_table: Option<String>,
    /// This node's name.
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Devices the member was given, e.g. `0,1`.
    #[arg(long, value_name = "0,1")]
    pub devices: Option<String>,
    /// Devices visible to the member, e.g. `0,1`.
    #[arg(long, value_name = "0,1", env = hcomm_crds::contract::env::VISIBLE_DEVICES)]
    pub visible_devices: Option<String>,
    /// Simulated devices (as `run --cpu-devices`).
    #[arg(long, value_name = "N")]
    pub cpu_devices: Option<u32>,
    /// The epoch the member's Pod was created for.
    #[arg(long, value_name = "N", env = hcomm_crds::contract::env::EPOCH)]
    pub pod_epoch: Option<String>,
    /// The group's current epoch.
    #[arg(long, value_name = "N")]
    pub group_epoch: Option<u64>,
    /// Whether the member's weights are synced.
    #[arg(long, value_name = "BOOL")]
    pub weights_synced: Option<bool>,
    /// Port of the link probes.
    #[arg(long, value_name = "P", default_value_t = AgentConfig::new("").probe_port)]
    pub probe_port: u16,
    #[command(flatten)]
    pub secret: SecretArgs,
    /// Bound of each probe.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub probe_timeout_ms: u64,
    /// First port of the collective engine's listeners.
    #[arg(long, value_name = "P", default_value_t = AgentConfig::new("").comm_port_base)]
    pub comm_port_base: u16,
    /// The agent's metrics URL, for its counters.
    #[arg(long, value_name = "URL")]
    pub agent_url: Option<String>,
    /// A log to scan for known failures (repeatable).
    #[arg(long, value_name = "P")]
    pub log_path: Vec<PathBuf>,
    /// Size of the test collective.
    #[arg(long, value_name = "N")]
    pub message_bytes: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Read this member Pod's conditions, epochs and rank table from the API server.
    #[arg(long, value_name = "NAME")]
    pub pod: Option<String>,
    /// Read this group's state from the API server.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Namespace of --pod and --group.
    #[arg(
        long,
        value_name = "NS",
        env = "POD_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    /// Bound of each API call.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub api_timeout_ms: u64,
    /// The kubelet's PodResources socket (the NPU allocation of --pod).
    #[arg(long, value_name = "PATH", env = "HCOMM_POD_RESOURCES_SOCKET",
          default_value_os_t = AgentConfig::new("").pod_resources_socket)]
    pub pod_resources_socket: PathBuf,
}

/// `--peers`: one value holding a list (clap would read a bare `Vec` as repeated values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers(pub Vec<(String, IpAddr)>);

fn peers(s: &str) -> std::result::Result<Peers, String> {
    crate::diagnose::collect::parse_peers(s).map(Peers)
}

fn set(v: Option<String>) -> Option<String> {
    v.filter(|v| !v.is_empty())
}

fn devices(v: Option<String>, flag: &str) -> Result<Option<Vec<i32>>> {
    set(v)
        .map(|s| {
            parse_device_list(&s)
                .ok_or_else(|| Error::Config(format!("{flag}: {s:?} is not a device list")))
        })
        .transpose()
}

impl DiagnoseCli {
    /// The diagnosis to run; fails on a bad device list or epoch, or a missing secret.
    pub fn into_args(self) -> Result<DiagnoseArgs> {
        let pod_epoch = set(self.pod_epoch)
            .map(|e| {
                e.parse()
                    .map_err(|_| Error::Config(format!("--pod-epoch: {e:?} is not a number")))
            })
            .transpose()?;
        Ok(DiagnoseArgs {
            socket_ifname: set(self.socket_ifname),
            data_address: self.data_address,
            management: self.management_interface,
            peers: self.peers.map(|p| p.0).unwrap_or_default(),
            probe_port: self.probe_port,
            probe_secret: self.secret.resolve(Some(CHART_SECRET_PATH))?,
            probe_timeout: Duration::from_millis(self.probe_timeout_ms),
            rank_table: set(self.rank_table).map(PathBuf::from),
            node: set(self.node_name),
            devices: devices(self.devices, "--devices")?,
            visible_devices: devices(self.visible_devices, "--visible-devices")?,
            cpu_devices: self.cpu_devices,
            pod_epoch,
            group_epoch: self.group_epoch,
            weights_synced: self.weights_synced,
            comm_port_base: self.comm_port_base,
            agent_url: self.agent_url,
            log_paths: self.log_path,
            message_bytes: self.message_bytes,
            tsv: self.format == Format::Tsv,
            cluster: Target {
                pod: self.pod,
                group: self.group,
                namespace: set(Some(self.namespace)).unwrap_or_else(|| "default".into()),
                timeout: Duration::from_millis(self.api_timeout_ms),
            },
            pod_resources_socket: self.pod_resources_socket,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Command;
    use super::super::tests::parse;
    use super::*;

    fn diagnose(line: &str) -> Result<DiagnoseArgs> {
        let cli = parse(&format!("diagnose {line}")).map_err(|e| Error::Config(e.to_string()))?;
        match cli.command {
            Command::Diagnose(d) => d.into_args(),
            other => panic!("not diagnose: {other:?}"),
        }
    }

    #[test]
    fn diagnose_reads_the_cluster_only_when_a_pod_or_group_is_named() {
        let d = diagnose(
            "--insecure-default-secret --pod decode-1-e2 --namespace ai --api-timeout-ms 800",
        )
        .unwrap();
        assert_eq!(d.cluster.pod.as_deref(), Some("decode-1-e2"));
        assert_eq!(d.cluster.namespace, "ai");
        assert_eq!(d.cluster.timeout, Duration::from_millis(800));
        assert!(d.cluster.asked());
        let d = diagnose("--insecure-default-secret").unwrap();
        assert!(!d.cluster.asked());
        assert_eq!(d.cluster.timeout, Duration::from_millis(5000));
        assert_eq!(d.probe_timeout, Duration::from_millis(3000));
    }

    #[test]
    fn diagnose_flags_parse() {
        let d = diagnose("--insecure-default-secret --socket-ifname mgmt --peers a=198.18.0.11 --devices 0,1 --visible-devices 1,0 --log-path /x --log-path /y --weights-synced false --pod-epoch 3 --format tsv").unwrap();
        assert_eq!(d.socket_ifname.as_deref(), Some("mgmt"));
        assert_eq!(d.peers.len(), 1);
        assert_eq!(d.devices, Some(vec![0, 1]));
        assert_eq!(d.visible_devices, Some(vec![1, 0]));
        assert_eq!(d.log_paths.len(), 2);
        assert_eq!(d.weights_synced, Some(false));
        assert_eq!(d.pod_epoch, Some(3));
        assert!(d.tsv);
    }

    #[test]
    fn bad_values_are_errors_naming_the_flag() {
        for (line, flag) in [
            ("--peers nobody", "--peers"),
            ("--devices a,b", "--devices"),
            ("--pod-epoch soon", "--pod-epoch"),
            ("--format html", "--format"),
            ("--weights-synced maybe", "--weights-synced"),
            ("--bogus 1", "--bogus"),
        ] {
            let e = diagnose(&format!("--insecure-default-secret {line}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(flag), "{line}: {e}");
        }
    }

    #[test]
    fn every_environment_fallback_is_declared() {
        use clap::CommandFactory;
        let cmd = super::super::Cli::command();
        let diagnose = cmd.find_subcommand("diagnose").unwrap();
        for (flag, var) in [
            ("socket-ifname", hcomm_crds::contract::env::SOCKET_IFNAME),
            ("rank-table", hcomm_crds::contract::env::RANK_TABLE_FILE),
            ("node-name", "NODE_NAME"),
            (
                "visible-devices",
                hcomm_crds::contract::env::VISIBLE_DEVICES,
            ),
            ("pod-epoch", hcomm_crds::contract::env::EPOCH),
            ("namespace", "POD_NAMESPACE"),
        ] {
            let arg = diagnose
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .unwrap_or_else(|| panic!("--{flag} missing"));
            assert_eq!(arg.get_env().and_then(|v| v.to_str()), Some(var), "{flag}");
        }
    }
}
