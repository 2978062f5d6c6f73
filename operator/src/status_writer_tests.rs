use std::collections::VecDeque;

use prometheus::IntCounter;
use tokio::sync::{Semaphore, mpsc};

use super::*;

fn epoch(epoch: i64) -> HcommGroupStatus {
    HcommGroupStatus {
        epoch,
        ..Default::default()
    }
}

fn target() -> Target {
    Target {
        namespace: "ns".into(),
        name: "g".into(),
        uid: "u".into(),
    }
}

fn api_error(code: u16) -> Error {
    let status = kube::core::Status::failure("scripted", "Scripted").with_code(code);
    Error::Kube {
        action: "write status".into(),
        source: kube::Error::Api(Box::new(status)),
    }
}

/// A write that reports each start (the status's epoch), waits for a permit, then answers
/// the next scripted result (by default the resource version `"v<epoch>"`).
struct Script {
    started: mpsc::UnboundedReceiver<i64>,
    permits: Arc<Semaphore>,
    writer: StatusWriter,
    written: Arc<StatusWritten>,
    failures: IntCounter,
}

fn scripted(results: Vec<Result<Option<String>>>) -> Script {
    let (tx, started) = mpsc::unbounded_channel();
    let permits = Arc::new(Semaphore::new(0));
    let results = Arc::new(Mutex::new(VecDeque::from(results)));
    let gate = permits.clone();
    let write: WriteFn = Arc::new(move |_target: Target, status: HcommGroupStatus| {
        let (tx, gate, results) = (tx.clone(), gate.clone(), results.clone());
        Box::pin(async move {
            let _ = tx.send(status.epoch);
            gate.acquire().await.expect("gate open").forget();
            let next = results.lock().unwrap().pop_front();
            next.unwrap_or_else(|| Ok(Some(format!("v{}", status.epoch))))
        })
    });
    let written = Arc::new(StatusWritten::default());
    let failures = IntCounter::new("failures", "failed tries").unwrap();
    Script {
        started,
        permits,
        writer: StatusWriter::new(write, written.clone(), failures.clone()),
        written,
        failures,
    }
}

async fn next_start(script: &mut Script) -> i64 {
    tokio::time::timeout(Duration::from_secs(5), script.started.recv())
        .await
        .expect("a write starts within 5 s")
        .expect("writer alive")
}

async fn no_start(script: &mut Script) {
    let more = tokio::time::timeout(Duration::from_millis(300), script.started.recv()).await;
    assert!(more.is_err(), "no further write expected, got {more:?}");
}

#[tokio::test]
async fn statuses_handed_over_during_a_write_collapse_into_the_newest() {
    let mut s = scripted(vec![]);
    s.writer.hand_over(target(), epoch(1));
    assert_eq!(
        next_start(&mut s).await,
        1,
        "nothing in flight: written at once"
    );
    s.writer.hand_over(target(), epoch(2));
    s.writer.hand_over(target(), epoch(3));
    // Until answered, the newest status handed over is the latest, over any cache.
    assert_eq!(s.written.latest("u", Some(&epoch(9)), Some("99")).epoch, 3);
    s.permits.add_permits(1);
    assert_eq!(next_start(&mut s).await, 3, "epoch 2 is never written");
    s.permits.add_permits(1);
    assert!(s.writer.flush(Duration::from_secs(5)).await);
    no_start(&mut s).await;
    // Answered at v3: a cache at that version is the latest again.
    assert_eq!(s.written.latest("u", Some(&epoch(3)), Some("v3")).epoch, 3);
    assert_eq!(s.written.latest("u", Some(&epoch(1)), Some("v2")).epoch, 3);
}

#[tokio::test]
async fn a_failed_write_is_tried_again_unless_a_newer_status_replaces_it() {
    let mut s = scripted(vec![Err(api_error(500)), Err(api_error(500))]);
    s.writer.hand_over(target(), epoch(1));
    assert_eq!(next_start(&mut s).await, 1);
    s.permits.add_permits(1);
    assert_eq!(
        next_start(&mut s).await,
        1,
        "the failed write is tried again"
    );
    // While the second try is in flight, a newer status arrives: after that try fails,
    // the newer one is written and the failed one is not tried again.
    s.writer.hand_over(target(), epoch(2));
    s.permits.add_permits(1);
    assert_eq!(next_start(&mut s).await, 2);
    s.permits.add_permits(1);
    assert!(s.writer.flush(Duration::from_secs(5)).await);
    no_start(&mut s).await;
    assert_eq!(s.failures.get(), 2, "every failed try is counted");
}

#[tokio::test]
async fn a_waiting_caller_gets_its_own_write_after_the_one_in_flight_and_its_error() {
    let mut s = scripted(vec![Ok(Some("v1".into())), Err(api_error(422))]);
    s.writer.hand_over(target(), epoch(1));
    assert_eq!(next_start(&mut s).await, 1);
    let writer = s.writer.clone();
    let waiting = writer.write(target(), epoch(2));
    let mut waiting = std::pin::pin!(waiting);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut waiting)
            .await
            .is_err(),
        "behind the write in flight"
    );
    s.permits.add_permits(2);
    assert_eq!(next_start(&mut s).await, 2);
    let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answered within 5 s");
    assert!(
        matches!(answer, Err(ref e) if !e.is_not_found()),
        "{answer:?}"
    );
    no_start(&mut s).await;
    assert_eq!(
        s.written.latest("u", Some(&epoch(1)), Some("v1")).epoch,
        1,
        "the failed status is not taken as written: the next round writes again"
    );
}

#[tokio::test]
async fn a_gone_group_is_not_written_again_and_is_forgotten() {
    let mut s = scripted(vec![Err(api_error(404))]);
    s.writer.hand_over(target(), epoch(1));
    assert_eq!(next_start(&mut s).await, 1);
    s.permits.add_permits(1);
    assert!(s.writer.flush(Duration::from_secs(5)).await);
    no_start(&mut s).await;
    assert_eq!(
        s.written.latest("u", Some(&epoch(7)), Some("1")).epoch,
        7,
        "forgotten: the cache"
    );
    assert_eq!(s.failures.get(), 0, "a gone group is no failure");
}

#[tokio::test]
async fn a_dropped_writer_writes_nothing_more() {
    let mut s = scripted(vec![]);
    s.writer.hand_over(target(), epoch(1));
    assert_eq!(next_start(&mut s).await, 1);
    s.writer.hand_over(target(), epoch(2));
    let Script {
        mut started,
        permits,
        writer,
        ..
    } = s;
    drop(writer);
    permits.add_permits(2);
    let more = tokio::time::timeout(Duration::from_millis(300), started.recv()).await;
    assert!(
        !matches!(more, Ok(Some(_))),
        "leadership lost: epoch 2 is not written ({more:?})"
    );
}
