//! The raw link check: goodput host-0 → host-1 over the shaped data links, with iperf3
//! or a built-in TCP blast (this binary's hidden `__blast-recv`/`__blast-send` modes,
//! run inside the simulated hosts), reported beside the benchmark's floor.
//!
//! Both measure the sustained rate: the first [`OMIT_S`] seconds are sent but not counted
//! (iperf3's `--omit`). The shaper's bucket holds 10 ms of tokens when the link has been
//! idle, so a count that starts with the first byte reads that burst as rate: over 3 s it
//! read 0.34 % above what the link sustains (480 Mbit/s at 500, where TCP's payload in
//! 1,514-byte frames can be at most 478.2), and the floor derived from it came out
//! ~60 ms short for 1 GiB.

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

/// Seconds sent before the count starts (the shaper's burst, TCP's slow start).
pub const OMIT_S: u32 = 1;
/// Seconds counted.
pub const MEASURE_S: u32 = 3;

/// Sustained goodput host-0 → host-1 over the shaped data links: [`MEASURE_S`] seconds
/// after [`OMIT_S`].
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
                .args(["-c", &target, "-p", "5299", "-J"])
                .args(["-t", &MEASURE_S.to_string(), "-O", &OMIT_S.to_string()])
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
                .args(["__blast-recv", &addr, &OMIT_S.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .context("start the blast receiver")?;
            std::thread::sleep(Duration::from_millis(300));
            let sent = from
                .command(&exe)
                .args(["__blast-send", &addr, &(OMIT_S + MEASURE_S).to_string()])
                .status()
                .context("run the blast sender")?;
            if !sent.success() {
                // The receiver may still wait in accept (no connection ever came).
                let _ = recv.kill();
                let _ = recv.wait();
                anyhow::bail!("blast sender failed ({sent})");
            }
            let mut out = String::new();
            recv.stdout
                .take()
                .context("receiver stdout")?
                .read_to_string(&mut out)?;
            let _ = recv.wait();
            Ok(Some(LinkResult {
                tool: "TCP blast",
                mbit: out.trim().parse().context("receiver output")?,
            }))
        }
    }
}

/// A plain TCP blast: the sender writes for N seconds, the receiver prints the Mbit/s it
/// received after its first OMIT seconds, up to EOF.
pub mod blast {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result};

    pub fn receive(args: &[String]) -> Result<()> {
        let addr = args.first().context("__blast-recv ADDR OMIT_S")?;
        let omit: f64 = args.get(1).context("__blast-recv ADDR OMIT_S")?.parse()?;
        let listener = TcpListener::bind(addr)?;
        let (mut s, _) = listener.accept()?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut count = Sustained::new(Duration::from_secs_f64(omit));
        loop {
            let n = s.read(&mut buf).context("read the blast")?;
            if n == 0 {
                break;
            }
            count.received(n as u64, Instant::now());
        }
        println!("{:.1}", count.mbit(Instant::now())?);
        Ok(())
    }

    /// Bytes counted from `omit` after the first one arrived.
    pub struct Sustained {
        omit: Duration,
        first: Option<Instant>,
        /// When the count started, and the bytes read by then.
        from: Option<(Instant, u64)>,
        total: u64,
    }

    impl Sustained {
        pub fn new(omit: Duration) -> Self {
            Sustained {
                omit,
                first: None,
                from: None,
                total: 0,
            }
        }

        pub fn received(&mut self, bytes: u64, at: Instant) {
            // What a read returns arrived by the time it returned: the read that ends the
            // omitted start belongs to it.
            let first = *self.first.get_or_insert(at);
            self.total += bytes;
            if self.from.is_none() && at.duration_since(first) >= self.omit {
                self.from = Some((at, self.total));
            }
        }

        /// Mbit/s from the start of the count to `end`.
        pub fn mbit(&self, end: Instant) -> Result<f64> {
            let (from, before) = self
                .from
                .context("the blast ended before its omitted start was over")?;
            let secs = end.duration_since(from).as_secs_f64().max(1e-9);
            Ok((self.total - before) as f64 * 8.0 / secs / 1e6)
        }
    }

    pub fn send(args: &[String]) -> Result<()> {
        let addr = args.first().context("__blast-send ADDR SECS")?;
        let secs: f64 = args.get(1).context("__blast-send ADDR SECS")?.parse()?;
        let mut s = TcpStream::connect_timeout(&addr.parse()?, Duration::from_secs(5))?;
        s.set_write_timeout(Some(Duration::from_secs(30)))?;
        let buf = vec![0x5au8; 1 << 20];
        let until = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < until {
            s.write_all(&buf)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::blast::Sustained;

    #[test]
    fn the_burst_before_the_omitted_start_is_not_counted_as_rate() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut count = Sustained::new(Duration::from_secs(1));
        // A burst at the start, then 1 MB every 100 ms (80 Mbit/s).
        count.received(5_000_000, ms(0));
        for i in 1..=30 {
            count.received(1_000_000, ms(i * 100));
        }
        // Counted from the read at 1 s: the 20 reads after it over 2 s.
        let mbit = count.mbit(ms(3000)).unwrap();
        assert!((mbit - 80.0).abs() < 1e-6, "{mbit}");
    }

    #[test]
    fn a_blast_shorter_than_the_omitted_start_is_an_error_not_a_rate() {
        let t0 = Instant::now();
        let mut count = Sustained::new(Duration::from_secs(1));
        count.received(1_000_000, t0);
        count.received(1_000_000, t0 + Duration::from_millis(500));
        assert!(count.mbit(t0 + Duration::from_millis(600)).is_err());
    }
}
