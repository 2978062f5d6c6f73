//! The raw link check: goodput host-0 → host-1 over the shaped data links, with iperf3
//! or a built-in TCP blast (this binary's hidden `__blast-recv`/`__blast-send` modes,
//! run inside the simulated hosts), reported beside the benchmark's floor.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hcomm_e2e::testbed::Testbed;

use crate::args::LinkCheck;

#[derive(Debug, Clone)]
pub struct LinkResult {
    pub tool: &'static str,
    pub mbit: f64,
}

/// Goodput host-0 → host-1 over the shaped data links for 3 s.
pub fn measure(bed: &Testbed, mode: LinkCheck) -> Result<Option<LinkResult>> {
    let has_iperf3 = Command::new("which")
        .arg("iperf3")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mode = match mode {
        LinkCheck::Auto if has_iperf3 => LinkCheck::Iperf3,
        LinkCheck::Auto => LinkCheck::Blast,
        m => m,
    };
    let hosts = bed.hosts();
    let (from, to) = (hosts.host(0)?, hosts.host(1)?);
    let target = to.data_ip().to_string();
    match mode {
        LinkCheck::None | LinkCheck::Auto => Ok(None),
        LinkCheck::Iperf3 => {
            let mut server = to.command("iperf3");
            server
                .args(["-s", "-1", "-B", &target, "-p", "5299"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _server = to.spawn_command(server)?;
            std::thread::sleep(Duration::from_millis(500));
            let out = from
                .command("iperf3")
                .args(["-c", &target, "-p", "5299", "-t", "3", "-J"])
                .output()
                .context("run iperf3 -c")?;
            ensure!(
                out.status.success(),
                "iperf3: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            let bps = v["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .context("iperf3 JSON without end.sum_received")?;
            Ok(Some(LinkResult {
                tool: "iperf3",
                mbit: bps / 1e6,
            }))
        }
        LinkCheck::Blast => {
            let exe = std::env::current_exe()?.display().to_string();
            let addr = format!("{target}:5299");
            let mut recv = to
                .command(&exe)
                .args(["__blast-recv", &addr])
                .stdout(Stdio::piped())
                .spawn()
                .context("start the blast receiver")?;
            std::thread::sleep(Duration::from_millis(300));
            let sent = from
                .command(&exe)
                .args(["__blast-send", &addr, "3"])
                .status()
                .context("run the blast sender")?;
            let mut out = String::new();
            recv.stdout
                .take()
                .context("receiver stdout")?
                .read_to_string(&mut out)?;
            let _ = recv.wait();
            ensure!(sent.success(), "blast sender failed");
            Ok(Some(LinkResult {
                tool: "TCP blast",
                mbit: out.trim().parse().context("receiver output")?,
            }))
        }
    }
}

/// A plain TCP blast: the sender writes for N seconds, the receiver prints Mbit/s from
/// its first byte to EOF.
pub mod blast {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result};

    pub fn receive(args: &[String]) -> Result<()> {
        let addr = args.first().context("__blast-recv ADDR")?;
        let listener = TcpListener::bind(addr)?;
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        let mut first: Option<Instant> = None;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            total += n as u64;
        }
        let secs = first.map(|f| f.elapsed().as_secs_f64()).unwrap_or(0.0);
        println!("{:.1}", total as f64 * 8.0 / secs.max(1e-9) / 1e6);
        Ok(())
    }

    pub fn send(args: &[String]) -> Result<()> {
        let addr = args.first().context("__blast-send ADDR SECS")?;
        let secs: f64 = args.get(1).context("__blast-send ADDR SECS")?.parse()?;
        let mut s = TcpStream::connect(addr)?;
        let buf = vec![0x5au8; 1 << 20];
        let until = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < until {
            s.write_all(&buf)?;
        }
        Ok(())
    }
}
