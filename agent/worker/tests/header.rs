//! The checked-in C header must declare every exported function and every error code the
//! library returns: a C or Python caller reads the header, not the Rust.

use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

#[test]
fn every_exported_function_is_declared_in_the_header() {
    let ffi = read("src/ffi.rs");
    let header = read("include/hcomm_worker.h");
    let exported: Vec<&str> = ffi
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split("extern \"C\" fn ").nth(1))
        .filter_map(|l| l.split('(').next())
        .collect();
    assert!(exported.len() >= 12, "{exported:?}");
    for f in &exported {
        assert!(
            header.contains(&format!("{f}(")),
            "{f} is not in the header"
        );
    }
    let declarations = header.lines().filter(|l| {
        [
            "int hcomm_worker_",
            "void hcomm_worker_",
            "const char *hcomm_worker_",
        ]
        .iter()
        .any(|p| l.starts_with(p))
    });
    for line in declarations {
        let name = line
            .split('(')
            .next()
            .unwrap()
            .rsplit([' ', '*'])
            .next()
            .unwrap();
        assert!(
            exported.contains(&name),
            "the header declares {name}, the library lacks it"
        );
    }
}

#[test]
fn the_headers_error_codes_are_the_librarys() {
    let header = read("include/hcomm_worker.h");
    let code = |name: &str| -> i32 {
        let line = header
            .lines()
            .find(|l| l.contains(&format!("HCOMM_WORKER_{name} =")))
            .unwrap_or_else(|| panic!("{name} missing"));
        line.split('=')
            .nth(1)
            .unwrap()
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    use hcomm_worker::Error;
    let refused = Error::AgentRefused {
        op: "x",
        error: "y".into(),
    };
    assert_eq!(code("E_INVALID"), Error::Invalid(String::new()).code());
    assert_eq!(code("E_AGENT"), Error::AgentClosed.code());
    assert_eq!(code("E_REFUSED"), refused.code());
    let timeout = Error::Timeout {
        what: "x",
        after: std::time::Duration::ZERO,
    };
    assert_eq!(code("E_TIMEOUT"), timeout.code());
    assert_eq!(code("E_COMM"), Error::BadPlacement(String::new()).code());
    let hccl = Error::Hccl(hcomm_comm::HcclError::BuilderPanicked { epoch: 1 });
    assert_eq!(code("E_HCCL"), hccl.code());
    let epoch = Error::Epoch(hcomm_worker::epochs::EpochRefusal::NothingPrepared);
    assert_eq!(code("E_EPOCH"), epoch.code());
    assert_eq!(code("E_BUFFER"), Error::BufferTooSmall { needed: 1 }.code());
    assert_eq!(code("E_PANIC"), hcomm_worker::ffi::PANICKED);
}
