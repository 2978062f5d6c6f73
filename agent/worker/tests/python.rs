//! Runs the Python package's pytest suite (`agent/worker/python/tests`) against the
//! library this checkout builds and the stand-in agent (the agent's real local API server
//! and worker placement, `examples/local_agent.rs`): epoch switch, load report, drain.
//! Both are built first with the cargo that runs this test, into the same target
//! directory. Needs `python3` with `pytest` (CI installs `python3-pytest`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The whole suite, building included, is bounded.
const DEADLINE: Duration = Duration::from_secs(900);

fn target_dir() -> PathBuf {
    // <target>/debug/deps/python-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned()
}

fn run_bounded(mut cmd: Command, what: &str, until: Instant) -> std::process::Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} did not finish within {DEADLINE:?}\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_python_package_switches_epochs_reports_load_and_drains_against_the_agent_api() {
    let until = Instant::now() + DEADLINE;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = target_dir();
    let mut build = Command::new(env!("CARGO"));
    build
        .current_dir(manifest)
        .args(["build", "--workspace", "--example", "local_agent", "--lib"])
        .env("CARGO_TARGET_DIR", &target);
    let out = run_bounded(build, "cargo build of the stand-in agent", until);
    assert!(
        out.status.success(),
        "building the stand-in agent failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let agent = target.join("debug/examples/local_agent");
    let lib = target.join("debug/libhcomm_worker.so");
    assert!(agent.is_file(), "{} missing", agent.display());
    assert!(lib.is_file(), "{} missing", lib.display());
    let mut pytest = Command::new("python3");
    pytest
        .current_dir(manifest.join("python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .env("HCOMM_LOCAL_AGENT", &agent)
        .env("HCOMM_WORKER_LIB", &lib);
    let out = run_bounded(pytest, "pytest", until);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pytest failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("3 passed"), "{stdout}");
}
