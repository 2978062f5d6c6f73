//! Real processes: this test binary re-runs itself as ranks 1 and 2 (the entry point below
//! does nothing unless `HCOMM_TEST_CHILD` is set). Rank 2 then dies abruptly (process exit,
//! so the kernel closes its sockets) and the other two must fail naming it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use hcomm_comm::tcp::{Endpoint, RootInfo, TcpComm};
use hcomm_comm::{Communicator, DataType, ReduceOp};
use tokio::io::AsyncReadExt;

use crate::support::*;

const WORLD: usize = 3;
const COUNT: usize = 1001;

async fn rank_main(rank: usize, root: RootInfo) -> String {
    let ep = Endpoint::bind(ep_cfg()).await.unwrap();
    let mut c = cfg(WORLD, rank, root, 1);
    c.op_timeout = Duration::from_secs(5);
    let comm = TcpComm::init_on(ep, c).await.unwrap();
    let mut buf = encode(
        DataType::I32,
        &values(rank, COUNT, DataType::I32, ReduceOp::Sum),
    );
    comm.all_reduce(&mut buf, DataType::I32, ReduceOp::Sum)
        .await
        .unwrap();
    assert_eq!(buf, reference(WORLD, COUNT, DataType::I32, ReduceOp::Sum));
    comm.barrier().await.unwrap();
    if rank == 2 {
        // Die without any goodbye, as a crashed worker would.
        std::process::exit(0);
    }
    let started = Instant::now();
    let mut big = vec![0u8; 1 << 20];
    let err = comm
        .all_reduce(&mut big, DataType::F32, ReduceOp::Sum)
        .await
        .expect_err("all-reduce with a dead peer must fail");
    format!(
        "category={} names_rank_2={} within_deadline={}\n{err}",
        err.category(),
        err.to_string().contains("rank 2"),
        started.elapsed() < Duration::from_secs(6)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_rank_entry() {
    let (Ok(rank), Ok(root)) = (
        std::env::var("HCOMM_TEST_CHILD"),
        std::env::var("HCOMM_TEST_ROOT"),
    ) else {
        return; // Not a child: nothing to do.
    };
    let report = rank_main(rank.parse().unwrap(), root.parse().unwrap()).await;
    println!("REPORT {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_in_separate_processes_all_reduce_and_survivors_name_a_crashed_peer() {
    if std::env::var("HCOMM_TEST_CHILD").is_ok() {
        return;
    }
    // Rank 0's agent owns the root info; it reaches the others out of band (here: env).
    let ep0 = Endpoint::bind(ep_cfg()).await.unwrap();
    let root = ep0.create_root_info();
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for rank in 1..WORLD {
        let child = tokio::process::Command::new(&exe)
            .args([
                "processes::child_rank_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HCOMM_TEST_CHILD", rank.to_string())
            .env("HCOMM_TEST_ROOT", root.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        children.push(child);
    }
    let mut c = cfg(WORLD, 0, root, 1);
    c.op_timeout = Duration::from_secs(5);
    let run = async {
        let comm = TcpComm::init_on(ep0, c).await.unwrap();
        let mut buf = encode(
            DataType::I32,
            &values(0, COUNT, DataType::I32, ReduceOp::Sum),
        );
        comm.all_reduce(&mut buf, DataType::I32, ReduceOp::Sum)
            .await
            .unwrap();
        assert_eq!(buf, reference(WORLD, COUNT, DataType::I32, ReduceOp::Sum));
        comm.barrier().await.unwrap();
        let mut big = vec![0u8; 1 << 20];
        let err = comm
            .all_reduce(&mut big, DataType::F32, ReduceOp::Sum)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("rank 2"), "{err}");
        let mut out = String::new();
        let mut stdout = children[0].stdout.take().unwrap();
        stdout.read_to_string(&mut out).await.unwrap();
        assert!(children[0].wait().await.unwrap().success(), "{out}");
        assert!(children[1].wait().await.unwrap().success());
        out
    };
    let out = tokio::time::timeout(SCENARIO, run).await.expect("bounded");
    let report = out
        .lines()
        .find(|l| l.contains("REPORT "))
        .unwrap_or_default();
    assert!(
        report.contains("names_rank_2=true") && report.contains("within_deadline=true"),
        "{out}"
    );
}

/// Child entry for the `HCOMM_ALGO` test: a world of one, algorithm from the environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn algo_env_child_entry() {
    if std::env::var("HCOMM_TEST_ALGO_CHILD").is_err() {
        return;
    }
    let ep = Endpoint::bind(ep_cfg()).await.unwrap();
    let mut c = cfg(1, 0, ep.create_root_info(), 1);
    c.algorithm = None;
    match TcpComm::init_on(ep, c).await {
        Ok(comm) => println!("ALGO {}", comm.algorithm()),
        Err(e) => println!("ALGO error {} {e}", e.category()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hcomm_algo_overrides_auto_and_a_bad_value_is_refused_by_name() {
    if std::env::var("HCOMM_TEST_ALGO_CHILD").is_ok() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for (value, want) in [
        ("ring", "ALGO ring"),
        ("tree", "ALGO tree"),
        ("", "ALGO auto"),
        ("fastest", "ALGO error invalid_argument"),
    ] {
        let out = tokio::time::timeout(
            SCENARIO,
            tokio::process::Command::new(&exe)
                .args(["processes::algo_env_child_entry", "--exact", "--nocapture"])
                .env("HCOMM_TEST_ALGO_CHILD", "1")
                .env("HCOMM_ALGO", value)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap()
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(want), "HCOMM_ALGO={value:?}: {text}");
    }
}
