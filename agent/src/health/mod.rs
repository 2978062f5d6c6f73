//! Health: a periodic one-element all-reduce on each member's communicator (proves the
//! whole domain moves; its duration is a latency and bus-bandwidth sample) and a per-link
//! latency probe to every peer node. Results land in metrics, in `HcommNode.status.linkTests`
//! (which the operator aggregates into the group's `LinksHealthy` and `Degraded`
//! conditions) and, when a link turns dead, in a Kubernetes Event on the `HcommNode`.
//!
//! `linkTests` rides along with the periodic inventory refresh; a link that turns dead or
//! answers again is published at once (the whole status, from the inventory in hand, under
//! the agent's one field manager), so the
//! group condition follows within one probe interval instead of one inventory interval.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hcomm_comm::tcp::TcpComm;
use hcomm_comm::{Communicator, DataType, ReduceOp};
use hcomm_crds::LinkTestResult;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::watch;

use crate::config::Context;
use crate::nic::probe::{ProbeOutcome, ProbeTarget, probe};

/// The health all-reduce on the member's current communicator, every `health_interval`.
pub async fn allreduce_loop(
    ctx: Arc<Context>,
    group: String,
    mut comm: watch::Receiver<Option<Arc<TcpComm>>>,
) {
    let mut tick = tokio::time::interval(ctx.cfg.health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(c) = comm.borrow_and_update().clone() else {
            continue;
        };
        if c.failure().is_some() {
            continue; // reported once; a new epoch brings a fresh communicator
        }
        let mut buf = 1f32.to_ne_bytes();
        let start = Instant::now();
        match c.all_reduce(&mut buf, DataType::F32, ReduceOp::Sum).await {
            Ok(()) => {
                let secs = start.elapsed().as_secs_f64();
                ctx.metrics
                    .allreduce_seconds
                    .with_label_values(&[&group])
                    .observe(secs);
                let n = c.world_size() as f64;
                // nccl-tests convention: busbw = algbw × 2(n−1)/n.
                let busbw = if n > 1.0 {
                    4.0 / secs * 2.0 * (n - 1.0) / n
                } else {
                    0.0
                };
                ctx.metrics
                    .busbw
                    .with_label_values(&[&group, "all_reduce"])
                    .set(busbw);
                let sum = f32::from_ne_bytes(buf);
                if (sum - n as f32).abs() > 0.5 {
                    tracing::warn!(group = %group, sum, world = n, "health all-reduce returned a wrong sum");
                }
            }
            Err(e) => {
                tracing::warn!(group = %group, epoch = c.epoch(), rank = c.rank(), error = %e,
                    category = e.category(), "health all-reduce failed");
            }
        }
    }
}

/// Folds one probe into a link-test result (pure).
pub fn link_test(o: &ProbeOutcome, now: Time) -> LinkTestResult {
    LinkTestResult {
        peer: o.target.name.clone(),
        peer_address: o.target.addr.ip().to_string(),
        interface: o.interface.clone(),
        reachable: o.ok(),
        latency_micros: o.rtt.map(|d| d.as_micros() as i64),
        bandwidth_mbps: None,
        error: o.error.clone(),
        time: now,
    }
}

/// Peers whose link turned from reachable (or unknown) to dead (pure).
pub fn newly_dead<'a>(
    before: &[LinkTestResult],
    after: &'a [LinkTestResult],
) -> Vec<&'a LinkTestResult> {
    after
        .iter()
        .filter(|a| !a.reachable)
        .filter(|a| !before.iter().any(|b| b.peer == a.peer && !b.reachable))
        .collect()
}

/// Whether some peer's reachability differs between two rounds, or a peer was probed for
/// the first time (pure): then the results are worth publishing before the next
/// inventory refresh.
pub fn reachability_changed(before: &[LinkTestResult], after: &[LinkTestResult]) -> bool {
    after.iter().any(|a| {
        !before
            .iter()
            .any(|b| b.peer == a.peer && b.reachable == a.reachable)
    })
}

/// Probes every known peer through the node's data NIC every `health_interval`.
pub async fn probe_loop(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(ctx.cfg.health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let peers = ctx.peers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if peers.is_empty() {
            continue;
        }
        let rule = ctx.cfg.node_nic_rule();
        let Some(chosen) = ctx.inventory.read().await.data_nic(&rule) else {
            continue;
        };
        let timeout = ctx.cfg.health_interval.min(Duration::from_secs(5));
        let outs = futures::future::join_all(peers.iter().filter_map(|(name, ip)| {
            let t = ProbeTarget {
                name: name.clone(),
                addr: SocketAddr::new(ip.parse().ok()?, ctx.cfg.probe_port),
            };
            let secret = ctx.cfg.probe_secret.clone();
            let ifname = chosen.name.clone();
            Some(async move { probe(&ifname, chosen.ip, &t, &secret, timeout).await })
        }))
        .await;
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let results: Vec<LinkTestResult> = outs.iter().map(|o| link_test(o, now.clone())).collect();
        for o in &outs {
            ctx.metrics
                .link_up
                .with_label_values(&[&o.target.name])
                .set(i64::from(o.ok()));
            if let Some(rtt) = o.rtt {
                ctx.metrics
                    .probe_latency
                    .with_label_values(&[&o.target.name])
                    .observe(rtt.as_secs_f64());
            }
        }
        let before = std::mem::replace(
            &mut *ctx.link_tests.lock().unwrap_or_else(|e| e.into_inner()),
            results.clone(),
        );
        if reachability_changed(&before, &results) {
            // Bounded: a slow API server must not stall the probe rhythm.
            let publish = crate::inventory::publish::publish_known(&ctx);
            match tokio::time::timeout(Duration::from_secs(5), publish).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "could not publish link tests"),
                Err(_) => tracing::warn!("publishing link tests timed out after 5s"),
            }
        }
        for dead in newly_dead(&before, &results) {
            tracing::warn!(peer = %dead.peer, address = %dead.peer_address, error = ?dead.error, "link down");
            let note = format!(
                "link {} → {} ({}) does not answer: {}",
                chosen.name,
                dead.peer,
                dead.peer_address,
                dead.error.as_deref().unwrap_or("?")
            );
            let node = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(hcomm_crds::API_GROUP_VERSION.into()),
                kind: Some("HcommNode".into()),
                name: Some(ctx.cfg.node_name.clone()),
                ..Default::default()
            };
            let reason = hcomm_crds::contract::reasons::LINK_DEGRADED;
            let key = hcomm_events::EventKey::new(&node, true, reason, "LinkProbe", &note);
            ctx.events.publish(key, node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lt(peer: &str, ok: bool) -> LinkTestResult {
        LinkTestResult {
            peer: peer.into(),
            peer_address: "1.1.1.1".into(),
            interface: "data0".into(),
            reachable: ok,
            latency_micros: None,
            bandwidth_mbps: None,
            error: None,
            time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn only_links_that_just_died_are_reported() {
        let before = vec![lt("a", true), lt("b", false)];
        let after = vec![lt("a", false), lt("b", false), lt("c", false)];
        let dead: Vec<&str> = newly_dead(&before, &after)
            .iter()
            .map(|l| l.peer.as_str())
            .collect();
        assert_eq!(dead, ["a", "c"]);
    }

    #[test]
    fn a_flip_or_a_new_peer_is_published_at_once_a_steady_state_is_not() {
        let before = vec![lt("a", true), lt("b", false)];
        assert!(!reachability_changed(&before, &before.clone()));
        assert!(reachability_changed(
            &before,
            &[lt("a", false), lt("b", false)]
        ));
        assert!(reachability_changed(
            &before,
            &[lt("a", true), lt("b", true)]
        ));
        assert!(reachability_changed(
            &before,
            &[lt("a", true), lt("b", false), lt("c", true)]
        ));
        // A peer no longer probed is not worth a write of its own.
        assert!(!reachability_changed(&before, &[lt("a", true)]));
    }

    #[test]
    fn a_probe_becomes_a_link_test_with_latency_in_microseconds() {
        let o = ProbeOutcome {
            target: ProbeTarget {
                name: "h1".into(),
                addr: "198.18.0.11:29499".parse().unwrap(),
            },
            interface: "data0".into(),
            rtt: Some(Duration::from_micros(250)),
            error: None,
        };
        let l = link_test(&o, Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(l.latency_micros, Some(250));
        assert_eq!(l.peer_address, "198.18.0.11");
        assert!(l.reachable);
    }
}
