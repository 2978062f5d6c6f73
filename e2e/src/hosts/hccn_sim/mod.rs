//! An `hccn_tool` simulator for the testbed's NPU fabric ([`super::npu`]): the program
//! hcomm's agent is pointed at instead of `/usr/local/Ascend/driver/tools/hccn_tool`.
//! It runs inside the host's namespace, as the agent runs the real tool on its node, and
//! answers the commands hcomm uses in the real tool's documented output formats
//! (ASCEND.md §3; the exact wording of failures is not documented and is marked below):
//!
//! | command | answer |
//! |---|---|
//! | `-i N -ip -g` | `ipaddr:A` / `netmask:M` from the host's `/etc/hccn.conf` |
//! | `-i N -link -g` | `link status: UP\|DOWN` from port `npuN`'s real oper state |
//! | `-i N -net_health -g` | `net health status: Success` (or the injected value) |
//! | `-i N -tls -g` | `dev_id:N, tls switch[0\|1](0:disable, 1:enable), …` |
//! | `-i N -ping -g address X` | a real ICMP echo from port `npuN` ([`ping`]) |
//!
//! Faults come from the host root ([`root::AscendRoot`]): a device's address removed
//! from hccn.conf or copied from another device, TLS switched on, health not Success;
//! link down is real (the port loses carrier, [`super::SimHosts::set_npu_link`]).
//!
//! The real tool does not support concurrent use ("hccn_tool工具不支持多线程并发操作",
//! Ascend driver docs). The simulator makes that loud instead of subtly wrong: each call
//! holds an exclusive lock on the host for at least [`MIN_HOLD`], and a call that finds
//! it held fails with [`CONCURRENT_MESSAGE`] and is recorded, so a test proves the
//! agent serialises its calls. Every call is appended to the host's call log.

pub mod ping;
pub mod root;

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use root::AscendRoot;
pub use root::EXIT_CONCURRENT;

/// Shortest time a call holds the host's lock (the real tool talks to the device and is
/// never instant; without a floor, overlapping calls would rarely overlap).
pub const MIN_HOLD: Duration = Duration::from_millis(20);
/// What a refused concurrent call prints on stderr (simulator wording).
pub const CONCURRENT_MESSAGE: &str =
    "hccn_tool is already running on this node: concurrent calls are not supported";
/// Echo requests per ping, as the real tool's summary line shows.
pub const PING_COUNT: u16 = 3;
/// How long each echo request waits for its reply.
pub const PING_WAIT: Duration = Duration::from_secs(1);

/// What the tool is asked to do on device `device`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `-i N`: the device's physical id.
    pub device: u32,
    /// The object queried.
    pub op: Op,
}

/// The objects the simulator answers (`-<obj> -g`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `-ip -g`.
    Ip,
    /// `-link -g`.
    Link,
    /// `-net_health -g`.
    NetHealth,
    /// `-tls -g`.
    Tls,
    /// `-ping -g address X`.
    Ping(Ipv4Addr),
}

/// A command line the simulator does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// No `--root <dir>` (the wrapper script passes it).
    #[error("--root <host root> is required (run through the host's hccn_tool wrapper)")]
    NoRoot,
    /// No or bad `-i N`.
    #[error("-i <device id> is required and must be a number")]
    NoDevice,
    /// Only queries are simulated.
    #[error("only get (-g) queries are simulated")]
    NotGet,
    /// An object this simulator does not answer.
    #[error("unsupported object {0:?} (simulated: -ip -link -net_health -tls -ping)")]
    Object(String),
    /// `-ping -g` without `address X`.
    #[error("-ping -g needs `address <ipv4>`")]
    PingAddress,
}

/// Parses `--root R -i N -<obj> -g [address X]` into the root and the request (pure).
pub fn parse(args: &[String]) -> Result<(PathBuf, Request), UsageError> {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let root = value("--root").ok_or(UsageError::NoRoot)?;
    let device = value("-i")
        .and_then(|v| v.parse().ok())
        .ok_or(UsageError::NoDevice)?;
    if !args.iter().any(|a| a == "-g") {
        return Err(UsageError::NotGet);
    }
    let object = args
        .iter()
        .find(|a| a.starts_with('-') && !["--root", "-i", "-g"].contains(&a.as_str()))
        .map(String::as_str)
        .unwrap_or("");
    let op = match object {
        "-ip" => Op::Ip,
        "-link" => Op::Link,
        "-net_health" => Op::NetHealth,
        "-tls" => Op::Tls,
        "-ping" => Op::Ping(
            value("address")
                .and_then(|v| v.parse().ok())
                .ok_or(UsageError::PingAddress)?,
        ),
        other => return Err(UsageError::Object(other.to_owned())),
    };
    Ok((PathBuf::from(root), Request { device, op }))
}

/// `-ip -g`'s answer.
pub fn format_ip(address: Ipv4Addr, netmask: Ipv4Addr) -> String {
    format!("ipaddr:{address}\nnetmask:{netmask}\n")
}

/// `-link -g`'s answer.
pub fn format_link(up: bool) -> String {
    format!("link status: {}\n", if up { "UP" } else { "DOWN" })
}

/// `-net_health -g`'s answer (`Success`, `Fault`, `Socket failed`, …).
pub fn format_net_health(status: &str) -> String {
    format!("net health status: {status}\n")
}

/// `-tls -g`'s answer.
pub fn format_tls(device: u32, enabled: bool) -> String {
    format!(
        "dev_id:{device}, tls switch[{}](0:disable, 1:enable), tls preconfigured[1](0:non-preset, \
         1:preset), tls alarm time threshold[60]days\n",
        u8::from(enabled)
    )
}

/// `-ping -g`'s answer: a `recv time out seq N` line per lost request (1-based), then the
/// summary line.
pub fn format_ping(sent: u16, lost: &[u16]) -> String {
    let mut out = String::new();
    for seq in lost {
        out.push_str(&format!("recv time out seq {seq}\n"));
    }
    let received = sent.saturating_sub(lost.len() as u16);
    let loss = if sent == 0 {
        0.0
    } else {
        100.0 * f64::from(sent - received) / f64::from(sent)
    };
    out.push_str(&format!(
        "{sent} packets transmitted, {received} received, {loss:.2}% packet loss\n"
    ));
    out
}

/// One call's outcome: what goes to stdout and stderr, and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Exit status.
    pub code: i32,
}

impl Answer {
    fn ok(stdout: String) -> Answer {
        Answer {
            stdout,
            stderr: String::new(),
            code: 0,
        }
    }
    fn fail(stderr: String) -> Answer {
        Answer {
            stdout: String::new(),
            stderr,
            code: 1,
        }
    }
}

/// The whole program: parse, lock the host, answer, log the call. Returns the exit
/// status; output is written to this process' stdout and stderr.
pub fn main_with(args: &[String]) -> i32 {
    let answer = run(args);
    print!("{}", answer.stdout);
    eprint!("{}", answer.stderr);
    let _ = std::io::stdout().flush();
    answer.code
}

fn run(args: &[String]) -> Answer {
    let (root, request) = match parse(args) {
        Ok(p) => p,
        Err(e) => return Answer::fail(format!("hccn_tool: {e}\n")),
    };
    let root = AscendRoot::open(&root);
    let started = Instant::now();
    let answer = match root.try_lock() {
        Ok(Some(_guard)) => {
            let answer = answer(&root, &request);
            if let Some(rest) = MIN_HOLD.checked_sub(started.elapsed()) {
                std::thread::sleep(rest);
            }
            answer
        }
        Ok(None) => Answer {
            stdout: String::new(),
            stderr: format!("hccn_tool: {CONCURRENT_MESSAGE}\n"),
            code: EXIT_CONCURRENT,
        },
        Err(e) => Answer::fail(format!("hccn_tool: {e}\n")),
    };
    root.log_call(args, answer.code);
    answer
}

fn answer(root: &AscendRoot, request: &Request) -> Answer {
    let port = super::npu::npu_interface(request.device);
    let sys = Path::new("/sys/class/net").join(&port);
    if !sys.exists() {
        return Answer::fail(format!(
            "hccn_tool: device id {} is invalid (no such NPU on this node)\n",
            request.device
        ));
    }
    let faults = root.faults().device(request.device);
    match &request.op {
        Op::Ip => match root.read_conf() {
            Ok(conf) => match conf.devices.get(&request.device) {
                Some(super::hccn_conf::HccnEntry {
                    address: Some(a),
                    netmask: Some(m),
                    ..
                }) => Answer::ok(format_ip(*a, *m)),
                // Simulator wording: the real tool's message is not documented.
                _ => Answer::fail(format!(
                    "hccn_tool: get ip address failed: device {} has no address configured\n",
                    request.device
                )),
            },
            Err(e) => Answer::fail(format!("hccn_tool: {e}\n")),
        },
        Op::Link => {
            let state = std::fs::read_to_string(sys.join("operstate")).unwrap_or_default();
            Answer::ok(format_link(state.trim() == "up"))
        }
        Op::NetHealth => Answer::ok(format_net_health(
            faults.net_health.as_deref().unwrap_or("Success"),
        )),
        Op::Tls => Answer::ok(format_tls(request.device, faults.tls)),
        Op::Ping(target) => match ping::ping(&port, *target, PING_COUNT, PING_WAIT) {
            Ok(lost) => Answer::ok(format_ping(PING_COUNT, &lost)),
            Err(e) => Answer::fail(format!("hccn_tool: ping from {port}: {e}\n")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_commands_hcomm_uses_parse() {
        let (root, r) = parse(&args("--root /r -i 3 -ip -g")).unwrap();
        assert_eq!(root, PathBuf::from("/r"));
        assert_eq!(
            r,
            Request {
                device: 3,
                op: Op::Ip
            }
        );
        for (line, op) in [
            ("-i 0 -link -g", Op::Link),
            ("-i 0 -net_health -g", Op::NetHealth),
            ("-i 0 -tls -g", Op::Tls),
            (
                "-i 0 -ping -g address 192.168.1.10",
                Op::Ping(Ipv4Addr::new(192, 168, 1, 10)),
            ),
        ] {
            assert_eq!(parse(&args(&format!("--root /r {line}"))).unwrap().1.op, op);
        }
    }

    #[test]
    fn bad_command_lines_are_named_errors() {
        assert_eq!(parse(&args("-i 0 -ip -g")), Err(UsageError::NoRoot));
        assert_eq!(
            parse(&args("--root /r -i x -ip -g")),
            Err(UsageError::NoDevice)
        );
        assert_eq!(
            parse(&args("--root /r -i 0 -ip -s")),
            Err(UsageError::NotGet)
        );
        assert_eq!(
            parse(&args("--root /r -i 0 -lldp -g")),
            Err(UsageError::Object("-lldp".into()))
        );
        assert_eq!(
            parse(&args("--root /r -i 0 -ping -g")),
            Err(UsageError::PingAddress)
        );
    }

    #[test]
    fn answers_are_in_the_documented_formats() {
        assert_eq!(
            format_ip(
                Ipv4Addr::new(192, 161, 200, 10),
                Ipv4Addr::new(255, 255, 255, 0)
            ),
            "ipaddr:192.161.200.10\nnetmask:255.255.255.0\n"
        );
        assert_eq!(format_link(true), "link status: UP\n");
        assert_eq!(format_link(false), "link status: DOWN\n");
        assert_eq!(format_net_health("Fault"), "net health status: Fault\n");
        assert!(
            format_tls(0, false)
                .starts_with("dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1]")
        );
        assert!(format_tls(2, true).contains("tls switch[1]"));
        assert!(format_tls(2, true).contains("tls alarm time threshold[60]days"));
        assert_eq!(
            format_ping(3, &[]),
            "3 packets transmitted, 3 received, 0.00% packet loss\n"
        );
        assert_eq!(
            format_ping(3, &[1, 2, 3]),
            "recv time out seq 1\nrecv time out seq 2\nrecv time out seq 3\n\
             3 packets transmitted, 0 received, 100.00% packet loss\n"
        );
        assert!(
            format_ping(3, &[2])
                .ends_with("3 packets transmitted, 2 received, 33.33% packet loss\n")
        );
    }
}
