//! The built `hcomm-agent` binary answers `--help` and `--version` on every subcommand,
//! names its subcommands, and names an unknown flag in its error.

use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hcomm-agent"))
        .args(args)
        .output()
        .expect("run hcomm-agent")
}

#[test]
fn help_names_every_subcommand() {
    let out = agent(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for sub in ["run", "diagnose", "weights"] {
        assert!(help.contains(sub), "{sub} missing:\n{help}");
    }
}

#[test]
fn every_subcommand_answers_help_and_version() {
    let version = env!("CARGO_PKG_VERSION");
    for path in [
        &["run"][..],
        &["diagnose"],
        &["weights"],
        &["weights", "manifest"],
        &["weights", "generate"],
    ] {
        let out = agent(&[path, &["--help"]].concat());
        assert!(out.status.success(), "{path:?} --help: {out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Usage: hcomm-agent"), "{path:?}:\n{help}");
        let out = agent(&[path, &["--version"]].concat());
        assert!(out.status.success(), "{path:?} --version: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(version));
    }
    // `run --help` lists the flags the chart passes.
    let out = agent(&["run", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--probe-secret-file",
        "--weights-gc-grace-secs",
        "--socket",
        "NODE_NAME",
    ] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
    }
    let out = agent(&["weights", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("manifest") && help.contains("generate"),
        "{help}"
    );
}

#[test]
fn an_unknown_flag_is_named_in_the_error() {
    let out = agent(&["run", "--node-name", "n", "--bogus-flag", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--bogus-flag"), "{err}");
}
