//! Issue 17, point 2, on real sockets: a node's chunk server holding the weights of two
//! groups serves each group only its own set, to clients that prove that group's own
//! secret. Tried as an attacker would: a member of group B (valid secret for B) asking for
//! group A's set; a client naming group A with a wrong secret; a client of group A's
//! previous incarnation (deleted and re-created: new UID). Each is refused with a named
//! error, and group A's legitimate member still fetches everything afterwards.

mod weights_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use hcomm_agent::weights::{
    Authority, Digest, Grant, GroupId, GroupSecret, Progress, ServerConfig, WeightStore, fetch,
};
use weights_support::*;

/// Groups as the API server would hold them: UID, secret and `spec.weights.digest`.
#[derive(Debug)]
struct Groups(BTreeMap<(String, String), (String, GroupSecret, Digest)>);

impl Authority for Groups {
    fn grant<'a>(&'a self, group: &'a GroupId) -> BoxFuture<'a, Result<Grant, String>> {
        Box::pin(async move {
            let key = (group.namespace.clone(), group.name.clone());
            let (uid, secret, digest) = self.0.get(&key).ok_or("no such HcommGroup")?;
            if uid != &group.uid {
                return Err(format!("the HcommGroup's UID is {uid}"));
            }
            Ok(Grant {
                group: group.clone(),
                secret: secret.clone(),
                sets: Some(vec![*digest]),
            })
        })
    }
}

struct Fixture {
    source: Source,
    a: (GroupId, GroupSecret, Digest),
    b: (GroupId, GroupSecret, Digest),
    _sets: (TempDir, TempDir),
}

/// One node's store holding set A (group tenant-a/llm) and set B (tenant-b/chat).
async fn fixture() -> Fixture {
    let (sa, sb) = (TempDir::new("set-a"), TempDir::new("set-b"));
    generate_set(sa.path(), 2, 41);
    generate_set(sb.path(), 2, 42);
    let (da, db) = (digest_of(sa.path()), digest_of(sb.path()));
    let dir = TempDir::new("two-groups");
    let store = WeightStore::open(dir.path().join("store")).unwrap();
    for (set, d) in [(sa.path(), da), (sb.path(), db)] {
        let (s, set) = (store.clone(), set.to_path_buf());
        tokio::task::spawn_blocking(move || s.import_dir(&set, &d, CHUNK))
            .await
            .unwrap()
            .unwrap();
    }
    let a = (
        GroupId::new("tenant-a", "llm", "uid-a-2"),
        GroupSecret::new(vec![0xa1; 32]),
        da,
    );
    let b = (
        GroupId::new("tenant-b", "chat", "uid-b-1"),
        GroupSecret::new(vec![0xb2; 32]),
        db,
    );
    let groups = Groups(BTreeMap::from([
        (
            (a.0.namespace.clone(), a.0.name.clone()),
            (a.0.uid.clone(), a.1.clone(), a.2),
        ),
        (
            (b.0.namespace.clone(), b.0.name.clone()),
            (b.0.uid.clone(), b.1.clone(), b.2),
        ),
    ]));
    let mut source = serve(
        store,
        host(11),
        ServerConfig::with_authority(Arc::new(groups)),
    )
    .await;
    source._dir = Some(dir);
    Fixture {
        source,
        a,
        b,
        _sets: (sa, sb),
    }
}

/// A fetch of `digest` into a fresh store, as `group` with `secret`.
async fn fetch_as(
    f: &Fixture,
    digest: Digest,
    group: &GroupId,
    secret: &GroupSecret,
) -> (Result<(), hcomm_agent::weights::WeightsError>, TempDir) {
    let dir = TempDir::new("attacker");
    let store = WeightStore::open(dir.path().join("store")).unwrap();
    let mut req = request(digest, vec![f.source.addr], store);
    req.group = group.clone();
    req.secret = secret.clone();
    (fetch(req, Progress::new()).await.map(|_| ()), dir)
}

/// The legitimate member of group A gets all of set A afterwards: nothing lost.
async fn a_still_syncs(f: &Fixture) {
    let dir = TempDir::new("legit");
    let store = WeightStore::open(dir.path().join("store")).unwrap();
    let mut req = request(f.a.2, vec![f.source.addr], store.clone());
    req.group = f.a.0.clone();
    req.secret = f.a.1.clone();
    fetch(req, Progress::new()).await.unwrap();
    assert_installed(&store, f.a.2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_another_group_is_refused_the_set_and_the_refusal_is_named() {
    let f = fixture().await;
    // B's own set: fine.
    let (ok, _d) = fetch_as(&f, f.b.2, &f.b.0, &f.b.1).await;
    ok.unwrap();
    // A's set with B's valid credentials: authenticated, but not authorized.
    let (e, _d) = fetch_as(&f, f.a.2, &f.b.0, &f.b.1).await;
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("not authorized") && e.contains("tenant-b/chat"),
        "the refusal names the cause and the group: {e}"
    );
    a_still_syncs(&f).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_naming_a_group_with_the_wrong_secret_is_refused() {
    let f = fixture().await;
    // B's secret under A's name, and a made-up one.
    for wrong in [f.b.1.clone(), GroupSecret::new("hcomm-group-uid:uid-a-2")] {
        let (e, _d) = fetch_as(&f, f.a.2, &f.a.0, &wrong).await;
        let e = e.unwrap_err();
        assert_eq!(e.category(), "auth", "{e}");
        assert!(e.to_string().contains("refused"), "{e}");
    }
    a_still_syncs(&f).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_a_deleted_incarnation_or_an_unknown_group_is_refused() {
    let f = fixture().await;
    let old = GroupId::new("tenant-a", "llm", "uid-a-1");
    let unknown = GroupId::new("tenant-c", "llm", "uid-c");
    for who in [old, unknown] {
        let (e, _d) = fetch_as(&f, f.a.2, &who, &f.a.1).await;
        let e = e.unwrap_err();
        assert_eq!(e.category(), "auth", "{who}: {e}");
    }
    a_still_syncs(&f).await;
}
