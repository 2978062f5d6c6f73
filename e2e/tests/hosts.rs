//! Simulated hosts against the real kernel: namespaces, bridges, veths, `tc`. Needs root
//! (as in CI): without it these tests are reported as ignored with the reason
//! (`hcomm_e2e::harness`), except the loopback one, which runs anywhere. Every wait has a deadline; processes run inside hosts via `ip netns exec`
//! and python3 (the test itself never enters a namespace).
//! Size: 18 independent kernel scenarios (namespaces, veths, tc, loopback) sharing one set of
//! socket and process helpers; each test is short, the file is long by count.

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use hcomm_e2e::harness::{self, Needs, Test};
use hcomm_e2e::hosts::{
    Error, HostProcess, Link, LinkState, Shaping, SimHost, SimHosts, SimHostsOptions, SubnetIndex,
};

const PORT: &str = "7000";
const DEADLINE: Duration = Duration::from_secs(15);

/// Accepts forever; per connection prints `peer <ip>` and answers `pong`.
const ECHO_SERVER: &str = r#"
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    print("peer", peer[0], flush=True)
    c.sendall(b"pong"); c.close()
"#;

/// Exit 0 iff it gets `pong` from host:port within the timeout.
const PING_CLIENT: &str = r#"
import socket, sys
t = float(sys.argv[3])
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=t)
    c.settimeout(t)
    sys.exit(0 if c.recv(4) == b"pong" else 2)
except OSError as e:
    print(e, file=sys.stderr); sys.exit(1)
"#;

/// Accepts one connection, reads to EOF, prints `<bytes> <seconds from first byte>`.
const SINK: &str = r#"
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
n, first = 0, None
while True:
    b = c.recv(1 << 16)
    if not b: break
    if first is None: first = time.monotonic()
    n += len(b)
print(n, time.monotonic() - first, flush=True)
"#;

/// Sends argv[3] bytes to host:port, then closes.
const SOURCE: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
c.sendall(b"x" * int(sys.argv[3])); c.shutdown(socket.SHUT_WR); c.recv(1)
"#;

fn main() {
    let tests: [(fn(), &str, Needs); 12] = [
        (
            two_hosts_reach_each_other_over_the_data_subnet as fn(),
            "two_hosts_reach_each_other_over_the_data_subnet",
            Needs::NetworkNamespaces,
        ),
        (
            a_host_whose_data_link_is_cut_reaches_peers_only_over_management_until_restored
                as fn(),
            "a_host_whose_data_link_is_cut_reaches_peers_only_over_management_until_restored",
            Needs::NetworkNamespaces,
        ),
        (
            cut_all_isolates_a_host_until_restore_all as fn(),
            "cut_all_isolates_a_host_until_restore_all",
            Needs::NetworkNamespaces,
        ),
        (
            a_50_mbit_shape_limits_data_throughput_to_about_50_mbit_in_both_directions as fn(),
            "a_50_mbit_shape_limits_data_throughput_to_about_50_mbit_in_both_directions",
            Needs::NetworkNamespaces,
        ),
        (
            delay_is_applied_or_refused_as_unsupported_when_the_kernel_lacks_netem as fn(),
            "delay_is_applied_or_refused_as_unsupported_when_the_kernel_lacks_netem",
            Needs::NetworkNamespaces,
        ),
        (
            a_pod_address_is_reachable_while_its_host_holds_it_and_unreachable_after as fn(),
            "a_pod_address_is_reachable_while_its_host_holds_it_and_unreachable_after",
            Needs::NetworkNamespaces,
        ),
        (
            dropping_the_hosts_removes_every_namespace_bridge_veth_and_process as fn(),
            "dropping_the_hosts_removes_every_namespace_bridge_veth_and_process",
            Needs::NetworkNamespaces,
        ),
        (
            dropping_during_a_panic_still_cleans_up as fn(),
            "dropping_during_a_panic_still_cleans_up",
            Needs::NetworkNamespaces,
        ),
        (
            a_fixed_subnet_already_in_use_is_refused_with_the_interface_named as fn(),
            "a_fixed_subnet_already_in_use_is_refused_with_the_interface_named",
            Needs::NetworkNamespaces,
        ),
        (
            stale_cleanup_spares_live_runs_and_removes_named_leftovers as fn(),
            "stale_cleanup_spares_live_runs_and_removes_named_leftovers",
            Needs::NetworkNamespaces,
        ),
        (
            orphan_cleanup_removes_what_a_dead_run_left_behind as fn(),
            "orphan_cleanup_removes_what_a_dead_run_left_behind",
            Needs::NetworkNamespaces,
        ),
        (
            loopback_hosts_have_distinct_addresses_and_refuse_cuts_and_shaping as fn(),
            "loopback_hosts_have_distinct_addresses_and_refuse_cuts_and_shaping",
            Needs::Nothing,
        ),
    ];
    harness::run(
        tests
            .into_iter()
            .map(|(test, name, needs)| {
                Test::new(name, needs, move || {
                    test();
                    Ok(())
                })
            })
            .collect(),
    )
    .exit();
}

fn sim(options: SimHostsOptions) -> SimHosts {
    SimHosts::create(options).unwrap_or_else(|e| panic!("creating simulated hosts: {e}"))
}

/// A python server inside a host whose stdout lines arrive on a channel.
struct Server {
    _process: HostProcess,
    lines: Receiver<String>,
}

impl Server {
    fn start(host: &SimHost, script: &str, bind: &str) -> Self {
        let mut cmd = host.command("python3");
        cmd.args(["-u", "-c", script, bind, PORT])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut process = host.spawn_command(cmd).expect("spawn server");
        let stdout = process.child().stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let server = Server {
            _process: process,
            lines,
        };
        assert_eq!(server.next_line(), "ready");
        server
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("server printed nothing before the deadline")
    }
}

/// Runs a command to completion, killing it at the deadline; returns success.
fn run_bounded(mut cmd: Command) -> bool {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.success();
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {DEADLINE:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `from` gets a `pong` from `to:PORT` within 2 s.
fn reaches(from: &SimHost, to: Ipv4Addr) -> bool {
    let mut cmd = from.command("python3");
    cmd.args(["-c", PING_CLIENT, &to.to_string(), PORT, "2"]);
    run_bounded(cmd)
}

fn netns_list() -> String {
    String::from_utf8(
        Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

fn link_list() -> String {
    String::from_utf8(
        Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

fn two_hosts_reach_each_other_over_the_data_subnet() {
    let hosts = sim(SimHostsOptions::new(2));
    let (a, b) = (hosts.host(0).unwrap(), hosts.host(1).unwrap());
    assert_eq!(a.data_ip().octets()[..2], [198, 18]);
    assert_eq!(a.mgmt_ip().octets()[..2], [198, 19]);
    assert_ne!(a.data_ip(), b.data_ip());

    let server = Server::start(b, ECHO_SERVER, "0.0.0.0");
    assert!(reaches(a, b.data_ip()), "A cannot reach B's data IP");
    assert_eq!(server.next_line(), format!("peer {}", a.data_ip()));
    assert!(reaches(a, b.mgmt_ip()), "A cannot reach B's mgmt IP");
    assert_eq!(server.next_line(), format!("peer {}", a.mgmt_ip()));

    // The root namespace (API server, operator, tests) reaches hosts on both subnets ...
    for ip in [b.data_ip(), b.mgmt_ip()] {
        let mut s = TcpStream::connect_timeout(&(ip, 7000).into(), Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("root namespace cannot reach {ip}: {e}"));
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut pong = [0; 4];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"pong");
    }
    // ... and hosts reach services bound on the gateway address.
    let listener = TcpListener::bind((hosts.mgmt_gateway(), 0)).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut cmd = a.command("python3");
    cmd.args([
        "-c",
        "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)",
        &hosts.mgmt_gateway().to_string(),
        &port,
    ]);
    assert!(
        run_bounded(cmd),
        "host cannot reach a service on the mgmt gateway"
    );
    listener.set_nonblocking(true).unwrap();
    let (_, peer) = listener.accept().expect("connection from the host arrived");
    assert_eq!(peer.ip(), a.mgmt_ip());
}

fn a_host_whose_data_link_is_cut_reaches_peers_only_over_management_until_restored() {
    let hosts = sim(SimHostsOptions::new(2));
    let (a, b) = (hosts.host(0).unwrap(), hosts.host(1).unwrap());
    let _server = Server::start(b, ECHO_SERVER, "0.0.0.0");
    assert!(reaches(a, b.data_ip()));

    hosts.cut_data(0).unwrap();
    assert!(!reaches(a, b.data_ip()), "data still works after cut_data");
    assert!(reaches(a, b.mgmt_ip()), "mgmt broke with the data cut");
    hosts.restore_data(0).unwrap();
    assert!(
        reaches(a, b.data_ip()),
        "data did not come back after restore_data"
    );

    // The "wrong NIC" variant: data0 keeps carrier and address yet reaches nobody.
    hosts.blackhole_data(0).unwrap();
    let mut show = a.command("ip");
    show.args(["link", "show", a.data_interface()]);
    let state = String::from_utf8(show.output().unwrap().stdout).unwrap();
    assert!(
        state.contains("LOWER_UP") && !state.contains("NO-CARRIER"),
        "{state}"
    );
    assert!(
        !reaches(a, b.data_ip()),
        "data still works while blackholed"
    );
    assert!(
        reaches(a, b.mgmt_ip()),
        "mgmt broke while data is blackholed"
    );
    hosts.restore_data(0).unwrap();
    assert!(
        reaches(a, b.data_ip()),
        "data did not come back after the blackhole"
    );
}

fn cut_all_isolates_a_host_until_restore_all() {
    let hosts = sim(SimHostsOptions::new(2));
    let (a, b) = (hosts.host(0).unwrap(), hosts.host(1).unwrap());
    let _server = Server::start(a, ECHO_SERVER, "0.0.0.0");

    hosts.cut_all(0).unwrap();
    assert!(!reaches(b, a.data_ip()));
    assert!(!reaches(b, a.mgmt_ip()));
    assert!(
        TcpStream::connect_timeout(&(a.mgmt_ip(), 7000).into(), Duration::from_secs(1)).is_err()
    );

    hosts.restore_all(0).unwrap();
    assert!(reaches(b, a.data_ip()));
    assert!(reaches(b, a.mgmt_ip()));
}

/// Mbit/s of one `bytes` transfer from `from` to `to`'s data IP, measured at the receiver.
fn throughput_mbit(from: &SimHost, to: &SimHost, bytes: usize) -> f64 {
    let sink = Server::start(to, SINK, &to.data_ip().to_string());
    let mut cmd = from.command("python3");
    cmd.args([
        "-c",
        SOURCE,
        &to.data_ip().to_string(),
        PORT,
        &bytes.to_string(),
    ]);
    assert!(run_bounded(cmd), "transfer failed");
    let line = sink.next_line();
    let (n, secs) = line.split_once(' ').expect("`<bytes> <secs>`");
    assert_eq!(n.parse::<usize>().unwrap(), bytes);
    bytes as f64 * 8.0 / secs.parse::<f64>().unwrap() / 1e6
}

fn a_50_mbit_shape_limits_data_throughput_to_about_50_mbit_in_both_directions() {
    // Shaped from creation on; then host 1 is unshaped, so only host 0's link limits.
    let hosts = sim(SimHostsOptions::new(2).data_shaping(Shaping::rate(50)));
    let (a, b) = (hosts.host(0).unwrap(), hosts.host(1).unwrap());
    hosts.shape(1, Shaping::default()).unwrap();

    let shaped = throughput_mbit(a, b, 6_000_000);
    // B -> A is capped by the bridge-side end of A's link.
    let reverse = throughput_mbit(b, a, 6_000_000);
    eprintln!("shaped to 50 Mbit/s: A->B {shaped:.1}, B->A {reverse:.1}");
    assert!(
        (30.0..70.0).contains(&shaped),
        "A->B measured {shaped:.1} Mbit/s"
    );
    assert!(
        (30.0..70.0).contains(&reverse),
        "B->A measured {reverse:.1} Mbit/s"
    );

    hosts.shape(0, Shaping::default()).unwrap();
    let cleared = throughput_mbit(a, b, 6_000_000);
    assert!(cleared > 150.0, "shaping removal left {cleared:.1} Mbit/s");
}

fn delay_is_applied_or_refused_as_unsupported_when_the_kernel_lacks_netem() {
    let hosts = sim(SimHostsOptions::new(2));
    let (a, b) = (hosts.host(0).unwrap(), hosts.host(1).unwrap());
    let delayed = Shaping {
        delay_ms: Some(25),
        ..Shaping::default()
    };
    let _server = Server::start(b, ECHO_SERVER, "0.0.0.0");
    match hosts.shape(0, delayed) {
        Err(Error::Unsupported { why, .. }) => {
            assert!(why.contains("netem"), "{why}");
            assert!(reaches(a, b.data_ip()), "a refused shape broke the link");
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(()) => {
            let start = Instant::now();
            assert!(reaches(a, b.data_ip()));
            // connect + reply: at least two round trips of 2 × 25 ms across A's link.
            assert!(
                start.elapsed() >= Duration::from_millis(100),
                "{:?}",
                start.elapsed()
            );
        }
    }
}

/// A departed Pod's address must fail the way a cluster network fails it, at once and as
/// "no route", never by leaving the sandbox through the machine's default route (where an
/// egress proxy answered HTTP 404, which looked like a Pod's answer).
fn a_pod_address_is_reachable_while_its_host_holds_it_and_unreachable_after() {
    let mut hosts = sim(SimHostsOptions::new(2));
    let range = hosts.claim_pod_range().unwrap();
    let network: Ipv4Addr = range.split('/').next().unwrap().parse().unwrap();
    let [a, b, ..] = network.octets();
    let pod = Ipv4Addr::new(a, b, 3, 7);
    let host_b = hosts.host(1).unwrap().clone();
    hosts.add_pod_address(1, pod).unwrap();
    {
        let _server = Server::start(&host_b, ECHO_SERVER, &pod.to_string());
        let mut s = TcpStream::connect_timeout(&(pod, 7000).into(), Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("root namespace cannot reach the Pod at {pod}: {e}"));
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut pong = [0; 4];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"pong");
    }
    hosts.remove_pod_address(1, pod).unwrap();
    let start = Instant::now();
    let gone = TcpStream::connect_timeout(&(pod, 7000).into(), Duration::from_secs(2))
        .expect_err("a removed Pod address still answered");
    assert_eq!(gone.kind(), std::io::ErrorKind::HostUnreachable, "{gone}");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    drop(hosts);
    let routes = String::from_utf8(
        Command::new("ip")
            .args(["route", "show", "type", "unreachable"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        !routes.contains(&range),
        "the claim outlived the hosts: {routes}"
    );
}

fn dropping_the_hosts_removes_every_namespace_bridge_veth_and_process() {
    let hosts = sim(SimHostsOptions::new(3));
    let prefix = hosts.prefix().to_owned();
    let (data_bridge, mgmt_bridge) = hosts.bridges().unwrap();
    assert!(netns_list().contains(&prefix));
    assert!(link_list().contains(&data_bridge) && link_list().contains(&mgmt_bridge));
    // A process left running inside a host (guard forgotten) must not keep it alive.
    let sleeper = hosts
        .host(1)
        .unwrap()
        .spawn("sleep", &["600"])
        .unwrap()
        .into_child();
    let pid = sleeper.id();

    drop(hosts);
    assert!(
        !netns_list().contains(&prefix),
        "namespaces left: {}",
        netns_list()
    );
    assert!(
        !link_list().contains(&prefix),
        "links left: {}",
        link_list()
    );
    let (mut sleeper, start) = (sleeper, Instant::now());
    let status = loop {
        match sleeper.try_wait().unwrap() {
            Some(status) => break status,
            None if start.elapsed() > DEADLINE => panic!("process {pid} inside the host survived"),
            None => thread::sleep(Duration::from_millis(20)),
        }
    };
    assert!(
        !status.success(),
        "the sleeper was killed, not finished: {status}"
    );
}

fn dropping_during_a_panic_still_cleans_up() {
    let prefix = std::sync::Mutex::new(String::new());
    let result = std::panic::catch_unwind(|| {
        let hosts = sim(SimHostsOptions::new(1));
        *prefix.lock().unwrap() = hosts.prefix().to_owned();
        panic!("test body fails");
    });
    assert!(result.is_err());
    let prefix = prefix.into_inner().unwrap();
    assert!(!prefix.is_empty());
    assert!(!netns_list().contains(&prefix) && !link_list().contains(&prefix));
}

fn a_fixed_subnet_already_in_use_is_refused_with_the_interface_named() {
    let first = sim(SimHostsOptions::new(1));
    let taken = first.subnets().data.octets()[2];
    let err = SimHosts::create(SimHostsOptions::new(1).subnet(SubnetIndex::Fixed(taken)))
        .expect_err("second instance on the same subnet");
    let (data_bridge, _) = first.bridges().unwrap();
    match &err {
        Error::SubnetInUse { interface, .. } => assert_eq!(interface, &data_bridge),
        other => panic!("expected SubnetInUse, got {other}"),
    }
    // Auto picks a different pair, and the two instances coexist.
    let second = sim(SimHostsOptions::new(1));
    assert_ne!(second.subnets(), first.subnets());
}

fn stale_cleanup_spares_live_runs_and_removes_named_leftovers() {
    let hosts = sim(SimHostsOptions::new(1));
    let orphans = hcomm_e2e::hosts::cleanup_orphans().unwrap();
    assert!(!orphans.contains(&hosts.prefix().to_owned()));
    assert!(
        netns_list().contains(hosts.prefix()),
        "a live run was cleaned"
    );

    let removed = hcomm_e2e::hosts::cleanup_stale(hosts.prefix()).unwrap();
    assert!(removed.iter().any(|r| r.ends_with("-h0")), "{removed:?}");
    assert!(!netns_list().contains(hosts.prefix()));
    drop(hosts); // tearing down what is already gone is fine
}

fn orphan_cleanup_removes_what_a_dead_run_left_behind() {
    // A run prefix owned by a pid that has just exited: `hcs` + pid in base 36 + seq.
    let mut exited = Command::new("true").spawn().unwrap();
    let mut pid = exited.id();
    exited.wait().unwrap();
    let mut digits = [b'0'; 5];
    for d in digits.iter_mut().rev() {
        *d = b"0123456789abcdefghijklmnopqrstuvwxyz"[(pid % 36) as usize];
        pid /= 36;
    }
    let prefix = format!("hcs{}zz", std::str::from_utf8(&digits).unwrap());
    let ip = |args: &[&str]| assert!(Command::new("ip").args(args).status().unwrap().success());
    let (netns, veth) = (format!("{prefix}-h0"), format!("{prefix}d0"));
    ip(&["netns", "add", &netns]);
    ip(&["link", "add", &format!("{prefix}bd"), "type", "bridge"]);
    ip(&[
        "link", "add", &veth, "type", "veth", "peer", "data0", "netns", &netns,
    ]);

    let cleaned = hcomm_e2e::hosts::cleanup_orphans().unwrap();
    assert!(cleaned.contains(&prefix), "{cleaned:?}");
    assert!(!netns_list().contains(&prefix) && !link_list().contains(&prefix));
}

fn loopback_hosts_have_distinct_addresses_and_refuse_cuts_and_shaping() {
    let hosts = SimHosts::loopback(2).unwrap();
    assert!(!hosts.is_isolated());
    let (a, b) = (hosts.host(0).unwrap(), hosts.host(1).unwrap());
    assert_ne!(a.data_ip(), b.data_ip());
    assert_ne!(a.data_ip(), a.mgmt_ip());
    assert!(a.data_ip().is_loopback() && a.mgmt_ip().is_loopback());
    assert!(matches!(hosts.cut_data(0), Err(Error::Unsupported { .. })));
    assert!(matches!(
        hosts.shape(0, Shaping::rate(10)),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        hosts.set_link(0, Link::Mgmt, LinkState::Down),
        Err(Error::Unsupported { .. })
    ));
    let _server = Server::start(b, ECHO_SERVER, &b.data_ip().to_string());
    assert!(reaches(a, b.data_ip()));
}
