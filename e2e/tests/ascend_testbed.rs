//! The testbed plays the Ascend parts faithfully (issue 15 point 5): NPU ports on their own
//! fabric carrying the device IPs, `/etc/hccn.conf`, the `hccn_tool` simulator answering
//! in the documented formats with injectable faults and refusing concurrent calls; kwok
//! Nodes that advertise `huawei.com/Ascend910` to the real scheduler; the device-plugin
//! stand-in of the process kubelet. Runs under `hcomm_e2e::harness`: tests that need
//! network namespaces are reported ignored, with the reason, without root.

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::{Context as _, ensure};
use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::hccn_sim::root::{AscendRoot, DeviceFault};
use hcomm_e2e::hosts::hccn_sim::{CONCURRENT_MESSAGE, EXIT_CONCURRENT};
use hcomm_e2e::hosts::{LinkState, SimHosts, SimHostsOptions};

const SIMULATOR: &str = env!("CARGO_BIN_EXE_hccn-tool-sim");

fn main() {
    let tests = vec![
        Test::new(
            "npu_ports_carry_the_device_ips_and_hccn_tool_answers_each_command_in_format",
            Needs::NetworkNamespaces,
            npu_ports_carry_the_device_ips_and_hccn_tool_answers_each_command_in_format,
        ),
        Test::new(
            "npu_ping_between_hosts_works_and_fails_when_the_npu_link_is_cut",
            Needs::NetworkNamespaces,
            npu_ping_between_hosts_works_and_fails_when_the_npu_link_is_cut,
        ),
        Test::new(
            "each_injected_hccn_fault_shows_in_the_tools_answer",
            Needs::NetworkNamespaces,
            each_injected_hccn_fault_shows_in_the_tools_answer,
        ),
        Test::new(
            "concurrent_hccn_tool_calls_fail_loudly_and_are_counted",
            Needs::NetworkNamespaces,
            concurrent_hccn_tool_calls_fail_loudly_and_are_counted,
        ),
    ];
    harness::run(tests).exit();
}

/// Two hosts of two NPUs, each with its Ascend files under a fresh root.
struct Npus {
    hosts: SimHosts,
    roots: Vec<AscendRoot>,
    dir: PathBuf,
}

impl Npus {
    fn start(tag: &str) -> anyhow::Result<Npus> {
        let hosts = SimHosts::create(SimHostsOptions::new(2).npus(2))?;
        let dir = std::env::temp_dir().join(format!("hcomm-ascend-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let roots = (0..hosts.len())
            .map(|i| {
                AscendRoot::install(
                    &dir.join(format!("host-{i}")),
                    i,
                    hosts.len(),
                    hosts.npus_per_host(),
                    Path::new(SIMULATOR),
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Npus { hosts, roots, dir })
    }

    /// Runs host `i`'s hccn_tool with `args` inside the host, as the agent would.
    fn tool(&self, i: usize, args: &str) -> anyhow::Result<Output> {
        let h = self.hosts.host(i)?;
        let tool = self.roots[i].hccn_tool();
        let mut cmd = h.command(&tool.display().to_string());
        cmd.args(args.split_whitespace());
        // The simulator bounds every call (a ping is 3 × 1 s at most).
        cmd.output()
            .with_context(|| format!("run hccn_tool {args} on host {i}"))
    }

    fn stdout(&self, i: usize, args: &str) -> anyhow::Result<String> {
        let out = self.tool(i, args)?;
        ensure!(
            out.status.success(),
            "hccn_tool {args} on host {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }
}

impl Drop for Npus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn npu_ports_carry_the_device_ips_and_hccn_tool_answers_each_command_in_format() -> harness::Outcome
{
    let npus = Npus::start("format")?;
    let h1 = npus.hosts.host(1)?;
    ensure!(h1.npus().len() == 2, "two NPU ports: {:?}", h1.npus());
    let port = &h1.npus()[1];
    let shown = String::from_utf8(
        h1.command("ip")
            .args(["-o", "-4", "addr", "show", "dev", &port.interface])
            .output()?
            .stdout,
    )?;
    ensure!(
        shown.contains(&format!("{}/16", port.ip)),
        "{} carries {}: {shown}",
        port.interface,
        port.ip
    );
    let conf = std::fs::read_to_string(npus.roots[1].hccn_conf())?;
    ensure!(
        conf.contains(&format!(
            "address_1={}\nnetmask_1=255.255.0.0\nnetdetect_1=",
            port.ip
        )),
        "hccn.conf lists the port: {conf}"
    );
    ensure!(npus.stdout(1, "-i 1 -ip -g")? == format!("ipaddr:{}\nnetmask:255.255.0.0\n", port.ip));
    ensure!(npus.stdout(1, "-i 1 -link -g")? == "link status: UP\n");
    ensure!(npus.stdout(1, "-i 1 -net_health -g")? == "net health status: Success\n");
    let tls = npus.stdout(1, "-i 1 -tls -g")?;
    ensure!(
        tls.starts_with("dev_id:1, tls switch[0](0:disable, 1:enable)"),
        "{tls}"
    );
    let peer = npus.hosts.host(0)?.npus()[1].ip;
    let ping = npus.stdout(1, &format!("-i 1 -ping -g address {peer}"))?;
    ensure!(
        ping == "3 packets transmitted, 3 received, 0.00% packet loss\n",
        "{ping}"
    );
    let bad = npus.tool(1, "-i 7 -link -g")?;
    ensure!(!bad.status.success(), "a device the host lacks is an error");
    ensure!(npus.roots[1].concurrent_calls() == 0);
    Ok(())
}

fn npu_ping_between_hosts_works_and_fails_when_the_npu_link_is_cut() -> harness::Outcome {
    let npus = Npus::start("ping")?;
    let peer = npus.hosts.host(1)?.npus()[0].ip;
    let ping = format!("-i 0 -ping -g address {peer}");
    ensure!(npus.stdout(0, &ping)?.contains(" 0.00% packet loss"));
    // The peer's NPU 0 loses its cable: the port reports DOWN, the ping times out.
    npus.hosts.set_npu_link(1, 0, LinkState::Down)?;
    ensure!(npus.stdout(1, "-i 0 -link -g")? == "link status: DOWN\n");
    let lost = npus.stdout(0, &ping)?;
    ensure!(
        lost.starts_with("recv time out seq 1\n")
            && lost.ends_with("3 packets transmitted, 0 received, 100.00% packet loss\n"),
        "{lost}"
    );
    // The same host's other NPU is not a way around the cut port.
    let other = npus.hosts.host(1)?.npus()[1].ip;
    ensure!(
        npus.stdout(0, &format!("-i 1 -ping -g address {other}"))?
            .contains(" 0.00% packet loss"),
        "the sibling port still answers"
    );
    npus.hosts.set_npu_link(1, 0, LinkState::Up)?;
    ensure!(npus.stdout(1, "-i 0 -link -g")? == "link status: UP\n");
    ensure!(npus.stdout(0, &ping)?.contains(" 0.00% packet loss"));
    // Our own port cut: nothing leaves it.
    npus.hosts.set_npu_link(0, 0, LinkState::Down)?;
    ensure!(npus.stdout(0, &ping)?.contains("100.00% packet loss"));
    Ok(())
}

fn each_injected_hccn_fault_shows_in_the_tools_answer() -> harness::Outcome {
    let npus = Npus::start("faults")?;
    let root = &npus.roots[0];
    root.set_fault(
        1,
        DeviceFault {
            tls: true,
            net_health: None,
        },
    )?;
    ensure!(npus.stdout(0, "-i 1 -tls -g")?.contains("tls switch[1]"));
    ensure!(npus.stdout(0, "-i 0 -tls -g")?.contains("tls switch[0]"));
    root.set_fault(
        0,
        DeviceFault {
            tls: false,
            net_health: Some("Fault".into()),
        },
    )?;
    ensure!(npus.stdout(0, "-i 0 -net_health -g")? == "net health status: Fault\n");
    ensure!(npus.stdout(0, "-i 1 -net_health -g")? == "net health status: Success\n");
    root.duplicate_device_ip(1, 0)?;
    let ip0 = npus.stdout(0, "-i 0 -ip -g")?;
    ensure!(npus.stdout(0, "-i 1 -ip -g")? == ip0, "two devices, one IP");
    root.remove_device_ip(1)?;
    let missing = npus.tool(0, "-i 1 -ip -g")?;
    ensure!(
        !missing.status.success()
            && String::from_utf8_lossy(&missing.stderr).contains("no address"),
        "a device without an IP: {missing:?}"
    );
    ensure!(
        !std::fs::read_to_string(root.hccn_conf())?.contains("address_1="),
        "and hccn.conf lacks it too"
    );
    Ok(())
}

fn concurrent_hccn_tool_calls_fail_loudly_and_are_counted() -> harness::Outcome {
    let npus = Npus::start("concurrent")?;
    // A ping to an address nobody holds takes its full 3 s, holding the host's lock.
    let h0 = npus.hosts.host(0)?;
    let slow = h0
        .command(&npus.roots[0].hccn_tool().display().to_string())
        .args(["-i", "0", "-ping", "-g", "address", "192.168.250.250"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let refused = npus.tool(0, "-i 1 -link -g")?;
    let slow_out = slow.wait_with_output()?;
    ensure!(
        refused.status.code() == Some(EXIT_CONCURRENT)
            && String::from_utf8_lossy(&refused.stderr).contains(CONCURRENT_MESSAGE),
        "the overlapping call is refused loudly: {refused:?}"
    );
    ensure!(String::from_utf8(slow_out.stdout)?.contains("100.00% packet loss"));
    ensure!(npus.roots[0].concurrent_calls() == 1);
    // Another host's tool is independent, and a call after the first ends is served.
    ensure!(npus.stdout(0, "-i 1 -link -g")? == "link status: UP\n");
    ensure!(npus.roots[1].concurrent_calls() == 0);
    Ok(())
}
