//! The agent's `hccn_tool` runner against the testbed's simulator (real processes inside
//! simulated hosts, real NPU ports, real deadlines): every documented answer parses,
//! every injected fault is seen as what it is, a ping past its deadline is killed, and
//! the agent's calls never overlap (the simulator refuses overlapping calls loudly and
//! counts them). Needs network namespaces; reported ignored with the reason otherwise.
//!
//! This test binary doubles as the simulator: run with `--hccn-tool-sim` it is
//! `hcomm_e2e::hosts::hccn_sim::main_with` (the e2e crate's `hccn-tool-sim` binary is not
//! built for another package's tests).

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use hcomm_agent::ascend::hccn::runner::{HccnTool, ToolError};
use hcomm_crds::node::NpuLink;
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::hccn_sim::root::{AscendRoot, DeviceFault};
use hcomm_e2e::hosts::{LinkState, SimHosts, SimHostsOptions};
use tokio::time::Instant;

const SIM_FLAG: &str = "--hccn-tool-sim";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(SIM_FLAG) {
        std::process::exit(hcomm_e2e::hosts::hccn_sim::main_with(&args[1..]));
    }
    let tests = vec![
        Test::new(
            "the_runner_reads_every_documented_answer_of_the_simulator",
            Needs::NetworkNamespaces,
            || harness::block_on(Duration::from_secs(60), every_answer()),
        ),
        Test::new(
            "the_runner_sees_each_injected_fault_as_what_it_is",
            Needs::NetworkNamespaces,
            || harness::block_on(Duration::from_secs(90), each_fault()),
        ),
        Test::new(
            "a_ping_past_its_deadline_is_killed_with_a_named_error",
            Needs::NetworkNamespaces,
            || harness::block_on(Duration::from_secs(60), ping_deadline()),
        ),
        Test::new(
            "concurrent_agent_calls_are_serialised_and_the_simulator_refuses_none",
            Needs::NetworkNamespaces,
            || harness::block_on(Duration::from_secs(90), serialised()),
        ),
    ];
    harness::run_in_order(tests).exit();
}

/// Two hosts of two NPUs; per host its Ascend root and a tool path that runs the
/// simulator inside the host's namespace, as the agent runs the real tool on its node.
struct Fabric {
    hosts: SimHosts,
    roots: Vec<AscendRoot>,
    tools: Vec<PathBuf>,
    dir: PathBuf,
}

fn executable(path: &Path, script: &str) -> anyhow::Result<()> {
    std::fs::write(path, script).with_context(|| format!("write {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Fabric {
    fn start(tag: &str) -> anyhow::Result<Fabric> {
        let hosts = SimHosts::create(SimHostsOptions::new(2).npus(2))?;
        let dir =
            std::env::temp_dir().join(format!("hcomm-hccn-agent-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let sim = dir.join("hccn-tool-sim");
        let me = std::env::current_exe()?;
        executable(
            &sim,
            &format!(
                "#!/bin/sh\nexec {} {SIM_FLAG} \"$@\"\n",
                quote(&me.display().to_string())
            ),
        )?;
        let mut roots = Vec::new();
        let mut tools = Vec::new();
        for i in 0..hosts.len() {
            let root = AscendRoot::install(
                &dir.join(format!("host-{i}")),
                i,
                hosts.len(),
                hosts.npus_per_host(),
                &sim,
            )?;
            let cmd = hosts
                .host(i)?
                .command(&root.hccn_tool().display().to_string());
            let line: Vec<String> = std::iter::once(cmd.get_program())
                .chain(cmd.get_args())
                .map(|a| quote(&a.to_string_lossy()))
                .collect();
            let tool = dir.join(format!("hccn_tool-host-{i}"));
            executable(
                &tool,
                &format!("#!/bin/sh\nexec {} \"$@\"\n", line.join(" ")),
            )?;
            roots.push(root);
            tools.push(tool);
        }
        Ok(Fabric {
            hosts,
            roots,
            tools,
            dir,
        })
    }

    fn tool(&self, host: usize, timeout: Duration) -> HccnTool {
        HccnTool::new(&self.tools[host], timeout)
    }

    fn npu_ip(&self, host: usize, device: usize) -> anyhow::Result<Ipv4Addr> {
        Ok(self.hosts.host(host)?.npus()[device].ip)
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

async fn every_answer() -> harness::Outcome {
    let f = Fabric::start("answers")?;
    let t = f.tool(0, Duration::from_secs(10));
    for device in [0u32, 1] {
        let ip = t.ip(device, soon()).await?;
        ensure!(
            ip.address == f.npu_ip(0, device as usize)?,
            "device {device}: {ip:?}"
        );
        ensure!(
            Some(ip.address) == f.roots[0].read_conf()?.address(device),
            "the tool and hccn.conf agree"
        );
        ensure!(t.link(device, soon()).await? == NpuLink::Up);
        ensure!(t.net_health(device, soon()).await?.healthy());
        let tls = t.tls(device, soon()).await?;
        ensure!(!tls.enabled && tls.dev_id == Some(device), "{tls:?}");
    }
    let peer = f.npu_ip(1, 0)?;
    let p = t.ping(0, peer, soon()).await?;
    ensure!(p.reached() && p.received == p.transmitted, "{p:?}");
    ensure!(f.roots[0].concurrent_calls() == 0);
    Ok(())
}

async fn each_fault() -> harness::Outcome {
    let f = Fabric::start("faults")?;
    let t = f.tool(0, Duration::from_secs(10));
    let root = &f.roots[0];
    root.set_fault(
        1,
        DeviceFault {
            tls: true,
            net_health: Some("Socket failed".into()),
        },
    )?;
    ensure!(t.tls(1, soon()).await?.enabled, "TLS on");
    ensure!(!t.tls(0, soon()).await?.enabled, "only on device 1");
    let h = t.net_health(1, soon()).await?;
    ensure!(!h.healthy() && h.0 == "Socket failed", "{h:?}");
    // The peer's NPU loses its link: its tool says DOWN, our ping is not answered.
    f.hosts.set_npu_link(1, 0, LinkState::Down)?;
    ensure!(f.tool(1, Duration::from_secs(10)).link(0, soon()).await? == NpuLink::Down);
    let p = t.ping(0, f.npu_ip(1, 0)?, soon()).await?;
    ensure!(!p.reached(), "{p:?}");
    // Two devices, one address; then none.
    root.duplicate_device_ip(1, 0)?;
    ensure!(t.ip(1, soon()).await?.address == t.ip(0, soon()).await?.address);
    root.remove_device_ip(1)?;
    let e = t.ip(1, soon()).await.unwrap_err();
    ensure!(matches!(e, ToolError::Failed { .. }), "{e}");
    ensure!(root.concurrent_calls() == 0);
    Ok(())
}

async fn ping_deadline() -> harness::Outcome {
    let f = Fabric::start("deadline")?;
    // Nobody holds this address: the simulator waits 3 × 1 s; the call may take 0.5 s.
    let t = f.tool(0, Duration::from_millis(500));
    let started = std::time::Instant::now();
    let e = t
        .ping(0, Ipv4Addr::new(192, 168, 250, 250), soon())
        .await
        .unwrap_err();
    ensure!(e.category() == "timeout", "{e}");
    ensure!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The killed call released the node: the next one is served, nothing overlapped.
    ensure!(f.tool(0, Duration::from_secs(10)).link(0, soon()).await? == NpuLink::Up);
    ensure!(f.roots[0].concurrent_calls() == 0);
    Ok(())
}

async fn serialised() -> harness::Outcome {
    let f = Fabric::start("serial")?;
    let t = f.tool(0, Duration::from_secs(20));
    let peer = f.npu_ip(1, 1)?;
    let calls = (0..8u32).map(|i| {
        let t = t.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(40);
            match i % 4 {
                0 => t.link(i % 2, deadline).await.map(|_| ()),
                1 => t.tls(i % 2, deadline).await.map(|_| ()),
                2 => t.net_health(i % 2, deadline).await.map(|_| ()),
                _ => t.ping(i % 2, peer, deadline).await.map(|_| ()),
            }
        })
    });
    for c in futures::future::join_all(calls).await {
        c??;
    }
    ensure!(
        f.roots[0].concurrent_calls() == 0,
        "the simulator saw overlapping calls: {:?}",
        f.roots[0].calls()
    );
    ensure!(f.roots[0].calls().len() >= 8);
    Ok(())
}
