//! The weight-sync decisions and [`super::EngineSyncer`] on a real store and chunk server.

use super::*;
use crate::weights::Place;

fn peers(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn peer_sources_are_the_other_nodes_data_addresses_at_the_weights_port() {
    let local: IpAddr = "198.18.0.10".parse().unwrap();
    let got = peer_sources(
        &peers(&[
            ("n1", "198.18.0.11"),
            ("self", "198.18.0.12"), // this node by name
            ("n0", "198.18.0.10"),   // this node by address
            ("n2", "not-an-ip"),
            ("n1", "198.18.0.11"), // duplicate
            ("n3", "198.18.0.13"),
        ]),
        "self",
        local,
        7512,
    );
    assert_eq!(
        got,
        [
            "198.18.0.11:7512".parse::<SocketAddr>().unwrap(),
            "198.18.0.13:7512".parse().unwrap()
        ]
    );
    assert!(peer_sources(&[], "self", local, 7512).is_empty());
}

#[test]
fn only_absolute_paths_and_file_urls_are_local_sources() {
    assert_eq!(local_source("/models/m1"), Some("/models/m1".into()));
    assert_eq!(local_source("file:///models/m1"), Some("/models/m1".into()));
    assert_eq!(local_source("https://hub/m1"), None);
    assert_eq!(local_source("s3://bucket/m1"), None);
    assert_eq!(local_source("relative/dir"), None);
}

fn no_sources() -> WeightsError {
    WeightsError::NoSources {
        manifest: Digest::of(b"m"),
        remaining_chunks: 0,
        tried: vec![],
    }
}

#[test]
fn first_members_import_from_the_source_only_when_no_peer_serves_the_manifest() {
    // Nobody holds the set yet: the first members import.
    assert_eq!(
        after_peers(false, &no_sources(), "/models/m1"),
        AfterPeers::Import("/models/m1".into())
    );
    // Same, but the source is remote: a clear failure, not a pretend sync.
    let AfterPeers::Fail(reason, msg) = after_peers(false, &no_sources(), "https://hub/m1") else {
        panic!("expected a failure")
    };
    assert_eq!(reason, PodReason::NoWeightsSource);
    assert!(msg.contains("https://hub/m1"), "{msg}");
    // A peer holds it but the transfer failed: a peer failure, no silent fallback.
    let AfterPeers::Fail(reason, _) = after_peers(true, &no_sources(), "/models/m1") else {
        panic!("expected a failure")
    };
    assert_eq!(reason, PodReason::PeerFetchFailed);
}

#[test]
fn errors_map_to_fixed_reasons() {
    let mismatch = WeightsError::DigestMismatch {
        subject: crate::weights::Subject::Manifest,
        peer: None,
        expected: Digest::of(b"a"),
        actual: Digest::of(b"b"),
    };
    assert_eq!(reason_of(&mismatch), PodReason::DigestMismatch);
    assert_eq!(reason_of(&no_sources()), PodReason::PeerFetchFailed);
    assert_eq!(
        reason_of(&WeightsError::Invalid("x".into())),
        PodReason::SyncFailed
    );
    let refused = crate::weights::SourceRoots::default()
        .open(Path::new("/etc"))
        .unwrap_err();
    assert_eq!(
        reason_of(&WeightsError::SourceRefused(refused)),
        PodReason::WeightsSourceRefused
    );
}

fn pattern() -> Vec<u8> {
    (0..300_000u32).map(|i| (i % 251) as u8).collect()
}

fn write_set(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a.bin"), pattern()).unwrap();
    std::fs::write(dir.join("sub/b.bin"), b"tensor").unwrap();
}

fn req(spec: Option<hcomm_crds::WeightsSpec>, peers: Vec<(String, String)>) -> WeightsRequest {
    WeightsRequest {
        group_uid: "uid-g".into(),
        namespace: "ns".into(),
        group: "g".into(),
        pod: "p".into(),
        node: "self".into(),
        spec,
        interface: "lo".into(),
        local_ip: "127.0.0.1".parse().unwrap(),
        peers,
        place: Place::Unknown,
        epoch: 1,
    }
}

#[tokio::test]
async fn the_first_member_imports_a_verified_set_and_a_wrong_digest_is_refused() {
    let tmp = std::env::temp_dir().join(format!(
        "hcomm-weights-sync-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    let src = tmp.join("src");
    write_set(&src);
    let digest = crate::weights::manifest_digest(&src, 64 << 10).unwrap();
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let mut s = EngineSyncer::new(store, 1, GroupSecret::new(b"s".to_vec()));
    s.chunk_sizes = vec![64 << 10];
    s.source_roots = SourceRoots::new([tmp.clone()]).unwrap();
    assert_eq!(s.sync(&req(None, vec![])).await.unwrap().path, None);

    let spec = |d: String| {
        Some(hcomm_crds::WeightsSpec {
            source: src.display().to_string(),
            version: "v1".into(),
            digest: d,
        })
    };
    let bad = s
        .sync(&req(spec(Digest::of(b"other").to_string()), vec![]))
        .await
        .unwrap_err();
    assert_eq!(bad.reason, PodReason::DigestMismatch);
    assert!(bad.message.contains(&digest.to_string()), "{}", bad.message);
    let link = |st: &WeightStore| st.link_path(&CurrentLink::group("ns", "g").unwrap());
    assert!(!link(s.store()).exists());

    let ok = s
        .sync(&req(spec(digest.to_string()), vec![]))
        .await
        .unwrap();
    assert_eq!(ok.path, Some(link(s.store())));
    assert!(ok.path.as_ref().unwrap().ends_with("groups/ns_g/current"));
    assert!(
        ok.message.contains("imported from source"),
        "{}",
        ok.message
    );
    assert_eq!(ok.bytes, 300_006);
    assert_eq!(
        std::fs::read(link(s.store()).join("sub/b.bin")).unwrap(),
        b"tensor"
    );
    // Held now: a second member on this node activates it without a transfer.
    let again = s
        .sync(&req(spec(digest.to_string()), vec![]))
        .await
        .unwrap();
    assert!(again.message.contains("already held"), "{}", again.message);

    let garbage = s
        .sync(&req(spec("sha256:zz".into()), vec![]))
        .await
        .unwrap_err();
    assert_eq!(garbage.reason, PodReason::InvalidWeightsSpec);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[tokio::test]
async fn a_later_member_fetches_from_a_peer_and_without_holders_falls_back_to_the_source() {
    let tmp = std::env::temp_dir().join(format!(
        "hcomm-weights-peer-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let src = tmp.join("src");
    write_set(&src);
    let digest = crate::weights::manifest_digest(&src, 64 << 10).unwrap();
    let secret = GroupSecret::new(b"agents".to_vec());
    let spec = Some(hcomm_crds::WeightsSpec {
        source: src.display().to_string(),
        version: "v1".into(),
        digest: digest.to_string(),
    });
    // Member 0 (127.0.0.1) serves its store; nobody holds the set yet.
    let store0 = WeightStore::open(tmp.join("s0")).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::weights::ChunkServer::serve(
        l,
        store0.clone(),
        crate::weights::ServerConfig::new(secret.clone()),
        async {
            let _ = stopped.await;
        },
    ));
    let mut s0 = EngineSyncer::new(store0, port, secret.clone());
    s0.chunk_sizes = vec![64 << 10];
    s0.source_roots = SourceRoots::new([tmp.clone()]).unwrap();
    let mut r0 = req(spec.clone(), peers(&[("n1", "127.0.0.2")]));
    r0.node = "n0".into();
    // Its peer (n1) serves nothing: the first member imports from the source.
    let first = s0.sync(&r0).await.unwrap();
    assert!(
        first.message.contains("imported from source"),
        "{}",
        first.message
    );

    // Member 1 (127.0.0.2) fetches from member 0 over TCP.
    let mut s1 = EngineSyncer::new(WeightStore::open(tmp.join("s1")).unwrap(), port, secret);
    s1.chunk_sizes = vec![64 << 10];
    let mut r1 = req(spec, peers(&[("n0", "127.0.0.1")]));
    r1.node = "n1".into();
    r1.local_ip = "127.0.0.2".parse().unwrap();
    let second = s1.sync(&r1).await.unwrap();
    assert!(
        second.message.contains("fetched from peers [127.0.0.1"),
        "{}",
        second.message
    );
    assert_eq!(second.bytes, 300_006);
    let link1 = s1
        .store()
        .link_path(&CurrentLink::group("ns", "g").unwrap());
    assert_eq!(second.path, Some(link1.clone()));
    assert_eq!(std::fs::read(link1.join("a.bin")).unwrap(), pattern());
    let _ = stop.send(());
    server.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
}

#[tokio::test]
async fn a_source_outside_the_roots_or_through_a_symlink_is_refused_and_nothing_is_staged() {
    let tmp = crate::weights::test_dirs::fresh("weights-sync", "refused");
    let (allowed, src) = (tmp.join("allowed"), tmp.join("allowed/m"));
    write_set(&src);
    std::os::unix::fs::symlink("/etc", allowed.join("escape")).unwrap();
    let digest = crate::weights::manifest_digest(&src, 64 << 10).unwrap();
    let spec = |source: &str| {
        Some(hcomm_crds::WeightsSpec {
            source: source.into(),
            version: "v1".into(),
            digest: digest.to_string(),
        })
    };
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let mut s = EngineSyncer::new(store, 1, GroupSecret::new(b"s".to_vec()));
    s.chunk_sizes = vec![64 << 10];
    // No root configured (the chart's default): even the right set is refused.
    let e = s
        .sync(&req(spec(&src.display().to_string()), vec![]))
        .await
        .unwrap_err();
    assert_eq!(e.reason, PodReason::WeightsSourceRefused);
    assert!(e.message.contains("--weights-source-root"), "{}", e.message);
    s.source_roots = SourceRoots::new([allowed.clone()]).unwrap();
    for (source, why) in [
        ("/etc".to_string(), "outside the allowed source roots"),
        (
            "/var/run/secrets/kubernetes.io/serviceaccount".into(),
            "outside",
        ),
        (format!("{}/../../etc", src.display()), "`..`"),
        (format!("{}/escape", allowed.display()), "symlink"),
        (
            format!("file://{}/escape/ssl", allowed.display()),
            "symlink",
        ),
    ] {
        let e = s.sync(&req(spec(&source), vec![])).await.unwrap_err();
        assert_eq!(
            e.reason,
            PodReason::WeightsSourceRefused,
            "{source}: {}",
            e.message
        );
        assert!(e.message.contains(why), "{source}: {}", e.message);
    }
    let staged = std::fs::read_dir(s.store().root().join("staging"))
        .unwrap()
        .count();
    assert_eq!(staged, 0, "nothing was staged");
    // Below the root, the same set is imported.
    let ok = s
        .sync(&req(spec(&src.display().to_string()), vec![]))
        .await
        .unwrap();
    assert!(
        ok.message.contains("imported from source"),
        "{}",
        ok.message
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
