//! The real client against the stand-in server over a real Unix socket: every method, and
//! each named failure (socket missing, nothing listening, deadline, unimplemented).

use hcomm_crds::contract::ascend::{RESOURCE_ASCEND910, kubelet_device_id};
use hcomm_kubelet::proto::{ContainerDevices, ContainerResources, PodResources};
use hcomm_kubelet::server::{SharedPodResources, serve};
use hcomm_kubelet::{PodResourcesClient, PodResourcesError};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(5);

fn socket_path(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hcomm-kubelet-{}-{test}", std::process::id()));
    dir.join("kubelet.sock")
}

fn npu_pod(ns: &str, name: &str, ids: &[&str]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![ContainerResources {
            name: "worker".into(),
            devices: vec![ContainerDevices {
                resource_name: RESOURCE_ASCEND910.into(),
                device_ids: ids.iter().map(|s| s.to_string()).collect(),
                topology: None,
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn list_get_and_allocatable_answer_what_the_server_holds() {
    let path = socket_path("roundtrip");
    let state = SharedPodResources::default();
    state.set_pod(npu_pod("ns", "a", &["Ascend910-0", "Ascend910-1"]));
    state.set_pod(npu_pod("ns", "b", &["Ascend910-2"]));
    state.set_allocatable(vec![ContainerDevices {
        resource_name: RESOURCE_ASCEND910.into(),
        device_ids: (0..8)
            .map(|i| kubelet_device_id(RESOURCE_ASCEND910, i))
            .collect(),
        topology: None,
    }]);
    let server = serve(&path, state.clone()).await.unwrap();
    let client = PodResourcesClient::new(&path, DEADLINE);

    let pods = client.list().await.unwrap();
    assert_eq!(pods.len(), 2);
    assert_eq!(
        pods[0].device_ids(RESOURCE_ASCEND910),
        vec!["Ascend910-0", "Ascend910-1"]
    );

    // The set is shared and mutable: a new allocation and a replacement show up at once.
    state.set_pod(npu_pod("ns", "b", &["Ascend910-5"]));
    state.set_pod(npu_pod("other", "c", &["Ascend910-7"]));
    let pods = client.list().await.unwrap();
    assert_eq!(pods.len(), 3);
    assert_eq!(pods[1].device_ids(RESOURCE_ASCEND910), vec!["Ascend910-5"]);
    assert!(state.remove_pod("other", "c"));
    assert_eq!(client.list().await.unwrap().len(), 2);

    let b = client.get("ns", "b").await.unwrap().expect("pod b");
    assert_eq!(b.device_ids(RESOURCE_ASCEND910), vec!["Ascend910-5"]);
    assert!(matches!(
        client.get("ns", "nope").await,
        Err(PodResourcesError::Rpc { call: "Get", .. })
    ));

    let alloc = client.allocatable().await.unwrap();
    assert_eq!(alloc.devices[0].device_ids.len(), 8);
    server.shutdown(DEADLINE).await;
    assert!(!path.exists(), "the socket is removed on shutdown");
}

#[tokio::test]
async fn a_kubelet_without_get_is_named_unimplemented() {
    let path = socket_path("noget");
    let state = SharedPodResources::default();
    state.set_get_enabled(false);
    let server = serve(&path, state).await.unwrap();
    let client = PodResourcesClient::new(&path, DEADLINE);
    assert!(matches!(
        client.get("ns", "a").await,
        Err(PodResourcesError::Unimplemented { call: "Get", .. })
    ));
    assert!(client.list().await.unwrap().is_empty(), "List still works");
    server.shutdown(DEADLINE).await;
}

#[tokio::test]
async fn a_missing_socket_is_named_at_once() {
    let path = socket_path("missing");
    let client = PodResourcesClient::new(&path, DEADLINE);
    let started = Instant::now();
    assert_eq!(
        client.list().await,
        Err(PodResourcesError::SocketMissing(path))
    );
    assert!(started.elapsed() < DEADLINE);
}

#[tokio::test]
async fn a_socket_nobody_listens_on_is_unavailable() {
    let path = socket_path("stale");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Bind then drop the listener: the file stays, as after a kubelet crash.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let client = PodResourcesClient::new(&path, DEADLINE);
    assert!(matches!(
        client.list().await,
        Err(PodResourcesError::Unavailable { .. })
    ));
    std::fs::remove_file(&path).unwrap();
}

#[tokio::test]
async fn a_slow_kubelet_hits_the_deadline_not_a_hang() {
    let path = socket_path("slow");
    let state = SharedPodResources::default();
    state.set_delay(Duration::from_secs(30));
    let server = serve(&path, state.clone()).await.unwrap();
    let deadline = Duration::from_millis(300);
    let client = PodResourcesClient::new(&path, deadline);
    let started = Instant::now();
    assert_eq!(
        client.list().await,
        Err(PodResourcesError::Deadline {
            call: "List",
            after: deadline
        })
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    state.set_delay(Duration::ZERO);
    assert!(
        client.list().await.unwrap().is_empty(),
        "answers again once fast"
    );
    server.shutdown(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_restarted_server_replaces_the_stale_socket() {
    let path = socket_path("restart");
    let state = SharedPodResources::default();
    state.set_pod(npu_pod("ns", "a", &["Ascend910-3"]));
    let first = serve(&path, state.clone()).await.unwrap();
    drop(first);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let second = serve(&path, state).await.unwrap();
    let client = PodResourcesClient::new(&path, DEADLINE);
    assert_eq!(client.list().await.unwrap().len(), 1);
    second.shutdown(DEADLINE).await;
}
