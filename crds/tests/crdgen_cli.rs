//! The built `crdgen` answers `--help` and `--version` and names an unknown flag.

use std::process::Command;

fn crdgen(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_crdgen"))
        .args(args)
        .output()
        .expect("run crdgen")
}

#[test]
fn help_and_version_answer_without_writing() {
    let out = crdgen(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--check"));
    let out = crdgen(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn an_unknown_flag_is_named_in_the_error() {
    let out = crdgen(&["--bogus-flag"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bogus-flag"));
}
