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

#[test]
fn demo_help_names_its_modes_environment_and_first_build() {
    help_names(
        DEMO,
        &["--help"],
        &[
            "Modes:",
            "--loopback",
            "network namespace",
            "HCOMM_E2E_KEEP_STATE",
            "KUBEBUILDER_ASSETS",
            "HCOMM_CACHE_DIR",
            "HCOMM_DEMO_LOG",
            "HCOMM_LOG_FORMAT",
            "--log-format",
            "10 minutes",
        ],
    );
}

/// A stand-in for `go build -v -o DIR/ PACKAGES...`: lists the packages, writes an empty
/// program per package (named as `go build` names it), and takes 11 s for the kube
/// module, past one progress interval. `go list -m` (KEDA's build asks where its module
/// is, for its manifests) answers `$FAKE_GO_MODULE_DIR`.
const FAKE_GO: &str = r#"#!/bin/sh
if [ "$1" = list ]; then echo "$FAKE_GO_MODULE_DIR"; exit 0; fi
out=""; prev=""; seen=0
for a in "$@"; do
  if [ "$seen" = 1 ]; then
    name=$(basename "$a")
    case "$name" in v[0-9]*) name=$(basename "$(dirname "$a")");; esac
    echo "$a"
    printf '#!/bin/sh\n' > "$out$name"; chmod +x "$out$name"
  fi
  if [ "$prev" = "-o" ]; then out="$a"; seen=1; fi
  prev="$a"
done
case "$(pwd -P)" in */kube) sleep 11;; esac
"#;

#[test]
fn building_the_kubernetes_binaries_reports_progress_while_it_runs() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("hcomm-cli-progress-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let go = bin.join("go");
    std::fs::write(&go, FAKE_GO).unwrap();
    std::fs::set_permissions(&go, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // KEDA's module as far as its build reads it: a CRD and the RBAC files.
    let module = dir.join("keda-module/config");
    for file in [
        "crd/bases/keda.sh_scaledobjects.yaml",
        "service_account/service_account.yaml",
        "rbac/role.yaml",
        "rbac/role_binding.yaml",
        "metrics-server/role.yaml",
        "metrics-server/role_binding.yaml",
    ] {
        let path = module.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "# a stand-in\n").unwrap();
    }
    let started = std::time::Instant::now();
    let out = Command::new(DEVCLUSTER)
        .arg("build")
        .env("PATH", path)
        .env("FAKE_GO_MODULE_DIR", dir.join("keda-module"))
        .env("HCOMM_CACHE_DIR", dir.join("cache"))
        .env_remove("KUBEBUILDER_ASSETS")
        .env_remove("HCOMM_HELM")
        .env_remove("HCOMM_PROMTOOL")
        .env_remove("HCOMM_PROMETHEUS")
        .env_remove("HCOMM_KEDA_DIR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{out:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    for part in [
        "building kube (etcd, kube-apiserver",
        "started (log:",
        "s elapsed, 7 packages compiled (last: k8s.io/kubernetes/cmd/kube-proxy)",
        "finished in 1",
        "building kwok",
        "building keda (keda-operator, keda-adapter)",
    ] {
        assert!(err.contains(part), "{part} missing:\n{err}");
    }
}
