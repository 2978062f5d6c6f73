//! The rules HCCL applies when it loads a rank table, checked before a table is published
//! (operator) and after it is read (agent), so a bad table is refused with a named rule
//! instead of failing inside HCCL's communicator init minutes later.
//!
//! Rules (HCCL `topoinfo_ranktableParser`, error EI0004/EI0014): rank ids unique and exactly
//! `0..n-1`; each server's ranks contiguous and the servers' rank blocks in table order (no
//! interleaving; [`ValidateOptions::contiguous_server_ranks`]); `server_count == len(server_list)`; device ids unique per server;
//! `device_ip` on every device or on none, unique across the table, and required when the
//! table has more than one server; v1.2: every server in exactly one super pod and
//! `super_device_id` unique per super pod.

use std::collections::{BTreeMap, BTreeSet};

use super::{RankTable, ServerView};

/// Which of HCCL's rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidateOptions {
    /// Require `device_ip` on every device of a multi-server table, as HCCL does: its
    /// RoCE transport connects device to device. hcomm's TCP engine connects host to host
    /// and never reads `device_ip`, and the operator knows device addresses only on nodes
    /// whose inventory reports them — so for `backend: tcp` a multi-server table without
    /// device addresses is valid. The all-or-none and uniqueness rules apply either way.
    pub require_device_ips: bool,
    /// Require each server's ranks to be one contiguous block and the blocks to follow
    /// `server_list` order, as HCCL does (its ring and mesh algorithms assume a server's
    /// devices are adjacent ranks). The TCP engine has no such assumption, and the
    /// operator's elastic placement puts a replacement member wherever there is room, so a
    /// node can hold non-adjacent ranks (`[0, 2, 3]`) after a failure; placement that keeps
    /// blocks contiguous is needed before `backend: hccl` can scale elastically.
    pub contiguous_server_ranks: bool,
    /// Require the ranks to be exactly `0..n-1`, as HCCL does. The operator keeps a
    /// member's ranks stable across epochs (`index × devicesPerMember`) so the members
    /// that serve never move; after a scale-in or a replacement the TCP backend's table
    /// has gaps (`0, 1, 4, 5`). Repeated ranks are refused either way.
    pub dense_ranks: bool,
}

impl ValidateOptions {
    /// Every rule HCCL applies (`backend: hccl`).
    pub const HCCL: Self = Self {
        require_device_ips: true,
        contiguous_server_ranks: true,
        dense_ranks: true,
    };
    /// HCCL's rules minus the device-address, rank-block and dense-rank requirements
    /// (`backend: tcp`).
    pub const TCP: Self = Self {
        require_device_ips: false,
        contiguous_server_ranks: false,
        dense_ranks: false,
    };

    /// The rule set for a group's backend.
    pub fn for_backend(backend: crate::Backend) -> Self {
        match backend {
            crate::Backend::Hccl => Self::HCCL,
            crate::Backend::Tcp => Self::TCP,
        }
    }
}

/// The rule a table breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidateError {
    /// No ranks at all.
    #[error("the rank table has no ranks")]
    Empty,
    /// Two devices hold the same rank.
    #[error("rank {rank} appears more than once")]
    DuplicateRank { rank: u32 },
    /// A rank outside `0..world` (so some rank below `world` is missing).
    #[error("rank {rank} is out of range: a table of {world} ranks holds exactly 0..{world}")]
    RankOutOfRange { rank: u32, world: usize },
    /// A server's ranks have a hole (another server's rank sits inside its block).
    #[error("server {server_id}'s ranks are not contiguous: {ranks:?}")]
    RanksNotContiguous { server_id: String, ranks: Vec<u32> },
    /// A server's block of ranks comes before the previous server's in table order.
    #[error(
        "server {server_id} starts at rank {first} but the server before it ends at {previous_last}: servers must list their ranks in order without interleaving"
    )]
    ServersInterleave {
        server_id: String,
        first: u32,
        previous_last: u32,
    },
    /// `server_count` is not the length of `server_list`.
    #[error("server_count is {declared} but server_list has {actual} servers")]
    ServerCountMismatch { declared: u32, actual: usize },
    /// Two servers of `server_list` share a `server_id` (HCCL keys servers by it; the
    /// agent finds its own server by it).
    #[error("server_id {server_id} is listed more than once in server_list")]
    DuplicateServerId { server_id: String },
    /// A server lists one device twice.
    #[error("server {server_id} lists device {device_id} more than once")]
    DuplicateDeviceId { server_id: String, device_id: u32 },
    /// Some devices have a `device_ip` and others do not.
    #[error("device_ip is set on {with} devices and missing on {without}: set it on all or none")]
    PartialDeviceIps { with: usize, without: usize },
    /// Two devices share a `device_ip`.
    #[error("device_ip {device_ip} is used by more than one device")]
    DuplicateDeviceIp { device_ip: String },
    /// A multi-server table without device addresses (HCCL needs them to connect devices).
    /// The operator takes them from the nodes' `HcommNode` inventories; the message says
    /// so, and what works without them.
    #[error(
        "the rank table spans {servers} servers but has no device_ip: HCCL connects devices \
         across servers by their device addresses, taken from each node's HcommNode \
         (status devices[].ip), and the nodes of this group report none; keep a \
         backend: hccl group on one node, or use backend: tcp"
    )]
    DeviceIpsRequired { servers: usize },
    /// A server of `server_list` is in no super pod (v1.2).
    #[error("server {server_id} is in no super pod of super_pod_list")]
    ServerWithoutSuperPod { server_id: String },
    /// A server is listed in more than one super pod, or twice in one (v1.2).
    #[error("server {server_id} is listed more than once in super_pod_list")]
    ServerInSeveralSuperPods { server_id: String },
    /// A super pod names a server that `server_list` does not have (v1.2).
    #[error("super pod {super_pod_id} lists server {server_id}, which is not in server_list")]
    UnknownSuperPodServer {
        super_pod_id: String,
        server_id: String,
    },
    /// Two devices of one super pod share a `super_device_id` (v1.2).
    #[error("super_device_id {super_device_id} is used twice in super pod {super_pod_id}")]
    DuplicateSuperDeviceId {
        super_pod_id: String,
        super_device_id: u32,
    },
}

/// Checks `table` against HCCL's load rules (those `options` select).
pub fn validate(table: &RankTable, options: ValidateOptions) -> Result<(), ValidateError> {
    let servers = table.servers();
    ranks(&servers, options)?;
    server_count(table, servers.len())?;
    server_ids(&servers)?;
    device_ids(&servers)?;
    device_ips(&servers, options)?;
    if let RankTable::V12(t) = table {
        super_pods(t, &servers)?;
    }
    Ok(())
}

fn ranks(servers: &[ServerView<'_>], options: ValidateOptions) -> Result<(), ValidateError> {
    let world: usize = servers.iter().map(|s| s.devices.len()).sum();
    if world == 0 {
        return Err(ValidateError::Empty);
    }
    let mut seen = BTreeSet::new();
    for rank in servers
        .iter()
        .flat_map(|s| s.devices.iter().map(|d| d.rank_id))
    {
        if !seen.insert(rank) {
            return Err(ValidateError::DuplicateRank { rank });
        }
        if options.dense_ranks && usize::try_from(rank).ok().is_none_or(|r| r >= world) {
            return Err(ValidateError::RankOutOfRange { rank, world });
        }
    }
    if !options.contiguous_server_ranks {
        return Ok(());
    }
    let mut previous_last: Option<u32> = None;
    for server in servers {
        let mut ranks: Vec<u32> = server.devices.iter().map(|d| d.rank_id).collect();
        ranks.sort_unstable();
        let (Some(&first), Some(&last)) = (ranks.first(), ranks.last()) else {
            continue;
        };
        if (last - first) as usize + 1 != ranks.len() {
            return Err(ValidateError::RanksNotContiguous {
                server_id: server.server_id.to_owned(),
                ranks,
            });
        }
        if let Some(previous_last) = previous_last
            && first < previous_last
        {
            return Err(ValidateError::ServersInterleave {
                server_id: server.server_id.to_owned(),
                first,
                previous_last,
            });
        }
        previous_last = Some(last);
    }
    Ok(())
}

fn server_count(table: &RankTable, actual: usize) -> Result<(), ValidateError> {
    let declared = match table {
        RankTable::V1(t) => Some(t.server_count),
        RankTable::V12(t) => t.server_count,
    };
    match declared {
        Some(declared) if declared as usize != actual => {
            Err(ValidateError::ServerCountMismatch { declared, actual })
        }
        _ => Ok(()),
    }
}

fn server_ids(servers: &[ServerView<'_>]) -> Result<(), ValidateError> {
    let mut seen = BTreeSet::new();
    for server in servers {
        if !seen.insert(server.server_id) {
            return Err(ValidateError::DuplicateServerId {
                server_id: server.server_id.to_owned(),
            });
        }
    }
    Ok(())
}

fn device_ids(servers: &[ServerView<'_>]) -> Result<(), ValidateError> {
    for server in servers {
        let mut seen = BTreeSet::new();
        for device in &server.devices {
            if !seen.insert(device.device_id) {
                return Err(ValidateError::DuplicateDeviceId {
                    server_id: server.server_id.to_owned(),
                    device_id: device.device_id,
                });
            }
        }
    }
    Ok(())
}

fn device_ips(servers: &[ServerView<'_>], options: ValidateOptions) -> Result<(), ValidateError> {
    let devices = || servers.iter().flat_map(|s| s.devices.iter());
    let with = devices().filter(|d| d.device_ip.is_some()).count();
    let without = devices().count() - with;
    if with > 0 && without > 0 {
        return Err(ValidateError::PartialDeviceIps { with, without });
    }
    let mut seen = BTreeSet::new();
    for ip in devices().filter_map(|d| d.device_ip) {
        if !seen.insert(ip) {
            return Err(ValidateError::DuplicateDeviceIp {
                device_ip: ip.to_owned(),
            });
        }
    }
    if options.require_device_ips && with == 0 && servers.len() > 1 {
        return Err(ValidateError::DeviceIpsRequired {
            servers: servers.len(),
        });
    }
    Ok(())
}

fn super_pods(
    table: &super::v12::RankTable,
    servers: &[ServerView<'_>],
) -> Result<(), ValidateError> {
    let by_id: BTreeMap<&str, &ServerView<'_>> = servers.iter().map(|s| (s.server_id, s)).collect();
    let mut placed = BTreeSet::new();
    for pod in &table.super_pod_list {
        let mut super_ids = BTreeSet::new();
        for member in &pod.server_list {
            let Some(server) = by_id.get(member.server_id.as_str()) else {
                return Err(ValidateError::UnknownSuperPodServer {
                    super_pod_id: pod.super_pod_id.clone(),
                    server_id: member.server_id.clone(),
                });
            };
            if !placed.insert(member.server_id.as_str()) {
                return Err(ValidateError::ServerInSeveralSuperPods {
                    server_id: member.server_id.clone(),
                });
            }
            for super_device_id in server.devices.iter().filter_map(|d| d.super_device_id) {
                if !super_ids.insert(super_device_id) {
                    return Err(ValidateError::DuplicateSuperDeviceId {
                        super_pod_id: pod.super_pod_id.clone(),
                        super_device_id,
                    });
                }
            }
        }
    }
    match servers.iter().find(|s| !placed.contains(s.server_id)) {
        Some(s) => Err(ValidateError::ServerWithoutSuperPod {
            server_id: s.server_id.to_owned(),
        }),
        None => Ok(()),
    }
}
