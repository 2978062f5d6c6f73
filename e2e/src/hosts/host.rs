//! One simulated host as callers see it: its name, addresses and NIC names, and how to
//! run programs inside it (`ip netns exec`, or directly for loopback hosts).

use std::net::Ipv4Addr;
use std::process::Command;

use super::error::{Error, Result};
use super::process::HostProcess;

/// One simulated host (a network namespace, or a pair of loopback addresses).
#[derive(Debug, Clone)]
pub struct SimHost {
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) netns: Option<String>,
    pub(crate) data_ip: Ipv4Addr,
    pub(crate) mgmt_ip: Ipv4Addr,
    pub(crate) data_if: String,
    pub(crate) mgmt_if: String,
    pub(crate) npus: Vec<super::npu::NpuDevice>,
}

impl SimHost {
    /// Position in [`SimHosts::hosts`](super::SimHosts::hosts).
    pub fn index(&self) -> usize {
        self.index
    }
    /// Logical host name, `host-<i>` (use it as the node name).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The network namespace, `None` for loopback hosts.
    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }
    /// Address on the data subnet.
    pub fn data_ip(&self) -> Ipv4Addr {
        self.data_ip
    }
    /// Address on the management subnet.
    pub fn mgmt_ip(&self) -> Ipv4Addr {
        self.mgmt_ip
    }
    /// Data NIC name as the host sees it (`data0`; `lo` for loopback hosts).
    pub fn data_interface(&self) -> &str {
        &self.data_if
    }
    /// Management NIC name as the host sees it (`mgmt0`; `lo` for loopback hosts).
    pub fn mgmt_interface(&self) -> &str {
        &self.mgmt_if
    }

    /// The host's NPU ports (empty without an NPU fabric, and for loopback hosts).
    pub fn npus(&self) -> &[super::npu::NpuDevice] {
        &self.npus
    }

    /// A command that runs `program` inside this host (`ip netns exec <ns> program`);
    /// add arguments, environment and stdio as with any [`Command`].
    pub fn command(&self, program: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        }
    }

    /// Starts `program args...` inside this host; the process is killed when the returned
    /// guard drops.
    pub fn spawn(&self, program: &str, args: &[&str]) -> Result<HostProcess> {
        let mut cmd = self.command(program);
        cmd.args(args);
        self.spawn_command(cmd)
    }

    /// Starts a prepared [`SimHost::command`]; killed when the guard drops.
    pub fn spawn_command(&self, mut cmd: Command) -> Result<HostProcess> {
        let label = format!("{:?} on {}", cmd, self.name);
        let child = cmd.spawn().map_err(|source| Error::Spawn {
            command: label.clone(),
            source,
        })?;
        Ok(HostProcess::new(child, label))
    }
}
