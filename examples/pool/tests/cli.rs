//! The built `hcomm-worker` and `hcomm-router` answer `--help` and `--version` (on every
//! subcommand), name their subcommands and flags, and name an unknown flag in the error.

use std::process::{Command, Output};

const WORKER: &str = env!("CARGO_BIN_EXE_hcomm-worker");
const ROUTER: &str = env!("CARGO_BIN_EXE_hcomm-router");

fn run(exe: &str, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .env_remove("POD_NAME")
        .output()
        .unwrap_or_else(|e| panic!("run {exe}: {e}"))
}

fn stdout_of_success(exe: &str, args: &[&str]) -> String {
    let out = run(exe, args);
    assert!(out.status.success(), "{exe} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_worker_answers_help_and_version() {
    let help = stdout_of_success(WORKER, &["--help"]);
    for part in [
        "--pod",
        "POD_NAME",
        "--agent-socket",
        hcomm_crds::contract::env::AGENT_SOCKET,
        "--step-ms",
    ] {
        assert!(help.contains(part), "{part} missing:\n{help}");
    }
    let version = stdout_of_success(WORKER, &["--version"]);
    assert_eq!(
        version.trim(),
        format!("hcomm-worker {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn the_router_names_its_subcommands_and_each_answers_help_and_version() {
    let help = stdout_of_success(ROUTER, &["--help"]);
    assert!(help.contains("serve") && help.contains("load"), "{help}");
    for sub in ["serve", "load"] {
        let help = stdout_of_success(ROUTER, &[sub, "--help"]);
        assert!(help.contains("--service"), "{sub}:\n{help}");
        let version = stdout_of_success(ROUTER, &[sub, "--version"]);
        assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
    }
}

#[test]
fn an_unknown_flag_is_named_in_the_error() {
    for (exe, args) in [
        (WORKER, &["--pod", "w", "--bogus-flag", "1"][..]),
        (ROUTER, &["load", "--service", "s", "--bogus-flag", "1"]),
    ] {
        let out = run(exe, args);
        assert_eq!(out.status.code(), Some(2), "{exe}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--bogus-flag"), "{exe}: {err}");
    }
}
