//! Pod sockets with the caller check on: the test process plays each Pod by writing its
//! own `/proc/<pid>/cgroup` into a fake proc root before it connects (the check reads the
//! file at accept and again for every request line).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::*;
use crate::local_api::caller::CallerCheck;
use crate::local_api::csi_target::{self, CsiTarget};
use crate::local_api::server::{MAX_POD_CONNECTIONS, REQUEST_DEADLINE};
use hcomm_crds::local_api::Assignment;

pub(super) const A: &str = "0b9f4c1e-2d3a-4b5c-8d7e-9f0a1b2c3d4e";
pub(super) const B: &str = "11111111-2222-4333-8444-555555555555";

pub(super) struct Bed {
    pub(super) root: PathBuf,
    proc_root: PathBuf,
    pub(super) hub: Hub,
    pub(super) sockets: PodSockets,
}

impl Bed {
    pub(super) fn new(tag: &str, deadline: Duration) -> Bed {
        let root = std::env::temp_dir().join(format!("hcomm-pods-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let proc_root = root.join("proc");
        std::fs::create_dir_all(proc_root.join(std::process::id().to_string())).unwrap();
        let hub = Hub::default();
        let access = Access {
            callers: CallerCheck::Strict,
            proc_root: proc_root.clone(),
            request_deadline: deadline,
            ..Access::default()
        };
        let sockets = PodSockets::new(
            root.join("pods"),
            hub.clone(),
            access,
            &root.join("kubelet"),
        );
        Bed {
            root,
            proc_root,
            hub,
            sockets,
        }
    }

    /// The next connection of this process comes from the Pod with `uid` (None: from no Pod).
    pub(super) fn act_as(&self, uid: Option<&str>) {
        let line = match uid {
            Some(u) => format!("0::/kubepods/besteffort/pod{u}/c0ffee\n"),
            None => "0::/user.slice/session-1.scope\n".to_owned(),
        };
        let file = self
            .proc_root
            .join(std::process::id().to_string())
            .join("cgroup");
        std::fs::write(file, line).unwrap();
    }

    pub(super) fn open(&self, name: &str, uid: &str) -> Ticket {
        let t = self
            .sockets
            .open(PodIdentity {
                namespace: "ns".into(),
                name: name.into(),
                uid: uid.into(),
            })
            .unwrap();
        self.hub
            .slot(&format!("ns/{name}"))
            .assignment
            .send_replace(Some(Assignment {
                group: "g".into(),
                rank: if name == "a" { 0 } else { 1 },
                world: 2,
                ..Default::default()
            }));
        t
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub(super) async fn ask(sock: &Path, line: &str) -> serde_json::Value {
    let s = UnixStream::connect(sock).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    // A refused caller is answered before it writes anything; the write may then fail.
    let _ = w.write_all(format!("{line}\n").as_bytes()).await;
    let mut answer = String::new();
    r.read_line(&mut answer).await.unwrap();
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{answer:?}: {e}"))
}

#[tokio::test]
async fn each_pod_reaches_its_own_member_through_its_own_socket() {
    let bed = Bed::new("own", REQUEST_DEADLINE);
    bed.open("a", A);
    bed.open("b", B);
    let a_sock = bed.sockets.socket_of(A);
    assert_eq!(a_sock, bed.root.join("pods").join(A).join("agent.sock"));
    let mode = std::fs::metadata(&a_sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666);
    bed.act_as(Some(A));
    let r = ask(&a_sock, r#"{"op":"assignment","pod":"a"}"#).await;
    assert_eq!(r["assignment"]["rank"], 0, "{r}");
    bed.act_as(Some(B));
    let r = ask(
        &bed.sockets.socket_of(B),
        r#"{"op":"assignment","pod":"b","namespace":"ns"}"#,
    )
    .await;
    assert_eq!(r["assignment"]["rank"], 1, "{r}");
}

#[tokio::test]
async fn a_silent_caller_is_cut_off_at_the_request_deadline() {
    let bed = Bed::new("silent", Duration::from_millis(200));
    bed.open("a", A);
    bed.act_as(Some(A));
    let s = UnixStream::connect(bed.sockets.socket_of(A)).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    w.write_all(b"{\"op\":\"assig").await.unwrap();
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut line))
        .await
        .expect("the agent ends a silent connection")
        .unwrap();
    assert!(line.contains("RequestDeadline"), "{line}");
    line.clear();
    let n = r.read_line(&mut line).await.unwrap();
    assert_eq!(n, 0, "closed after the deadline");
}

#[tokio::test]
async fn one_pod_filling_its_socket_does_not_touch_another_pods() {
    let bed = Bed::new("cap", REQUEST_DEADLINE);
    bed.open("a", A);
    bed.open("b", B);
    bed.act_as(Some(A));
    let mut held = Vec::new();
    for _ in 0..MAX_POD_CONNECTIONS {
        held.push(UnixStream::connect(bed.sockets.socket_of(A)).await.unwrap());
    }
    // Accepts are served in order: a request on a held connection proves all are accepted.
    let (r, mut w) = held.pop().unwrap().into_split();
    w.write_all(b"{\"op\":\"weights_ready\",\"pod\":\"a\"}\n")
        .await
        .unwrap();
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).await.unwrap();
    held.push(UnixStream::connect(bed.sockets.socket_of(A)).await.unwrap());
    let r = ask(&bed.sockets.socket_of(A), r#"{"op":"serving","pod":"a"}"#).await;
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .starts_with("TooManyConnections"),
        "{r}"
    );
    bed.act_as(Some(B));
    let r = ask(&bed.sockets.socket_of(B), r#"{"op":"serving","pod":"b"}"#).await;
    assert_eq!(r["ok"], true, "{r}");
}

#[tokio::test]
async fn closing_a_pod_removes_its_socket_and_directory_and_ends_its_watches() {
    let bed = Bed::new("close", REQUEST_DEADLINE);
    let first = bed.open("a", A);
    // A re-open (a restarted member task) replaces the socket; the old ticket is void.
    let second = bed.open("a", A);
    bed.sockets.close(&first, true);
    assert!(bed.sockets.socket_of(A).exists());
    bed.act_as(Some(A));
    let s = UnixStream::connect(bed.sockets.socket_of(A)).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    w.write_all(b"{\"op\":\"watch\",\"pod\":\"a\"}\n")
        .await
        .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    bed.sockets.close(&second, true);
    assert!(!bed.sockets.socket_of(A).exists());
    assert!(!bed.root.join("pods").join(A).exists());
    line.clear();
    let n = tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut line))
        .await
        .expect("the watch ends with its socket")
        .unwrap_or(0);
    assert_eq!(n, 0, "{line}");
    assert!(bed.sockets.keys().is_empty());
}

#[test]
fn a_uid_that_is_not_a_kubernetes_uid_gets_no_socket() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bed = rt.block_on(async { Bed::new("baduid", REQUEST_DEADLINE) });
    let _guard = rt.enter();
    let e = bed.sockets.open(PodIdentity {
        namespace: "ns".into(),
        name: "a".into(),
        uid: "../../etc".into(),
    });
    assert!(e.unwrap_err().to_string().contains("not a Kubernetes UID"));
    assert!(!bed.root.join("etc").exists());
}

/// The kubelet's publish of Pod `uid`'s local-API volume below `bed`'s kubelet root: its
/// target's parent made, as the kubelet makes it.
fn publish(bed: &Bed, name: &str, uid: &str) -> CsiTarget {
    let path = bed
        .root
        .join("kubelet/pods")
        .join(uid)
        .join("volumes/kubernetes.io~csi/hcomm-agent-api/mount");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let target = csi_target::parse(&bed.root.join("kubelet"), path.to_str().unwrap()).unwrap();
    let id = PodIdentity {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
    };
    bed.sockets.publish(&target, &id).unwrap();
    target
}

/// The socket in `dir` by a path short enough to connect to (a kubelet target is longer
/// than a socket address may be; a container sees it at `/run/hcomm`): the directory's
/// descriptor, which the returned file keeps open.
fn short_socket(dir: &Path) -> (std::fs::File, PathBuf) {
    use std::os::fd::AsRawFd;
    let d = std::fs::File::open(dir).unwrap();
    let path = PathBuf::from(format!("/proc/self/fd/{}/agent.sock", d.as_raw_fd()));
    (d, path)
}

#[tokio::test]
async fn a_published_volume_holds_its_pods_socket_whichever_comes_first() {
    let bed = Bed::new("csi", REQUEST_DEADLINE);
    // Published before the member is adopted: the socket opens in the volume.
    let a = publish(&bed, "a", A);
    bed.open("a", A);
    assert_eq!(bed.sockets.socket_of(A), a.path.join("agent.sock"));
    let mode = std::fs::metadata(&a.path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
    let (_a_dir, a_sock) = short_socket(&a.path);
    bed.act_as(Some(A));
    let r = ask(&a_sock, r#"{"op":"assignment","pod":"a"}"#).await;
    assert_eq!(r["assignment"]["rank"], 0, "{r}");
    // Adopted first (its hostPath directory), published after: the socket moves.
    bed.open("b", B);
    let host_path = bed.root.join("pods").join(B).join("agent.sock");
    assert!(host_path.exists());
    let b = publish(&bed, "b", B);
    assert!(!host_path.exists(), "the old socket stays behind");
    let (_b_dir, b_sock) = short_socket(&b.path);
    bed.act_as(Some(B));
    let r = ask(&b_sock, r#"{"op":"assignment","pod":"b"}"#).await;
    assert_eq!(r["assignment"]["rank"], 1, "{r}");
    // Publishing again changes nothing (the kubelet may retry).
    publish(&bed, "b", B);
    let r = ask(&b_sock, r#"{"op":"serving","pod":"b"}"#).await;
    assert_eq!(r["ok"], true, "{r}");
    // The caller check holds in the volume as anywhere.
    bed.act_as(Some(A));
    let r = ask(&b_sock, r#"{"op":"serving","pod":"b"}"#).await;
    assert!(
        r["error"].as_str().unwrap().contains("CallerIsAnotherPod"),
        "{r}"
    );
}

#[tokio::test]
async fn unpublishing_stops_the_socket_and_removes_only_what_the_agent_made() {
    let bed = Bed::new("unpub", REQUEST_DEADLINE);
    let a = publish(&bed, "a", A);
    let ticket = bed.open("a", A);
    bed.sockets.unpublish(&a).unwrap();
    assert!(!a.path.exists(), "the target directory stays");
    assert!(
        a.path.parent().unwrap().exists(),
        "the kubelet's own directory went"
    );
    // Twice is no error; the member's own close afterwards neither.
    bed.sockets.unpublish(&a).unwrap();
    bed.sockets.close(&ticket, true);
    // Something else in the directory: not deleted, and said so.
    let a = publish(&bed, "a", A);
    std::fs::write(a.path.join("not-ours"), b"x").unwrap();
    let e = bed.sockets.unpublish(&a).unwrap_err();
    assert!(e.to_string().contains("remove"), "{e}");
    assert!(a.path.join("not-ours").exists());
}

#[tokio::test]
async fn a_restarted_agent_serves_each_pod_in_its_published_volume_again() {
    let bed = Bed::new("restart", REQUEST_DEADLINE);
    let a = publish(&bed, "a", A);
    // A stopping agent aborts its member tasks (`member::driver`): their sockets close as
    // the Pods live on, and the directories stay (a hostPath one too: its container's
    // mount holds it).
    let ticket = bed.open("a", A);
    let b_ticket = bed.open("b", B);
    let b_dir = bed.root.join("pods").join(B);
    bed.sockets.close(&ticket, false);
    bed.sockets.close(&b_ticket, false);
    assert!(
        b_dir.is_dir(),
        "a live Pod's hostPath directory went with the agent"
    );
    assert!(a.path.is_dir());
    // A record of a volume unpublished while no agent ran is dropped.
    const C: &str = "22222222-3333-4444-8555-666666666666";
    let gone = bed
        .root
        .join("kubelet/pods")
        .join(C)
        .join("volumes/kubernetes.io~csi/hcomm-agent-api/mount");
    std::fs::write(
        bed.root.join("pods").join(format!("{C}.csi-target")),
        format!("{}\n", gone.display()),
    )
    .unwrap();
    // A record that points anywhere but a kubelet target is not followed.
    std::fs::write(
        bed.root.join("pods").join(format!("{B}.csi-target")),
        "/etc\n",
    )
    .unwrap();
    let again = PodSockets::new(
        bed.root.join("pods"),
        bed.hub.clone(),
        Access::default(),
        &bed.root.join("kubelet"),
    );
    assert_eq!(again.socket_of(A), a.path.join("agent.sock"));
    assert_eq!(
        again.socket_of(B),
        bed.root.join("pods").join(B).join("agent.sock")
    );
    assert_eq!(
        again.socket_of(C),
        bed.root.join("pods").join(C).join("agent.sock")
    );
    assert!(
        !bed.root
            .join("pods")
            .join(format!("{C}.csi-target"))
            .exists()
    );
}

#[tokio::test]
async fn a_symlink_or_a_file_in_place_of_the_target_is_refused() {
    let bed = Bed::new("link", REQUEST_DEADLINE);
    let path = bed
        .root
        .join("kubelet/pods")
        .join(A)
        .join("volumes/kubernetes.io~csi/hcomm-agent-api/mount");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::create_dir_all(bed.root.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(bed.root.join("elsewhere"), &path).unwrap();
    let target = csi_target::parse(&bed.root.join("kubelet"), path.to_str().unwrap()).unwrap();
    let id = PodIdentity {
        namespace: "ns".into(),
        name: "a".into(),
        uid: A.into(),
    };
    let e = bed.sockets.publish(&target, &id).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    assert!(
        std::fs::read_dir(bed.root.join("elsewhere"))
            .unwrap()
            .next()
            .is_none()
    );
    // A file named like the socket in a real target directory is not replaced either.
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("agent.sock"), b"not a socket").unwrap();
    let e = bed.sockets.publish(&target, &id);
    assert!(e.is_ok(), "{e:?}");
    let e = bed.sockets.open(id).unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
}
