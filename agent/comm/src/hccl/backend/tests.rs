//! Unit tests of the HCCL backend object.

use super::*;

#[test]
fn creating_the_backend_without_an_ascend_runtime_fails_at_once_naming_library_paths_and_ascend_home()
 {
    let mut cfg = HcclBackendConfig::new("pool", 0);
    cfg.search = LibrarySearch {
        explicit_dir: Some("/nonexistent/hcomm-explicit".into()),
        ascend_home: Some("/nonexistent/ascend-home".into()),
        system_fallbacks: true,
    };
    let start = std::time::Instant::now();
    let err = match HcclBackend::create(cfg) {
        Ok(_) => {
            eprintln!(
                "an Ascend runtime is installed here; the absent-library path cannot be shown"
            );
            return;
        }
        Err(e) => e,
    };
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "must fail at once"
    );
    let msg = err.to_string();
    assert_eq!(err.category(), "HcclLibraryNotFound");
    for part in [
        "libascendcl.so",
        "/nonexistent/hcomm-explicit/libascendcl.so",
        "/nonexistent/ascend-home/lib64/libascendcl.so",
        "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
        "ASCEND_HOME_PATH=/nonexistent/ascend-home",
    ] {
        assert!(msg.contains(part), "missing {part:?} in: {msg}");
    }
}

#[test]
fn default_config_reads_ascend_home_path_from_the_environment() {
    let cfg = HcclBackendConfig::new("pool", 3);
    assert_eq!(
        cfg.search.ascend_home,
        std::env::var("ASCEND_HOME_PATH")
            .ok()
            .filter(|s| !s.is_empty())
    );
    assert!(cfg.search.system_fallbacks);
    assert_eq!(cfg.device, 3);
}
