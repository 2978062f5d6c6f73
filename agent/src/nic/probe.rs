//! The link probe: every agent listens on `<data address>:<probe port>`; a peer proves a
//! link by connecting *through a given local interface* and completing a small
//! authenticated echo. Used by verification (before a join), by the health loop (latency)
//! and by `diagnose`.
//!
//! Wire protocol (one exchange per connection, lines of ASCII):
//! - client → server: `HCPROBE1 <nonce: 32 hex>\n`
//! - server → client: `<hex(sha256(secret ‖ nonce ‖ "hcomm-probe"))> <node name>\n`
//!
//! The secret is the cluster's probe secret (`--probe-secret-file`), never sent.
//!
//! The server is what peers judge a node's health by, so a stranger must not be able to
//! make it miss real probes: every connection is accepted at once and admitted under
//! [`LIMITS`] (`hcomm_comm::listen`) — a few slots per peer address, so a flood from one
//! address is refused on arrival and leaves the other peers' slots free — and an admitted
//! client that has not sent its line within [`SERVER_IO_TIMEOUT`] is closed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_comm::listen::{Guard, Limits};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A server gives a client this long to send its line and read the answer.
pub const SERVER_IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Admission of probe connections: a node probes each peer once per health interval,
/// plus verification and `diagnose` runs, so 16 at once per address is ample; 512 in all
/// bounds the tasks a flood from many addresses can start.
pub const LIMITS: Limits = Limits {
    per_peer: 16,
    total: 512,
    handshake: SERVER_IO_TIMEOUT,
    idle: SERVER_IO_TIMEOUT,
};
const MAGIC: &str = "HCPROBE1";

/// A peer to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The peer's node name (for messages).
    pub name: String,
    pub addr: SocketAddr,
}

/// The result of probing one peer through one local interface.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOutcome {
    pub target: ProbeTarget,
    pub interface: String,
    /// Round trip of the echo (after connect), on success.
    pub rtt: Option<Duration>,
    /// Why it failed.
    pub error: Option<String>,
}

impl ProbeOutcome {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

fn answer(secret: &[u8], nonce: &str) -> String {
    let mut h = Sha256::new();
    h.update(secret);
    h.update(nonce.as_bytes());
    h.update(b"hcomm-probe");
    hex::encode(h.finalize())
}

/// Serves probes on `listener` until `shutdown` resolves, admitting connections through
/// `admission` (made with [`LIMITS`]; the caller keeps it to read its counters).
pub async fn serve(
    listener: TcpListener,
    secret: Arc<Vec<u8>>,
    node_name: String,
    admission: Arc<Guard>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "probe accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = admission.admit(peer.ip()) else {
            continue; // over its share: dropped at once, the client sees a close
        };
        let (secret, name, admission) = (secret.clone(), node_name.clone(), admission.clone());
        tokio::spawn(async move {
            let _ = admission
                .within_handshake(answer_one(stream, &secret, &name))
                .await;
            drop(slot);
        });
    }
}

async fn answer_one(stream: TcpStream, secret: &[u8], name: &str) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    BufReader::new(r.take(128)).read_line(&mut line).await?;
    let mut parts = line.split_whitespace();
    if parts.next() != Some(MAGIC) {
        return Ok(());
    }
    let Some(nonce) = parts.next().filter(|n| n.len() == 32) else {
        return Ok(());
    };
    w.write_all(format!("{} {name}\n", answer(secret, nonce)).as_bytes())
        .await
}

use tokio::io::AsyncReadExt as _;

/// Connects to `addr` from `local_ip`, pinned to interface `ifname` (SO_BINDTODEVICE, so
/// the kernel cannot route around the interface under test).
async fn connect_via(
    ifname: &str,
    local_ip: IpAddr,
    addr: SocketAddr,
) -> std::io::Result<TcpStream> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    s.set_nonblocking(true)?;
    if let Err(e) = s.bind_device(Some(ifname.as_bytes())) {
        tracing::debug!(error = %e, ifname, "SO_BINDTODEVICE refused; binding the address only");
    }
    if local_ip.is_ipv4() == addr.is_ipv4() {
        s.bind(&SocketAddr::new(local_ip, 0).into())?;
    }
    let std_stream: std::net::TcpStream = s.into();
    TcpSocket::from_std_stream(std_stream).connect(addr).await
}

/// Whether the IPv4 routing table (`/proc/net/route` text) has an up route to `target`
/// through interface `ifname` (connected subnets are listed there too). Pure.
///
/// Needed because `SO_BINDTODEVICE` alone proves little: with no route on the device the
/// kernel assumes the target is on-link and ARPs for it there, and Linux hosts answer ARP
/// for any of their addresses on any interface — so a "probe through the management NIC"
/// would reach a peer's data address over the management network.
pub fn has_route_via(routes: &str, ifname: &str, target: std::net::Ipv4Addr) -> bool {
    let t = u32::from_be_bytes(target.octets());
    routes.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] != ifname {
            return false;
        }
        let hex = |s: &str| {
            u32::from_str_radix(s, 16)
                .ok()
                .map(|v| u32::from_be_bytes(v.to_ne_bytes()))
        };
        let (Some(dest), Some(flags), Some(mask)) =
            (hex(f[1]), u32::from_str_radix(f[3], 16).ok(), hex(f[7]))
        else {
            return false;
        };
        flags & 1 == 1 && t & mask == dest & mask
    })
}

fn route_check(ifname: &str, target: IpAddr) -> Result<(), String> {
    let IpAddr::V4(t) = target else { return Ok(()) };
    if t.is_loopback() {
        return Ok(());
    }
    match std::fs::read_to_string("/proc/net/route") {
        Ok(routes) if !has_route_via(&routes, ifname, t) => {
            Err(format!("no route to {t} via {ifname}"))
        }
        _ => Ok(()),
    }
}

/// Probes one peer through one interface; never takes longer than `timeout`.
pub async fn probe(
    ifname: &str,
    local_ip: IpAddr,
    target: &ProbeTarget,
    secret: &[u8],
    timeout: Duration,
) -> ProbeOutcome {
    let result = tokio::time::timeout(timeout, async {
        route_check(ifname, target.addr.ip())?;
        let stream = connect_via(ifname, local_ip, target.addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        let start = Instant::now();
        let (r, mut w) = stream.into_split();
        w.write_all(format!("{MAGIC} {nonce}\n").as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut line = String::new();
        BufReader::new(r.take(512))
            .read_line(&mut line)
            .await
            .map_err(|e| format!("receive: {e}"))?;
        let rtt = start.elapsed();
        let got = line.split_whitespace().next().unwrap_or_default();
        if got.is_empty() {
            return Err("the peer closed without answering (not an hcomm agent?)".to_owned());
        }
        if got != answer(secret, &nonce) {
            return Err("the peer's answer failed authentication (wrong probe secret)".to_owned());
        }
        Ok(rtt)
    })
    .await;
    let (rtt, error) = match result {
        Ok(Ok(rtt)) => (Some(rtt), None),
        Ok(Err(e)) => (None, Some(e)),
        Err(_) => (None, Some(format!("no answer within {timeout:?}"))),
    };
    ProbeOutcome {
        target: target.clone(),
        interface: ifname.to_owned(),
        rtt,
        error,
    }
}

/// Probes every target through one interface, concurrently, under one overall deadline.
pub async fn probe_all(
    ifname: &str,
    local_ip: IpAddr,
    targets: &[ProbeTarget],
    secret: &[u8],
    timeout: Duration,
) -> Vec<ProbeOutcome> {
    futures::future::join_all(
        targets
            .iter()
            .map(|t| probe(ifname, local_ip, t, secret, timeout)),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server(secret: &[u8]) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let (addr, tx, _) = server_with(secret, LIMITS).await;
        (addr, tx)
    }

    async fn server_with(
        secret: &[u8],
        limits: Limits,
    ) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, Arc<Guard>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let guard = Guard::new("probe", limits);
        tokio::spawn(serve(
            l,
            Arc::new(secret.to_vec()),
            "peer-a".into(),
            guard.clone(),
            async {
                let _ = rx.await;
            },
        ));
        (addr, tx, guard)
    }

    /// An idle connection from the loopback address `from` (another host stand-in).
    async fn idle_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::from((from, 0))).unwrap();
        s.connect(to).await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_idle_connections_from_one_address_leave_real_probes_answered() {
        use hcomm_comm::listen::Refusal;
        let (addr, _stop, guard) = server_with(b"k", LIMITS).await;
        let mut flood = Vec::new();
        for _ in 0..1000 {
            flood.push(idle_from([127, 0, 0, 2], addr).await);
        }
        for _ in 0..5 {
            let o = probe(
                "lo",
                "127.0.0.1".parse().unwrap(),
                &target(addr),
                b"k",
                Duration::from_secs(1),
            )
            .await;
            assert!(o.ok(), "{o:?}");
        }
        let c = guard.counts();
        assert!(
            c.refused(Refusal::PerPeer) >= (1000 - LIMITS.per_peer) as u64,
            "{c:?}"
        );
        drop(flood);
    }

    #[tokio::test]
    async fn a_silent_client_is_closed_within_the_deadline_and_its_slot_freed() {
        use hcomm_comm::listen::Refusal;
        let limits = Limits {
            handshake: Duration::from_millis(200),
            ..LIMITS
        };
        let (addr, _stop, guard) = server_with(b"k", limits).await;
        let mut silent = idle_from([127, 0, 0, 3], addr).await;
        let start = Instant::now();
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
            .await
            .expect("closed within the deadline")
            .unwrap_or(0);
        assert_eq!(n, 0);
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(guard.counts().refused(Refusal::Deadline), 1);
        assert_eq!(guard.counts().open, 0);
    }

    fn target(addr: SocketAddr) -> ProbeTarget {
        ProbeTarget {
            name: "peer-a".into(),
            addr,
        }
    }

    #[tokio::test]
    async fn a_peer_with_the_same_secret_answers_with_a_round_trip_time() {
        let (addr, _stop) = server(b"s3cret").await;
        let o = probe(
            "lo",
            "127.0.0.1".parse().unwrap(),
            &target(addr),
            b"s3cret",
            Duration::from_secs(2),
        )
        .await;
        assert!(o.ok(), "{o:?}");
        assert!(o.rtt.is_some());
    }

    #[tokio::test]
    async fn a_peer_with_another_secret_fails_authentication() {
        let (addr, _stop) = server(b"other").await;
        let o = probe(
            "lo",
            "127.0.0.1".parse().unwrap(),
            &target(addr),
            b"s3cret",
            Duration::from_secs(2),
        )
        .await;
        assert!(o.error.unwrap().contains("authentication"));
    }

    #[tokio::test]
    async fn a_closed_port_fails_fast_and_a_silent_one_within_the_timeout() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = l.local_addr().unwrap();
        drop(l);
        let o = probe(
            "lo",
            "127.0.0.1".parse().unwrap(),
            &target(closed),
            b"x",
            Duration::from_secs(2),
        )
        .await;
        assert!(o.error.unwrap().contains("connect"));

        // A listener that accepts but never answers.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let start = Instant::now();
        let o = probe(
            "lo",
            "127.0.0.1".parse().unwrap(),
            &target(addr),
            b"x",
            Duration::from_millis(300),
        )
        .await;
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(o.error.unwrap().contains("no answer within"));
        drop(silent);
    }

    const ROUTES: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
data0\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
mgmt0\t000013C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth9\t00000000\t010013C6\t0003\t0\t0\t0\t00000000\t0\t0\t0
";

    #[test]
    fn routes_are_matched_per_interface_including_defaults() {
        if cfg!(target_endian = "big") {
            return; // the fixture is little-endian /proc text
        }
        let data_peer = "198.18.0.11".parse().unwrap();
        assert!(has_route_via(ROUTES, "data0", data_peer));
        assert!(!has_route_via(ROUTES, "mgmt0", data_peer));
        assert!(has_route_via(ROUTES, "eth9", data_peer), "default route");
        assert!(!has_route_via("", "data0", data_peer));
    }

    #[tokio::test]
    async fn many_targets_share_one_deadline() {
        let (addr, _stop) = server(b"k").await;
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let targets = vec![target(addr), target(silent.local_addr().unwrap())];
        let start = Instant::now();
        let out = probe_all(
            "lo",
            "127.0.0.1".parse().unwrap(),
            &targets,
            b"k",
            Duration::from_millis(400),
        )
        .await;
        assert!(start.elapsed() < Duration::from_millis(1500));
        assert!(out[0].ok());
        assert!(!out[1].ok());
    }
}
