//! The built `hcomm-operator` binary answers `--help` and `--version`, shows where each
//! setting falls back to, and names an unknown flag in its error.

use std::process::{Command, Output};

fn operator(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hcomm-operator"))
        .args(args)
        .env_remove("HCOMM_LEASE_NAME")
        .output()
        .expect("run hcomm-operator")
}

#[test]
fn help_lists_the_flags_and_their_environment_variables() {
    let out = operator(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for part in [
        "--metrics-addr",
        "--lease-namespace",
        "HCOMM_LEASE_NAME",
        "--version",
    ] {
        assert!(help.contains(part), "{part} missing:\n{help}");
    }
}

#[test]
fn version_is_the_workspace_version() {
    let out = operator(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!("hcomm-operator {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_environment_variable_fills_its_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_hcomm-operator"))
        .args(["--help"])
        .env("HCOMM_LEASE_NAME", "from-env")
        .output()
        .expect("run hcomm-operator");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("HCOMM_LEASE_NAME=from-env"), "{help}");
}

#[test]
fn an_unknown_flag_is_named_in_the_error() {
    let out = operator(&["--bogus-flag", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--bogus-flag"), "{err}");
}
