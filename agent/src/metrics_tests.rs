//! Tests of `metrics`: the exposition, and the guarded metrics listener over HTTP.

use super::*;
use hcomm_comm::listen::Limits;
use std::time::Duration;

#[test]
fn the_chunk_servers_counters_are_exported_at_each_scrape() {
    use std::sync::atomic::Ordering;
    let m = Metrics::new();
    m.weights_server
        .bytes_served
        .fetch_add(4 << 20, Ordering::Relaxed);
    m.weights_server
        .chunks_served
        .fetch_add(1, Ordering::Relaxed);
    let text = m.render();
    assert!(
        text.contains("hcomm_agent_weights_served_bytes_total 4194304"),
        "{text}"
    );
    assert!(
        text.contains("hcomm_agent_weights_served_chunks_total 1"),
        "{text}"
    );
    m.weights_server
        .chunks_served
        .fetch_add(2, Ordering::Relaxed);
    assert!(
        m.render()
            .contains("hcomm_agent_weights_served_chunks_total 3")
    );
}

#[test]
fn the_exposition_has_the_prefix_and_every_phase() {
    let m = Metrics::new();
    m.phase_change(None, &Phase::Pending);
    m.phase_change(Some(&Phase::Pending), &Phase::Verifying);
    m.comm_created.inc();
    let text = m.render();
    assert!(
        text.contains("hcomm_agent_members{phase=\"Verifying\"} 1"),
        "{text}"
    );
    assert!(text.contains("hcomm_agent_members{phase=\"Pending\"} 0"));
    assert!(text.contains("hcomm_agent_communicators_created_total 1"));
    assert!(text.contains("hcomm_agent_weights_served_bytes_total 0"));
    assert!(text.contains("hcomm_agent_open_fds"));
}

#[tokio::test]
async fn metrics_and_healthz_are_served_over_http() {
    let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr().unwrap();
    let probes = std::sync::Arc::new(crate::probes::Probes::new(|| true));
    tokio::spawn(serve(
        l,
        Metrics::new(),
        probes.clone(),
        std::future::pending(),
    ));
    let status_line = |path: &'static str| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        text
    };
    assert!(status_line("/livez").await.starts_with("HTTP/1.0 200"));
    let not_ready = status_line("/readyz").await;
    assert!(not_ready.starts_with("HTTP/1.0 503"), "{not_ready}");
    assert!(
        not_ready.contains("HcommNode not registered"),
        "{not_ready}"
    );
    probes.set_registered();
    probes.set_api_bound();
    let ready = status_line("/readyz").await;
    assert!(ready.starts_with("HTTP/1.0 200"), "{ready}");
    let body = crate::diagnose::collect::tests_support::get(&format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert!(body.contains("hcomm_agent_communicators_open 0"), "{body}");
    let ok = crate::diagnose::collect::tests_support::get(&format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(ok, "ok");
}

#[tokio::test]
async fn a_silent_client_is_closed_at_the_idle_deadline_and_counted() {
    use tokio::io::AsyncReadExt;
    let mut m = Metrics::new();
    let idle = Duration::from_millis(300);
    m.listeners.metrics = Guard::new(
        "metrics",
        Limits {
            idle,
            ..SCRAPE_LIMITS
        },
    );
    let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(serve(
        l,
        m.clone(),
        std::sync::Arc::new(crate::probes::Probes::new(|| true)),
        std::future::pending(),
    ));
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let start = std::time::Instant::now();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("closed by the idle deadline")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert!(start.elapsed() >= idle - Duration::from_millis(50));
    assert!(start.elapsed() < Duration::from_secs(3));
    let text = m.render();
    assert!(
        text.contains(r#"hcomm_agent_listener_refused_total{listener="metrics",reason="idle"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn connections_past_an_address_share_are_refused_and_others_still_served() {
    let m = Metrics::new();
    let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(serve(
        l,
        m.clone(),
        std::sync::Arc::new(crate::probes::Probes::new(|| true)),
        std::future::pending(),
    ));
    let mut flood = Vec::new();
    for _ in 0..100 {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        flood.push(s.connect(addr).await.unwrap());
    }
    let body = crate::diagnose::collect::tests_support::get(&format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(body, "ok");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while m.listeners.metrics.counts().refused(Refusal::PerPeer) < 92 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            m.listeners.metrics.counts()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(flood);
}
