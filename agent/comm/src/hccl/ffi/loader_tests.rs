//! LOADER tests, not HCCL tests: they build tiny stand-in shared libraries with `cc` that
//! export some of the symbol *names* (every body calls `abort()`, and nothing is ever
//! called) to prove the per-symbol resolution logic. HCCL itself never runs here.

use super::*;
use std::path::Path;
use std::process::Command;

fn build_stub(dir: &Path, file: &str, symbols: &[&str]) {
    let src = dir.join(format!("{file}.c"));
    let body: String = symbols
        .iter()
        .map(|s| format!("void {s}(void) {{ abort(); }}\n"))
        .collect();
    std::fs::write(&src, format!("#include <stdlib.h>\n{body}")).unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join(file))
        .arg(&src)
        .status()
        .expect("cc is needed for the loader tests");
    assert!(status.success());
}

/// A scratch directory removed when the test ends.
struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(name: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("hcomm-loader-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn only(dir: &Path) -> LibrarySearch {
    LibrarySearch {
        explicit_dir: Some(dir.into()),
        ascend_home: Some("/nonexistent/ascend".into()),
        system_fallbacks: false,
    }
}

#[test]
fn loader_reports_a_missing_library_with_every_path_searched() {
    let dir = tempdir("absent");
    let err = Api::load(&only(&dir)).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            HcclError::LibraryNotFound {
                library: ACL_LIB,
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains(&dir.join(ACL_LIB).display().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains("ASCEND_HOME_PATH=/nonexistent/ascend"),
        "{msg}"
    );
}

#[test]
fn loader_names_every_missing_required_symbol() {
    let dir = tempdir("missing-required");
    build_stub(&dir, ACL_LIB, AclSymbols::REQUIRED);
    let hccl: Vec<&str> = HcclSymbols::REQUIRED
        .iter()
        .copied()
        .filter(|s| *s != "HcclSend")
        .collect();
    build_stub(&dir, HCCL_LIB, &hccl);
    let err = Api::load(&only(&dir)).unwrap_err();
    match &err {
        HcclError::MissingSymbols {
            library, missing, ..
        } => {
            assert_eq!(*library, HCCL_LIB);
            assert_eq!(missing, &["HcclSend"]);
        }
        other => panic!("expected MissingSymbols, got {other}"),
    }
}

#[test]
fn loader_treats_absent_optional_symbols_as_unavailable_not_fatal() {
    let dir = tempdir("optional");
    build_stub(&dir, ACL_LIB, AclSymbols::REQUIRED);
    let mut hccl = HcclSymbols::REQUIRED.to_vec();
    hccl.push("HcclBarrier");
    build_stub(&dir, HCCL_LIB, &hccl);
    let api = Api::load(&only(&dir)).expect("all required symbols are present");
    let missing = api.unavailable();
    let expected: Vec<&str> = HcclSymbols::OPTIONAL
        .iter()
        .chain(AclSymbols::OPTIONAL)
        .copied()
        .filter(|s| *s != "HcclBarrier")
        .collect();
    assert_eq!(missing, expected);
    for name in [
        "HcclCreateSubCommConfig",
        "HcclCommInitRootInfoConfig",
        "HcclAlltoAllV",
        "HcclGetErrorString",
    ] {
        assert!(
            missing.contains(&name),
            "{name} should be unavailable: {missing:?}"
        );
    }
    assert!(!missing.contains(&"HcclBarrier"));
    assert!(missing.contains(&"aclrtSynchronizeStreamWithTimeout"));
    assert!(api.config_capability().is_none());
}
