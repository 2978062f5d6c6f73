//! The built `demo`, `devcluster` and `scaleout-bench` binaries (`cargo demo`, ...) answer
//! `--help` and `--version` without starting anything, list their modes, options and
//! subcommands, and name an unknown flag in their error.

use std::process::{Command, Output};

fn run(exe: &str, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {exe}: {e}"))
}

fn help_names(exe: &str, args: &[&str], parts: &[&str]) {
    let out = run(exe, args);
    assert!(out.status.success(), "{exe} {args:?}: {out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for part in parts {
        assert!(
            help.contains(part),
            "{part} missing in {exe} {args:?}:\n{help}"
        );
    }
}

fn version_is_the_workspace_version(exe: &str, args: &[&str]) {
    let out = run(exe, args);
    assert!(out.status.success(), "{exe} {args:?}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(env!("CARGO_PKG_VERSION")),
        "{exe} {args:?}: {text}"
    );
}

fn unknown_flag_is_named(exe: &str, args: &[&str]) {
    let out = run(exe, args);
    assert_eq!(out.status.code(), Some(2), "{exe} {args:?}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--bogus-flag"), "{exe} {args:?}: {err}");
}

const DEMO: &str = env!("CARGO_BIN_EXE_demo");
const DEVCLUSTER: &str = env!("CARGO_BIN_EXE_devcluster");
const SCALEOUT_BENCH: &str = env!("CARGO_BIN_EXE_scaleout-bench");

#[test]
fn demo_help_lists_its_modes_and_options() {
    help_names(
        DEMO,
        &["--help"],
        &[
            "cargo demo",
            "--loopback",
            "--hosts",
            "--weights-mib",
            "--hold-secs",
        ],
    );
    version_is_the_workspace_version(DEMO, &["--version"]);
    unknown_flag_is_named(DEMO, &["--bogus-flag"]);
}

#[test]
fn devcluster_help_lists_its_subcommands_and_each_answers_help() {
    help_names(
        DEVCLUSTER,
        &["--help"],
        &["up", "status", "down", "build", "kubectl", "--state-dir"],
    );
    for sub in ["up", "status", "down", "build", "kubectl"] {
        help_names(DEVCLUSTER, &[sub, "--help"], &["cargo devcluster", sub]);
        version_is_the_workspace_version(DEVCLUSTER, &[sub, "--version"]);
    }
    unknown_flag_is_named(DEVCLUSTER, &["up", "--bogus-flag"]);
}

#[test]
fn scaleout_bench_help_lists_its_options() {
    help_names(
        SCALEOUT_BENCH,
        &["--help"],
        &[
            "cargo scaleout-bench",
            "--size-mib",
            "--rate-mbit",
            "--joiners",
            "--strategies",
            "--output",
            "--link-check",
            "--no-build",
        ],
    );
    version_is_the_workspace_version(SCALEOUT_BENCH, &["--version"]);
    unknown_flag_is_named(SCALEOUT_BENCH, &["--bogus-flag"]);
}
