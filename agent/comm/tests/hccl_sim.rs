//! The HCCL backend against the conformance simulator (`e2e/hccl-sim`), multi-process: each
//! rank is a real `hcomm-hccl-check` process that `dlopen`s the simulator as `libhccl.so` /
//! `libascendcl.so` and drives the backend's public API, as a worker would. The simulator
//! records every misuse of the runtime (device use after free, double free, mismatched
//! collectives) in a violations file each test requires empty unless it provokes one.
//!
//! Every process has a deadline; a hang is a test failure, never a stuck CI job.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hcomm_crds::contract::env;
use hcomm_hccl_sim::{FAULT_ENV, VIOLATIONS_ENV};

const CHECK: &str = env!("CARGO_BIN_EXE_hcomm-hccl-check");
/// The most any rank process may run.
const PROCESS_DEADLINE: Duration = Duration::from_secs(60);

/// The simulator's shared object, built by cargo as a dev-dependency of this crate.
fn simulator() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    let mut found: Vec<PathBuf> = [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libhcomm_hccl_sim") && n.ends_with(".so"))
        })
        .collect();
    found.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    found
        .pop()
        .expect("libhcomm_hccl_sim.so next to the test executable (a dev-dependency)")
}

/// A scratch directory: the simulator under the backend's library names, root-info files,
/// the violations file. Removed at the end.
struct Bed {
    dir: PathBuf,
}

impl Bed {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("hcomm-hccl-sim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let so = simulator();
        for lib in ["libhccl.so", "libascendcl.so"] {
            std::os::unix::fs::symlink(&so, dir.join(lib)).unwrap();
        }
        Self { dir }
    }

    fn violations(&self) -> String {
        std::fs::read_to_string(self.dir.join("violations")).unwrap_or_default()
    }

    /// Starts rank `rank` of `world` with extra arguments and environment.
    fn rank(&self, rank: u32, world: u32, args: &[&str], envs: &[(&str, &str)]) -> Rank {
        let mut cmd = Command::new(CHECK);
        cmd.arg("--lib-dir")
            .arg(&self.dir)
            .args(["--rank", &rank.to_string(), "--world", &world.to_string()])
            .arg("--root-file")
            .arg(self.dir.join("root"))
            .args(["--root-wait-secs", "20", "--init-timeout-secs", "30"])
            .args(args)
            .env(VIOLATIONS_ENV, self.dir.join("violations"))
            .env(env::HCCL_CONNECT_TIMEOUT, "5")
            .env_remove(FAULT_ENV)
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Rank {
            rank,
            child: cmd.spawn().expect("start hcomm-hccl-check"),
            started: Instant::now(),
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Rank {
    rank: u32,
    child: Child,
    started: Instant,
}

/// How a rank process ended.
#[derive(Debug)]
struct Ended {
    rank: u32,
    code: Option<i32>,
    /// The last line printed (the verdict).
    verdict: String,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Rank {
    fn wait(mut self) -> Ended {
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if self.started.elapsed() > PROCESS_DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "rank {} still running after {PROCESS_DEADLINE:?}",
                    self.rank
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = self.started.elapsed();
        let (mut out, mut err) = (String::new(), String::new());
        let _ = self.child.stdout.take().unwrap().read_to_string(&mut out);
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        Ended {
            rank: self.rank,
            code: status.code(),
            verdict: out.lines().last().unwrap_or_default().to_string(),
            stdout: out.clone(),
            stderr: err,
            took,
        }
    }
}

fn run_all(ranks: Vec<Rank>) -> Vec<Ended> {
    ranks.into_iter().map(Rank::wait).collect()
}

fn assert_ok(e: &Ended) {
    assert!(
        e.code == Some(0) && e.verdict.starts_with("ok "),
        "rank {} failed: {e:#?}",
        e.rank
    );
}

fn assert_no_violations(bed: &Bed) {
    let v = bed.violations();
    assert!(v.is_empty(), "the simulator recorded violations:\n{v}");
}

fn all_reduce_on(world: u32, name: &str, extra: &[&str]) {
    let bed = Bed::new(name);
    let ranks = (0..world).map(|r| bed.rank(r, world, extra, &[])).collect();
    for e in run_all(ranks) {
        assert_ok(&e);
        assert!(e.verdict.contains(&format!("world={world}")), "{e:?}");
    }
    assert_no_violations(&bed);
}

#[test]
fn all_reduce_is_correct_across_two_ranks() {
    all_reduce_on(2, "two", &["--ops", "4", "--count", "4096"]);
}

#[test]
fn all_reduce_is_correct_across_four_ranks_through_two_epochs_with_health_checks() {
    all_reduce_on(4, "four", &["--ops", "2", "--epochs", "2", "--health"]);
}

#[test]
fn the_benchmark_prints_one_row_per_size_on_rank_zero() {
    let bed = Bed::new("bench");
    let args = [
        "--ops",
        "1",
        "--bench",
        "--min-bytes",
        "4096",
        "--max-bytes",
        "65536",
        "--factor",
        "4",
        "--iters",
        "2",
        "--warmup",
        "1",
    ];
    let ranks = vec![bed.rank(0, 2, &args, &[]), bed.rank(1, 2, &args, &[])];
    let mut ended = run_all(ranks).into_iter();
    let (root, other) = (ended.next().unwrap(), ended.next().unwrap());
    assert_ok(&root);
    assert_ok(&other);
    assert_no_violations(&bed);
    let rows = |e: &Ended| {
        e.stdout
            .lines()
            .filter(|l| l.starts_with("bench bytes="))
            .map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&root),
        ["bytes=4096", "bytes=16384", "bytes=65536"],
        "{root:#?}"
    );
    assert!(rows(&other).is_empty(), "{other:#?}");
}

#[test]
fn an_op_hung_past_the_op_timeout_is_a_named_error_and_no_buffer_in_use_is_freed() {
    let bed = Bed::new("hang");
    // HCCL's own exec timeout (30 s) is far past the backend's op timeout (1 s): the device
    // would still be running the collective when the backend gives up on it.
    let args = [
        "--op-timeout-ms",
        "1000",
        "--exec-timeout-secs",
        "30",
        "--ops",
        "1",
    ];
    let ranks = vec![
        bed.rank(0, 2, &args, &[]),
        bed.rank(1, 2, &args, &[(FAULT_ENV, "hang_op=0")]),
    ];
    let ended = run_all(ranks);
    for e in &ended {
        assert_eq!(e.code, Some(1), "{e:#?}");
        assert!(
            e.verdict.starts_with("error stage=all-reduce-e1-0 "),
            "{e:#?}"
        );
        assert!(
            e.verdict.contains("destroyed before any buffer was freed"),
            "{e:#?}"
        );
        assert!(e.took < Duration::from_secs(20), "{e:#?}");
    }
    // The hung rank gives up at its op timeout.
    let hung = &ended[1];
    assert!(
        hung.verdict
            .contains("did not finish within the op timeout"),
        "{hung:#?}"
    );
    // Its peer waits for the hung rank's contribution: it reaches its own op timeout, or,
    // when it started later, sees the hung rank abort first — a named failure either way.
    let peer = &ended[0];
    assert!(
        peer.verdict
            .contains("did not finish within the op timeout")
            || (peer.verdict.contains("category=aborted")
                && peer.stderr.contains("rank 1 did not contribute")),
        "{peer:#?}"
    );
    assert_no_violations(&bed);
}

#[test]
fn a_peer_dying_mid_init_fails_the_others_with_a_named_error_within_the_connect_deadline() {
    let bed = Bed::new("die");
    let ranks = vec![
        bed.rank(0, 3, &[], &[]),
        bed.rank(1, 3, &[], &[]),
        bed.rank(2, 3, &[], &[(FAULT_ENV, "die_in_init")]),
    ];
    let ended = run_all(ranks);
    assert_ne!(ended[2].code, Some(0), "{:#?}", ended[2]);
    for e in &ended[..2] {
        assert_eq!(e.code, Some(1), "{e:#?}");
        assert!(
            e.verdict
                .starts_with("error stage=init-e1 category=HcclCallFailed"),
            "{e:#?}"
        );
        assert!(e.verdict.contains("HcclCommInitRootInfo"), "{e:#?}");
        // HCCL_CONNECT_TIMEOUT is 5 s; the process also loads, binds and waits for the file.
        assert!(e.took < Duration::from_secs(12), "{e:#?}");
    }
    assert_no_violations(&bed);
}

#[test]
fn a_root_dying_mid_init_fails_the_others_by_the_connect_deadline() {
    let bed = Bed::new("root-dies");
    let ranks = vec![
        bed.rank(0, 2, &[], &[(FAULT_ENV, "die_in_init")]),
        bed.rank(1, 2, &[], &[]),
    ];
    let ended = run_all(ranks);
    let e = &ended[1];
    assert_eq!(e.code, Some(1), "{e:#?}");
    assert!(
        e.verdict
            .starts_with("error stage=init-e1 category=HcclCallFailed"),
        "{e:#?}"
    );
    // Connected before the root died: the broken rendezvous at once; after: refused until
    // HCCL_CONNECT_TIMEOUT (5 s).
    let at_once = e.verdict.contains("HCCL_E_TCP_TRANSFER");
    let at_deadline = e.verdict.contains("HCCL_E_TCP_CONNECT") && e.took >= Duration::from_secs(4);
    assert!(at_once || at_deadline, "{e:#?}");
    assert!(e.took < Duration::from_secs(15), "{e:#?}");
}

#[test]
fn a_rank_announcing_a_wrong_device_ip_fails_init_for_everyone() {
    let bed = Bed::new("wrong-ip");
    let ranks = vec![
        bed.rank(0, 2, &[], &[]),
        bed.rank(1, 2, &[], &[(FAULT_ENV, "wrong_device_ip")]),
    ];
    for e in run_all(ranks) {
        assert_eq!(e.code, Some(1), "{e:#?}");
        assert!(e.verdict.contains("HCCL_E_TCP_CONNECT"), "{e:#?}");
    }
}

#[test]
fn a_communicator_past_the_hccl_memory_budget_is_refused_with_the_reason() {
    let bed = Bed::new("budget");
    // 64 MB buffers: 128 MB per communicator; make-before-break holds two at the switch.
    let refused = bed
        .rank(
            0,
            1,
            &["--epochs", "2", "--buffsize-mb", "64", "--budget-mb", "200"],
            &[],
        )
        .wait();
    assert_eq!(refused.code, Some(1), "{refused:#?}");
    assert!(
        refused
            .verdict
            .starts_with("error stage=init-e2 category=HcclMemoryBudgetExceeded"),
        "{refused:#?}"
    );
    assert!(
        refused.verdict.contains("needs 134217728 bytes"),
        "{refused:#?}"
    );
    let fits = bed
        .rank(
            0,
            1,
            &["--epochs", "2", "--buffsize-mb", "64", "--budget-mb", "300"],
            &[],
        )
        .wait();
    assert_ok(&fits);
    assert_no_violations(&bed);
}

#[test]
fn an_async_error_is_reported_by_the_health_check() {
    let bed = Bed::new("async");
    let args = ["--ops", "1", "--health"];
    let fault = [(FAULT_ENV, "async_error=1")];
    let ranks = vec![bed.rank(0, 2, &args, &fault), bed.rank(1, 2, &args, &fault)];
    for e in run_all(ranks) {
        assert_eq!(e.code, Some(1), "{e:#?}");
        assert!(
            e.verdict
                .starts_with("error stage=health-e1 category=HcclAsyncError"),
            "{e:#?}"
        );
        assert!(e.verdict.contains("HCCL_E_REMOTE"), "{e:#?}");
    }
    assert_no_violations(&bed);
}

#[test]
fn collectives_that_do_not_match_across_ranks_fail_instead_of_combining() {
    let bed = Bed::new("mismatch");
    let ranks = vec![
        bed.rank(0, 2, &["--count", "4", "--ops", "1"], &[]),
        bed.rank(1, 2, &["--count", "8", "--ops", "1"], &[]),
    ];
    for e in run_all(ranks) {
        assert_eq!(e.code, Some(1), "{e:#?}");
        assert!(
            e.verdict.starts_with("error stage=all-reduce-e1-0 "),
            "{e:#?}"
        );
    }
    assert!(
        bed.violations().contains("mismatched_collective"),
        "{}",
        bed.violations()
    );
}
