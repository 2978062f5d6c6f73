//! Pod sockets with the caller check on, tried as another Pod would: its process on the
//! victim's socket, on an open connection whose pid turned into another Pod's, and naming
//! another Pod on its own socket. The test process plays each Pod through the fake proc
//! root of [`super::tests::Bed`].

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::tests::{A, B, Bed, ask};
use crate::local_api::server::REQUEST_DEADLINE;
use hcomm_crds::local_api::Notice;

#[tokio::test]
async fn another_pods_process_is_refused_and_the_owner_keeps_being_served() {
    let bed = Bed::new("other", REQUEST_DEADLINE);
    bed.open("a", A);
    let a_sock = bed.sockets.socket_of(A);
    // The owner holds a watch open across the attack.
    bed.act_as(Some(A));
    let s = UnixStream::connect(&a_sock).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut watch = BufReader::new(r);
    w.write_all(b"{\"op\":\"watch\",\"pod\":\"a\"}\n")
        .await
        .unwrap();
    let mut line = String::new();
    watch.read_line(&mut line).await.unwrap();
    assert!(line.contains("true"), "{line}");

    bed.act_as(Some(B));
    for op in ["serving", "report_inflight\",\"n\":0,\"x\":\"", "watch"] {
        let r = ask(&a_sock, &format!(r#"{{"op":"{op}","pod":"a"}}"#)).await;
        assert_eq!(r["ok"], false);
        assert!(
            r["error"]
                .as_str()
                .unwrap()
                .starts_with("CallerIsAnotherPod"),
            "{r}"
        );
    }
    let slot = bed.hub.get("ns/a").unwrap();
    assert!(
        !*slot.serving.borrow(),
        "the stranger's serving did not land"
    );
    bed.act_as(None);
    let r = ask(&a_sock, r#"{"op":"serving","pod":"a"}"#).await;
    assert!(
        r["error"].as_str().unwrap().starts_with("CallerNotInPod"),
        "{r}"
    );

    bed.act_as(Some(A));
    let r = ask(&a_sock, r#"{"op":"serving","pod":"a"}"#).await;
    assert_eq!(r["ok"], true, "{r}");
    assert!(*slot.serving.borrow());
    bed.hub.notify("ns/a", Notice::EpochChanged { epoch: 9 });
    line.clear();
    watch.read_line(&mut line).await.unwrap();
    assert!(
        line.contains("epoch_changed"),
        "the owner's watch survived: {line}"
    );
}

/// The pid that connected now belongs to another Pod (its process exited and the pid was
/// reused): the next request on the open connection is refused and the connection ends;
/// the owner's new connection is served.
#[tokio::test]
async fn a_connection_whose_pid_turns_into_another_pods_is_refused_at_its_next_request() {
    let bed = Bed::new("reuse", REQUEST_DEADLINE);
    bed.open("a", A);
    let a_sock = bed.sockets.socket_of(A);
    bed.act_as(Some(A));
    let s = UnixStream::connect(&a_sock).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    let mut line = String::new();
    w.write_all(b"{\"op\":\"assignment\",\"pod\":\"a\"}\n")
        .await
        .unwrap();
    r.read_line(&mut line).await.unwrap();
    assert!(line.contains("\"rank\":0"), "{line}");

    bed.act_as(Some(B));
    w.write_all(b"{\"op\":\"serving\",\"pod\":\"a\"}\n")
        .await
        .unwrap();
    line.clear();
    r.read_line(&mut line).await.unwrap();
    assert!(line.contains("CallerIsAnotherPod"), "{line}");
    line.clear();
    assert_eq!(r.read_line(&mut line).await.unwrap(), 0, "closed: {line}");
    assert!(!*bed.hub.get("ns/a").unwrap().serving.borrow());

    bed.act_as(Some(A));
    let r = ask(&a_sock, r#"{"op":"serving","pod":"a"}"#).await;
    assert_eq!(r["ok"], true, "{r}");
}

#[tokio::test]
async fn a_request_naming_another_pod_on_a_pods_own_socket_is_refused() {
    let bed = Bed::new("names", REQUEST_DEADLINE);
    bed.open("a", A);
    bed.open("b", B);
    bed.act_as(Some(A));
    let a_sock = bed.sockets.socket_of(A);
    for line in [
        r#"{"op":"serving","pod":"b"}"#,
        r#"{"op":"assignment","pod":"b","namespace":"ns"}"#,
        r#"{"op":"serving","pod":"a","namespace":"other"}"#,
    ] {
        let r = ask(&a_sock, line).await;
        assert!(
            r["error"].as_str().unwrap().starts_with("ForeignPod"),
            "{line}: {r}"
        );
    }
    assert!(!*bed.hub.get("ns/b").unwrap().serving.borrow());
}
