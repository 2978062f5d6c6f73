//! The built `hcomm-bench` answers `--help` and `--version` (also as `worker`), names its
//! `worker` mode and nccl-tests flags, and names an unknown flag in its error.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hcomm-bench"))
        .args(args)
        .output()
        .expect("run hcomm-bench")
}

#[test]
fn help_names_the_worker_mode_and_the_nccl_tests_flags() {
    for args in [&["--help"][..], &["worker", "--help"]] {
        let out = bench(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        for part in ["--min-bytes", "-b", "--max-bytes", "--factor", "--ops"] {
            assert!(help.contains(part), "{part} missing in {args:?}:\n{help}");
        }
    }
    let help = String::from_utf8_lossy(&bench(&["--help"]).stdout).into_owned();
    assert!(
        help.contains("worker") && help.contains("--ranks"),
        "{help}"
    );
    let help = String::from_utf8_lossy(&bench(&["worker", "--help"]).stdout).into_owned();
    assert!(help.contains("--root-info-file"), "{help}");
}

#[test]
fn version_is_the_workspace_version() {
    for args in [&["--version"][..], &["worker", "--version"]] {
        let out = bench(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    }
}

#[test]
fn an_unknown_flag_is_named_in_the_error() {
    let out = bench(&["--ranks", "2", "--bogus-flag", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bogus-flag"));
}
