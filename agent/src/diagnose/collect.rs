//! Gathering [`Facts`] for `diagnose` (I/O): local interfaces and devices, link probes to
//! the peers, the member's Pod / group / rank table when a cluster is reachable, the agent's
//! counters from its `/metrics`, descriptors, CPU affinity and logs. Every source is
//! optional: what cannot be read makes its check `SKIP`, never a crash.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::allocation;
use super::cluster::{self, Target};
use super::facts::{ClusterRead, CommCounters, Facts};
use super::logs;
use crate::inventory::{devices, nics};
use crate::member::ranktable::{self, RankTable};
use crate::nic::probe::{ProbeTarget, probe_all};
use crate::nic::{IfnameMatcher, NicRule, select_data_nic};

/// What `diagnose` was told.
#[derive(Debug, Clone, Default)]
pub struct DiagnoseArgs {
    pub socket_ifname: Option<String>,
    pub data_address: Option<IpAddr>,
    pub management: Option<String>,
    /// Peers as `name=ip`.
    pub peers: Vec<(String, IpAddr)>,
    pub probe_port: u16,
    pub probe_secret: Arc<Vec<u8>>,
    pub probe_timeout: Duration,
    pub rank_table: Option<PathBuf>,
    pub node: Option<String>,
    pub devices: Option<Vec<i32>>,
    pub visible_devices: Option<Vec<i32>>,
    pub cpu_devices: Option<u32>,
    pub pod_epoch: Option<u64>,
    pub group_epoch: Option<u64>,
    pub weights_synced: Option<bool>,
    pub comm_port_base: u16,
    pub agent_url: Option<String>,
    pub log_paths: Vec<PathBuf>,
    pub message_bytes: Option<u64>,
    /// `table` (default) or `tsv` (one `id<TAB>result<TAB>detail` line per check, for
    /// scripts and tests).
    pub tsv: bool,
    /// The member Pod / group to read from the API server (`--pod`, `--group`,
    /// `--namespace`, `--api-timeout-ms`); nothing is read when neither is given.
    pub cluster: Target,
    /// The kubelet's PodResources socket (the NPU allocation row).
    pub pod_resources_socket: PathBuf,
}

/// Parses `name=ip,name=ip`.
pub fn parse_peers(s: &str) -> Result<Vec<(String, IpAddr)>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (n, ip) = p
                .split_once('=')
                .ok_or_else(|| format!("peer {p:?} is not name=ip"))?;
            Ok((
                n.trim().to_owned(),
                ip.trim()
                    .parse()
                    .map_err(|_| format!("peer {p:?}: bad IP"))?,
            ))
        })
        .collect()
}

/// Parses the agent counters out of Prometheus text.
pub fn parse_counters(metrics: &str) -> (Option<CommCounters>, Option<u64>, Option<u64>) {
    let value = |name: &str| -> Option<u64> {
        metrics.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?;
            let v = rest.trim_start_matches(|c: char| c != ' ').trim();
            v.parse::<f64>().ok().map(|f| f as u64)
        })
    };
    let comm = match (
        value("hcomm_agent_communicators_created_total"),
        value("hcomm_agent_communicators_destroyed_total"),
        value("hcomm_agent_communicators_open"),
    ) {
        (Some(created), Some(destroyed), Some(open)) => Some(CommCounters {
            created,
            destroyed,
            open,
        }),
        _ => None,
    };
    (
        comm,
        value("hcomm_agent_open_fds"),
        value("hcomm_agent_max_fds"),
    )
}

async fn http_get(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/metrics".to_owned()), |(h, p)| (h, format!("/{p}")));
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(host).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(
            body.split_once("\r\n\r\n")
                .map(|(_, b)| b.to_owned())
                .unwrap_or(body),
        )
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .ok()
        .flatten()
}

/// Parses a CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b.min(a + 4096));
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

fn process_numa() -> Vec<i32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Vec::new();
    };
    let mine = parse_cpu_list(list);
    let mut nodes = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
        return nodes;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let cpus =
            parse_cpu_list(&std::fs::read_to_string(e.path().join("cpulist")).unwrap_or_default());
        if cpus.iter().any(|c| mine.contains(c)) {
            nodes.push(id);
        }
    }
    nodes.sort_unstable();
    nodes
}

fn read_epoch(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join(ranktable::KEY_EPOCH))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Collects every fact.
pub async fn collect(args: &DiagnoseArgs) -> Facts {
    let nics = nics::collect(Path::new("/sys/class/net")).await;
    let devs = devices::collect(args.cpu_devices, Path::new("/dev")).await;
    let mut f = Facts {
        socket_ifname: args.socket_ifname.clone(),
        data_address: args.data_address,
        management: args.management.clone(),
        unhealthy_devices: devs
            .iter()
            .filter(|d| d.health == hcomm_crds::DeviceHealth::Unhealthy)
            .map(|d| d.id)
            .collect(),
        pod_epoch: args.pod_epoch,
        group_epoch: args.group_epoch,
        weights_synced: args.weights_synced,
        message_bytes: args.message_bytes,
        process_numa: process_numa(),
        ..Default::default()
    };
    f.devices.inventory = devs.iter().map(|d| d.id).collect();
    f.devices.assigned = args.devices.clone().unwrap_or_default();
    f.devices.visible = args.visible_devices.clone();

    let rule = NicRule {
        socket_ifname: args
            .socket_ifname
            .as_deref()
            .and_then(|s| IfnameMatcher::parse(s).ok()),
        data_address: args.data_address,
        management: args.management.clone(),
    };
    let chosen = select_data_nic(&nics, &rule).ok();
    if f.data_address.is_none() {
        f.data_address = chosen.as_ref().map(|c| c.ip);
    }

    let read = if args.cluster.asked() {
        match cluster::read(&args.cluster).await {
            Ok(objects) => {
                let socket = &args.pod_resources_socket;
                f.allocation = allocation::read(&objects, socket, args.cluster.timeout).await;
                ClusterRead::Read(cluster::snapshot(&args.cluster, &objects))
            }
            Err(why) => ClusterRead::Unreachable(why),
        }
    } else {
        ClusterRead::NotAsked
    };
    // The rank table: the mounted file when given, else the group's ConfigMap.
    let table: Option<(Result<RankTable, String>, Option<u64>)> = match (&args.rank_table, &read) {
        (Some(path), _) => Some((
            std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| ranktable::parse(&t))
                .map_err(|e| format!("rank table {}: {e}", path.display())),
            path.parent().and_then(read_epoch),
        )),
        (None, ClusterRead::Read(m)) => m.rank_table_json.as_ref().map(|json| {
            (
                ranktable::parse(json).map_err(|e| format!("rank-table ConfigMap: {e}")),
                m.rank_table_epoch,
            )
        }),
        _ => None,
    };
    cluster::fill(&mut f, read);

    let mut peers: Vec<(String, IpAddr)> = args.peers.clone();
    if let Some((parsed, epoch)) = table {
        match parsed {
            Ok(table) => {
                f.rank_table_epoch = epoch.or(f.rank_table_epoch);
                f.rank0_peer = table.rank(0).map(|(s, _)| s.server_id.to_owned());
                let node = args.node.clone().unwrap_or_default();
                let dip = f.data_address.map(|a| a.to_string());
                if let Some(devs) = &args.devices
                    && let Ok(plan) =
                        ranktable::plan(&table, &node, dip.as_deref(), devs, args.comm_port_base)
                {
                    f.devices.rank_table = Some(plan.devices_in_rank_order.clone());
                    f.port_check = Some(Ok(()));
                }
                let own = ranktable::server_of(&table, &node, dip.as_deref())
                    .map(|s| s.server_id.to_owned());
                for s in &table.servers() {
                    if Some(s.server_id) != own.as_deref()
                        && let Ok(ip) = s.host_address().parse()
                        && !peers.iter().any(|(n, _)| n == s.server_id)
                    {
                        peers.push((s.server_id.to_owned(), ip));
                    }
                }
                let max_dev = table
                    .servers()
                    .iter()
                    .flat_map(|s| &s.devices)
                    .map(|d| d.device_id)
                    .max()
                    .unwrap_or(0);
                if i64::from(args.comm_port_base) + i64::from(max_dev) > 65535 {
                    f.port_check = Some(Err(format!(
                        "comm port base {} + device id {max_dev} exceeds 65535",
                        args.comm_port_base
                    )));
                } else if f.port_check.is_none() {
                    f.port_check = Some(Ok(()));
                }
            }
            Err(e) => f.port_check = Some(Err(e)),
        }
    }
    if let Some(c) = &chosen {
        let targets: Vec<ProbeTarget> = peers
            .iter()
            .map(|(n, ip)| ProbeTarget {
                name: n.clone(),
                addr: SocketAddr::new(*ip, args.probe_port),
            })
            .collect();
        f.peer_probes = probe_all(
            &c.name,
            c.ip,
            &targets,
            &args.probe_secret,
            args.probe_timeout,
        )
        .await;
    }
    if let Some(url) = &args.agent_url
        && let Some(body) = http_get(url).await
    {
        let (comm, fds, max) = parse_counters(&body);
        f.comm = comm;
        f.open_fds = fds;
        f.fd_limit = max;
    }
    let roots = if args.log_paths.is_empty() {
        logs::default_roots()
    } else {
        args.log_paths.clone()
    };
    f.log_matches = tokio::task::spawn_blocking(move || logs::scan(&roots))
        .await
        .unwrap_or_default();
    f.nics = nics;
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_as_name_equals_ip() {
        let p = parse_peers("host-0=198.18.0.10, host-1=198.18.0.11").unwrap();
        assert_eq!(p[1].0, "host-1");
        assert!(parse_peers("host-0").is_err());
        assert!(parse_peers("a=b").is_err());
    }

    #[test]
    fn counters_are_read_from_prometheus_text() {
        let text = "# HELP x\nhcomm_agent_communicators_created_total 12\nhcomm_agent_communicators_destroyed_total 11\nhcomm_agent_communicators_open 1\nhcomm_agent_open_fds 33\n";
        let (c, fds, max) = parse_counters(text);
        assert_eq!(
            c,
            Some(CommCounters {
                created: 12,
                destroyed: 11,
                open: 1
            })
        );
        assert_eq!(fds, Some(33));
        assert_eq!(max, None);
    }

    #[test]
    fn cpu_lists_expand_ranges() {
        assert_eq!(parse_cpu_list("0-2,5\n"), [0, 1, 2, 5]);
        assert!(parse_cpu_list("junk").is_empty());
    }
}

/// Test access to the tiny HTTP client.
#[doc(hidden)]
pub mod tests_support {
    /// GET over HTTP/1.0, body only.
    pub async fn get(url: &str) -> Option<String> {
        super::http_get(url).await
    }
}
