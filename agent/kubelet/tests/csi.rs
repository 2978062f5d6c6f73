//! The kubelet's calls (the real clients) against the real CSI node plugin server over
//! real Unix sockets: every method, errors with their codes, and the sockets' lifecycle
//! (mode, stale socket, symlink, removal, a plugin that never answers).

use hcomm_kubelet::csi::context;
use hcomm_kubelet::csi::proto::{
    AccessMode, AccessModeKind, AccessType, MountVolume, NodePublishVolumeRequest,
    NodeUnpublishVolumeRequest, VolumeCapability,
};
use hcomm_kubelet::csi::registration::PLUGIN_TYPE_CSI;
use hcomm_kubelet::{
    Code, CsiError, CsiNodeClient, NodePlugin, RegistrationClient, ServeError, Status,
    serve_node_plugin,
};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(5);

fn dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hcomm-csi-{}-{test}", std::process::id()))
}

/// What the plugin under test was asked, and what it answers to a publish.
#[derive(Default)]
struct Recorder {
    published: Mutex<Vec<NodePublishVolumeRequest>>,
    unpublished: Mutex<Vec<NodeUnpublishVolumeRequest>>,
    statuses: Mutex<Vec<(bool, String)>>,
    publish_answer: Mutex<Option<Status>>,
}

impl NodePlugin for Recorder {
    fn driver_name(&self) -> &str {
        "local-api.hcomm.io"
    }
    fn vendor_version(&self) -> &str {
        "0.1.0"
    }
    fn node_id(&self) -> &str {
        "node-a"
    }
    fn publish(&self, request: NodePublishVolumeRequest) -> Result<(), Status> {
        self.published.lock().unwrap().push(request);
        match self.publish_answer.lock().unwrap().clone() {
            Some(status) => Err(status),
            None => Ok(()),
        }
    }
    fn unpublish(&self, request: NodeUnpublishVolumeRequest) -> Result<(), Status> {
        self.unpublished.lock().unwrap().push(request);
        Ok(())
    }
    fn registration_status(&self, registered: bool, error: &str) {
        self.statuses
            .lock()
            .unwrap()
            .push((registered, error.to_owned()));
    }
}

/// A publish as the kubelet sends it for an inline volume of a CSIDriver with
/// `podInfoOnMount`.
fn inline_publish(target: &str) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: "csi-0123abcd".into(),
        target_path: target.into(),
        volume_capability: Some(VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume::default())),
            access_mode: Some(AccessMode {
                mode: AccessModeKind::SingleNodeWriter as i32,
            }),
        }),
        volume_context: [
            (context::POD_NAME, "worker-0"),
            (context::POD_NAMESPACE, "ns"),
            (context::POD_UID, "0000-1111"),
            (context::SERVICE_ACCOUNT_NAME, "default"),
            (context::EPHEMERAL, "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_kubelet_registers_and_calls_every_method() {
    let d = dir("roundtrip");
    let (csi, reg) = (d.join("csi.sock"), d.join("registry").join("reg.sock"));
    let plugin = Arc::new(Recorder::default());
    let server = serve_node_plugin(&csi, Some(&reg), plugin.clone())
        .await
        .unwrap();
    assert_eq!(server.csi_socket(), csi);
    assert_eq!(server.registration_socket(), Some(reg.as_path()));
    for socket in [&csi, &reg] {
        let mode = std::fs::metadata(socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{} is owner-only", socket.display());
    }

    let registration = RegistrationClient::new(&reg, DEADLINE);
    let info = registration.get_info().await.unwrap();
    assert_eq!(info.r#type, PLUGIN_TYPE_CSI);
    assert_eq!(info.name, "local-api.hcomm.io");
    assert_eq!(info.endpoint, csi.to_str().unwrap());
    assert_eq!(info.supported_versions, vec!["1.0.0"]);

    let node = CsiNodeClient::new(&info.endpoint, DEADLINE);
    let me = node.get_plugin_info().await.unwrap();
    assert_eq!(
        (me.name.as_str(), me.vendor_version.as_str()),
        ("local-api.hcomm.io", "0.1.0")
    );
    assert!(node.get_plugin_capabilities().await.unwrap().is_empty());
    assert!(node.probe().await.unwrap());
    let at = node.node_get_info().await.unwrap();
    assert_eq!(
        (at.node_id.as_str(), at.max_volumes_per_node),
        ("node-a", 0)
    );
    assert!(node.node_get_capabilities().await.unwrap().is_empty());
    registration.notify(true, "").await.unwrap();
    registration.notify(false, "no handler").await.unwrap();
    assert_eq!(
        *plugin.statuses.lock().unwrap(),
        vec![(true, String::new()), (false, "no handler".to_owned())]
    );

    let publish = inline_publish("/var/lib/kubelet/pods/u/volumes/v/mount");
    node.node_publish(publish.clone()).await.unwrap();
    assert_eq!(*plugin.published.lock().unwrap(), vec![publish]);
    let unpublish = NodeUnpublishVolumeRequest {
        volume_id: "csi-0123abcd".into(),
        target_path: "/var/lib/kubelet/pods/u/volumes/v/mount".into(),
    };
    node.node_unpublish(unpublish.clone()).await.unwrap();
    assert_eq!(*plugin.unpublished.lock().unwrap(), vec![unpublish]);

    server.shutdown(DEADLINE).await;
    assert!(!csi.exists() && !reg.exists(), "both sockets are removed");
    assert_eq!(
        node.probe().await,
        Err(CsiError::SocketMissing(csi.clone()))
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test]
async fn errors_reach_the_kubelet_with_their_code() {
    let d = dir("errors");
    let csi = d.join("csi.sock");
    let plugin = Arc::new(Recorder::default());
    let server = serve_node_plugin(&csi, None, plugin.clone()).await.unwrap();
    assert_eq!(server.registration_socket(), None);
    let node = CsiNodeClient::new(&csi, DEADLINE);
    for status in [
        Status::invalid_argument("not a local-api volume"),
        Status::not_found("no such Pod"),
        Status::permission_denied("not a member"),
    ] {
        *plugin.publish_answer.lock().unwrap() = Some(status.clone());
        assert_eq!(
            node.node_publish(inline_publish("/t")).await,
            Err(CsiError::Rpc {
                call: "NodePublishVolume",
                code: status.code(),
                message: status.message().to_owned(),
            })
        );
    }
    assert_eq!(plugin.published.lock().unwrap().len(), 3);

    // Fields CSI calls required are checked before the plugin sees the request.
    let no_capability = NodePublishVolumeRequest {
        volume_capability: None,
        ..inline_publish("/t")
    };
    let no_target = NodeUnpublishVolumeRequest {
        volume_id: "v".into(),
        target_path: String::new(),
    };
    for answer in [
        node.node_publish(no_capability).await,
        node.node_publish(inline_publish("")).await,
        node.node_unpublish(no_target).await,
    ] {
        assert!(
            matches!(
                answer,
                Err(CsiError::Rpc {
                    code: Code::InvalidArgument,
                    ..
                })
            ),
            "{answer:?}"
        );
    }
    // A request over 64 KiB is refused before it is decoded.
    let mut huge = inline_publish("/t");
    huge.volume_context
        .insert("padding".into(), "x".repeat(70 * 1024));
    assert!(matches!(
        node.node_publish(huge).await,
        Err(CsiError::Rpc {
            code: Code::OutOfRange,
            ..
        })
    ));
    assert_eq!(plugin.published.lock().unwrap().len(), 3);
    assert!(plugin.unpublished.lock().unwrap().is_empty());

    // The CSI socket serves no registration (nor any method it does not know).
    assert!(matches!(
        RegistrationClient::new(&csi, DEADLINE).get_info().await,
        Err(CsiError::Rpc {
            call: "GetInfo",
            code: Code::Unimplemented,
            ..
        })
    ));
    drop(server);
    assert!(!csi.exists(), "drop removes the socket");
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_a_newer_server_keeps_its_own() {
    let d = dir("stale");
    let csi = d.join("csi.sock");
    std::fs::create_dir_all(&d).unwrap();
    // Bind then drop the listener: the file stays, as after a crash.
    drop(std::os::unix::net::UnixListener::bind(&csi).unwrap());
    let first = serve_node_plugin(&csi, None, Arc::new(Recorder::default()))
        .await
        .unwrap();
    let second = serve_node_plugin(&csi, None, Arc::new(Recorder::default()))
        .await
        .unwrap();
    first.shutdown(DEADLINE).await;
    assert!(
        csi.exists(),
        "the older server leaves the newer one's socket"
    );
    let node = CsiNodeClient::new(&csi, DEADLINE);
    assert!(node.probe().await.unwrap());
    second.shutdown(DEADLINE).await;
    assert!(!csi.exists());
    let leftovers: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
    assert!(
        leftovers.is_empty(),
        "no staging left behind: {leftovers:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test]
async fn a_symlink_or_a_file_at_the_socket_path_is_refused() {
    let d = dir("symlink");
    std::fs::create_dir_all(&d).unwrap();
    let target = d.join("precious");
    std::fs::write(&target, "keep").unwrap();
    let link = d.join("csi.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let plugin: Arc<dyn NodePlugin> = Arc::new(Recorder::default());
    assert!(matches!(
        serve_node_plugin(&link, None, plugin.clone()).await,
        Err(ServeError::Symlink(p)) if p == link
    ));
    assert!(matches!(
        serve_node_plugin(&target, None, plugin.clone()).await,
        Err(ServeError::NotASocket(p)) if p == target
    ));
    // A refused registration socket stops the CSI socket already bound.
    let csi = d.join("ok.sock");
    assert!(matches!(
        serve_node_plugin(&csi, Some(&link), plugin).await,
        Err(ServeError::Symlink(_))
    ));
    assert!(!csi.exists());
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test]
async fn a_relative_endpoint_cannot_be_registered() {
    let plugin: Arc<dyn NodePlugin> = Arc::new(Recorder::default());
    let reg = dir("relative").join("reg.sock");
    assert!(matches!(
        serve_node_plugin(std::path::Path::new("csi.sock"), Some(&reg), plugin).await,
        Err(ServeError::Prepare { .. })
    ));
    assert!(!reg.exists());
}

#[tokio::test]
async fn a_plugin_that_never_answers_hits_the_deadline_not_a_hang() {
    let d = dir("silent");
    std::fs::create_dir_all(&d).unwrap();
    let socket = d.join("csi.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    // Accepts, reads nothing, answers nothing.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let deadline = Duration::from_millis(300);
    let started = Instant::now();
    assert_eq!(
        CsiNodeClient::new(&socket, deadline)
            .node_publish(inline_publish("/t"))
            .await,
        Err(CsiError::Deadline {
            call: "NodePublishVolume",
            after: deadline
        })
    );
    assert_eq!(
        RegistrationClient::new(&socket, deadline).get_info().await,
        Err(CsiError::Deadline {
            call: "GetInfo",
            after: deadline
        })
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    silent.abort();
    let _ = std::fs::remove_dir_all(&d);
}
