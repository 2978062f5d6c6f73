//! `hcomm-agent weights generate|manifest` as a user runs them: a generated set is
//! reproducible (same size and seed → same digest, run after run), another seed gives
//! another digest, the printed digest is the library's `manifest_digest`, and the `--json`
//! manifest hashes to it.

mod weights_support;

use std::process::Command;

use hcomm_agent::weights::{ChunkHash, DEFAULT_CHUNK_SIZE, Digest, Manifest, manifest_digest};
use weights_support::TempDir;

/// stdout and stderr of a successful run.
fn run(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hcomm-agent"))
        .args(args)
        .output()
        .expect("run hcomm-agent");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "hcomm-agent {args:?}: {stderr}");
    (String::from_utf8(out.stdout).expect("UTF-8 output"), stderr)
}

fn agent(args: &[&str]) -> String {
    run(args).0
}

fn generate(dir: &std::path::Path, seed: &str) -> String {
    agent(&[
        "weights",
        "generate",
        &dir.display().to_string(),
        "--size",
        "9MiB",
        "--seed",
        seed,
        "--files",
        "3",
    ])
}

#[test]
fn generated_sets_have_stable_digests_that_manifest_prints() {
    let tmp = TempDir::new("cli");
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    let said = generate(&a, "11");
    generate(&b, "11");
    generate(&c, "12");
    let digest = |d: &std::path::Path| agent(&["weights", "manifest", &d.display().to_string()]);
    let da = digest(&a);
    assert!(da.starts_with("sha256:") && da.trim().len() == 71, "{da}");
    assert_eq!(da, digest(&b), "same size and seed, different digest");
    assert_ne!(da, digest(&c), "another seed, same digest");
    assert_eq!(
        da.trim(),
        manifest_digest(&a, DEFAULT_CHUNK_SIZE).unwrap().to_string()
    );
    // `generate` reports the digest to put in spec.weights.digest.
    assert_eq!(said.lines().last(), Some(da.trim()));

    // --json prints the canonical manifest: its SHA-256 is the digest; other chunk sizes
    // give other digests.
    let json = agent(&["weights", "manifest", &a.display().to_string(), "--json"]);
    let bytes = json
        .strip_suffix('\n')
        .expect("newline-terminated")
        .as_bytes();
    assert_eq!(Digest::of(bytes).to_string(), da.trim());
    let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 3);
    let with_chunks = |size: &str| {
        run(&[
            "weights",
            "manifest",
            &a.display().to_string(),
            "--chunk-size",
            size,
        ])
    };
    // A size no agent imports with gets a note on stderr; the former default does not.
    let (small, note) = with_chunks("1MiB");
    assert_ne!(small, da);
    assert!(
        note.contains("agents import a declared source only with chunks of 2 MiB or 4 MiB"),
        "{note}"
    );
    let (former, quiet) = with_chunks("4MiB");
    assert_ne!(former, da);
    assert_eq!(quiet, "");
    // BLAKE3 chunks by default (a v2 manifest); sha256 gives the v1 manifest and digest
    // that versions before BLAKE3 printed for the same directory.
    assert_eq!(v["format"], "hcomm-weights/v2");
    assert_eq!(v["chunk_hash"], "blake3");
    let v1 = agent(&[
        "weights",
        "manifest",
        &a.display().to_string(),
        "--chunk-hash",
        "sha256",
    ]);
    assert_ne!(v1, da);
    assert_eq!(
        v1.trim(),
        Manifest::build_with(&a, DEFAULT_CHUNK_SIZE, ChunkHash::Sha256)
            .unwrap()
            .digest()
            .to_string()
    );

    // Generating into a non-empty directory is refused (foreign files would enter the set).
    let out = Command::new(env!("CARGO_BIN_EXE_hcomm-agent"))
        .args([
            "weights",
            "generate",
            &a.display().to_string(),
            "--size",
            "1",
            "--seed",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn run_without_a_secret_file_refuses_to_start_and_names_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_hcomm-agent"))
        .args(["run", "--node-name", "n1"])
        .env_remove("KUBECONFIG")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for part in [
        "--probe-secret-file",
        "Secret <release>-agent",
        "--insecure-default-secret",
    ] {
        assert!(err.contains(part), "{part:?} missing in {err}");
    }
}
