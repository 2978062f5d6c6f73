//! A stranger saturates one serving node's listeners (issue 17, point 3): 1000 idle or
//! slow connections each to its link-probe port, its weights chunk server and its
//! members' comm ports, from an address on the data network that is no member's host,
//! held for several probe intervals while both pools serve.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::HcommGroup;
use hcomm_crds::contract::GroupConditionType;
use hcomm_e2e::testbed::examples::NAMESPACE as NS;
use hcomm_e2e::testbed::{COMM_PORT_BASE, ExamplePools, MemberPod, PROBE_PORT, WEIGHTS_PORT};
use kube::Api;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::check;

/// Connections per flooded port.
const FLOOD: usize = 1000;
/// How long the flood is held (the agents probe every second; the probe, chunk and comm
/// handshake deadlines are 5–10 s, so admitted connections are closed and reopened).
const HOLD: Duration = Duration::from_secs(20);
/// A connection attempt's deadline (a refused connection is closed at once by the server).
const CONNECT: Duration = Duration::from_secs(2);

/// 1000 idle or slow connections to each of a serving node's probe, chunk and comm ports,
/// from a stranger's address, leave every member in place and Ready, every link up
/// (`LinksHealthy` stays True in both groups throughout), no request failed, and the
/// flood refused by the per-peer caps (the node's `listener_refused_total` moved).
///
/// Precondition: decode at 2 members, Ready, each having served.
pub async fn a_stranger_saturating_a_nodes_ports_marks_nothing_down_and_evicts_nobody(
    pools: &mut ExamplePools,
) -> Result<()> {
    let decode = pools.decode_at(2).await?;
    pools
        .decode_load
        .wait_served(&decode, 3, Duration::from_secs(30))
        .await?;
    let (bed, decode_load, prefill_load) = (&pools.bed, &pools.decode_load, &pools.prefill_load);
    let groups: Api<HcommGroup> = Api::namespaced(bed.client().await?, NS);
    let before_decode = decode_load.latest();
    let before_prefill = prefill_load.latest();
    for g in ["decode", "prefill"] {
        wait_links_healthy(&groups, g, Duration::from_secs(60)).await?;
    }
    let members_before = names(&pools.prefill, &decode);

    let target_node = decode[0].node.clone();
    let host: usize = target_node.trim_start_matches("host-").parse()?;
    let target_ip = bed.hosts().host(host)?.data_ip();
    let stranger = bed.hosts().data_gateway();
    ensure!(
        !bed.hosts().hosts().iter().any(|h| h.data_ip() == stranger),
        "the stranger's address {stranger} must be no host's"
    );
    let ports = [
        ("probe", vec![PROBE_PORT]),
        ("weights", vec![WEIGHTS_PORT]),
        // Both devices' control endpoints: the member's is one of them (the other may have
        // no listener; its connections are refused by the kernel).
        ("comm", vec![COMM_PORT_BASE, COMM_PORT_BASE + 1]),
    ];
    let t = Instant::now();
    let mut flood = Flood::default();
    for (_, ports) in &ports {
        for port in ports {
            flood
                .open(stranger, SocketAddr::from((target_ip, *port)), FLOOD)
                .await;
        }
    }
    eprintln!(
        "saturation: {} connections to {target_node} ({target_ip}) from {stranger} in {:?}",
        flood.opened,
        t.elapsed()
    );
    ensure!(
        flood.opened >= FLOOD,
        "the flood could not even connect: {} opened",
        flood.opened
    );

    // Hold: slow clients send a byte every other second; closed connections are reopened. Every
    // half second both groups' links must still be healthy.
    let hold_until = Instant::now() + HOLD;
    let mut last_drip = Instant::now();
    while Instant::now() < hold_until {
        for g in ["decode", "prefill"] {
            let (status, message) = links_healthy(&groups, g).await?;
            ensure!(
                status == "True",
                "{g}: LinksHealthy {status} during the flood: {message}"
            );
        }
        if last_drip.elapsed() >= Duration::from_secs(2) {
            last_drip = Instant::now();
            flood.drip_and_reopen(stranger).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let opened = flood.opened;
    drop(flood);
    eprintln!("saturation: held {HOLD:?}, {opened} connections opened in all");

    // Nobody evicted, every member still Ready.
    let decode_after = bed.members(NS, "decode").await?;
    let prefill_after = bed.members(NS, "prefill").await?;
    let after: BTreeSet<String> = decode_after
        .iter()
        .chain(&prefill_after)
        .map(|m| m.name.clone())
        .collect();
    ensure!(
        after == members_before,
        "members changed under the flood: {members_before:?} → {after:?}"
    );
    ensure!(
        decode_after.iter().chain(&prefill_after).all(|m| m.ready),
        "a member is not Ready after the flood: {decode_after:?} {prefill_after:?}"
    );
    // No request failed, and both pools kept serving.
    let (decode_now, prefill_now) = (decode_load.latest(), prefill_load.latest());
    check::clean(&decode_now, "decode under the flood")?;
    check::clean(&prefill_now, "prefill under the flood")?;
    ensure!(
        decode_now.served > before_decode.served && prefill_now.served > before_prefill.served,
        "a pool stopped serving: decode {} → {}, prefill {} → {}",
        before_decode.served,
        decode_now.served,
        before_prefill.served,
        prefill_now.served
    );
    // The caps refused the flood, per listener.
    let metrics = bed.agent_metrics(host)?;
    for (listener, _) in &ports {
        let refused = refused_per_peer(&metrics, listener);
        ensure!(
            refused >= (FLOOD / 2) as f64,
            "{listener}: only {refused} connections refused by the per-peer cap\n{}",
            metrics
                .lines()
                .filter(|l| l.contains("listener_"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!("saturation: {listener} refused {refused} by the per-peer cap");
    }
    Ok(())
}

/// Member names of both pools.
fn names(prefill: &[MemberPod], decode: &[MemberPod]) -> BTreeSet<String> {
    prefill
        .iter()
        .chain(decode)
        .map(|m| m.name.clone())
        .collect()
}

/// `hcomm_agent_listener_refused_total{listener=…,reason="per_peer_cap"}`.
fn refused_per_peer(metrics: &str, listener: &str) -> f64 {
    let key = format!(
        "hcomm_agent_listener_refused_total{{listener=\"{listener}\",reason=\"per_peer_cap\"}}"
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The group's `LinksHealthy` status and message.
async fn links_healthy(groups: &Api<HcommGroup>, group: &str) -> Result<(String, String)> {
    let g = groups.get(group).await?;
    let c = g
        .status
        .and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == GroupConditionType::LinksHealthy.as_str())
        })
        .with_context(|| format!("{group}: no LinksHealthy condition"))?;
    Ok((c.status, c.message))
}

async fn wait_links_healthy(groups: &Api<HcommGroup>, group: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let (status, message) = links_healthy(groups, group).await?;
        if status == "True" {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{group}: LinksHealthy {status} before the flood: {message}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The stranger's connections, by target.
#[derive(Default)]
struct Flood {
    conns: Vec<(SocketAddr, Option<TcpStream>)>,
    opened: usize,
}

impl Flood {
    /// Opens `n` connections from `from` to `to` (failed attempts are kept as closed, to
    /// be retried).
    async fn open(&mut self, from: Ipv4Addr, to: SocketAddr, n: usize) {
        for _ in 0..n {
            let s = connect(from, to).await;
            self.opened += usize::from(s.is_some());
            self.conns.push((to, s));
        }
    }

    /// Sends a byte on each open connection (a slow client); reopens the closed ones.
    async fn drip_and_reopen(&mut self, from: Ipv4Addr) {
        for (to, slot) in &mut self.conns {
            let alive = match slot {
                Some(s) => tokio::time::timeout(Duration::from_millis(50), s.write_all(b"H"))
                    .await
                    .is_ok_and(|r| r.is_ok()),
                None => false,
            };
            if !alive {
                *slot = connect(from, *to).await;
                self.opened += usize::from(slot.is_some());
            }
        }
    }
}

async fn connect(from: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let s = TcpSocket::new_v4().ok()?;
    s.bind(SocketAddr::from((from, 0))).ok()?;
    tokio::time::timeout(CONNECT, s.connect(to))
        .await
        .ok()?
        .ok()
}
