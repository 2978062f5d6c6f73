//! Finding or building the control-plane binaries.
//!
//! First choice is `KUBEBUILDER_ASSETS` (controller-runtime envtest's
//! convention: a folder with etcd, kube-apiserver and kubectl, as
//! `setup-envtest` leaves it). Whatever is missing there is built once with
//! `go build` from the pinned Go modules in `e2e/k8s/<module>` into a cache
//! folder outside the repository, keyed by the pinned version and a hash of
//! go.mod and go.sum, so later runs and fresh clones on the same machine reuse
//! it. A lock file keeps two concurrent test binaries from building at once,
//! and a build lands under its final name only when complete (rename).
//!
//! Size: every pinned module and the one cached build they share, with its tests.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use tracing::{info, warn};

use super::error::{Error, Result};
use super::process::log_tail;
use super::progress::{PROGRESS_EVERY, report, wait_with_progress};

mod keda_manifests;

pub use keda_manifests::{KEDA_CRDS, KEDA_RBAC};

/// Deadline of one module's `go build` (a cold Kubernetes build takes ~10 minutes on 2
/// cores; a slow disk or a first module download several times that).
const BUILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(90 * 60);

/// Where the Go modules that pin the binaries live.
const MODULES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/k8s");

/// A Go module that pins some binaries.
#[derive(Debug, Clone, Copy)]
struct GoModule {
    /// Folder under `e2e/k8s/` and prefix of its cache folder.
    name: &'static str,
    /// The module whose version names the build.
    pinned: &'static str,
    /// (binary name, main package) pairs.
    binaries: &'static [(&'static str, &'static str)],
}

const KUBE: GoModule = GoModule {
    name: "kube",
    pinned: "k8s.io/kubernetes",
    binaries: &[
        ("etcd", "go.etcd.io/etcd/server/v3"),
        ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
        (
            "kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
        ),
        ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
        ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
        // The testbed's real nodes (`testbed::realnode`); same pin as the control plane.
        ("kubelet", "k8s.io/kubernetes/cmd/kubelet"),
        ("kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy"),
    ],
};

const KWOK: GoModule = GoModule {
    name: "kwok",
    pinned: "sigs.k8s.io/kwok",
    binaries: &[("kwok", "sigs.k8s.io/kwok/cmd/kwok")],
};

const HELM: GoModule = GoModule {
    name: "helm",
    pinned: "helm.sh/helm/v3",
    binaries: &[("helm", "helm.sh/helm/v3/cmd/helm")],
};

/// Prometheus: promtool, its linter, for the tests that check `/metrics` expositions, and
/// the server the autoscaling chain scrapes the members with. Not part of the control
/// plane, but brought the same way so a fresh machine needs no package installed by hand
/// (Debian's `prometheus` package lacks Kubernetes service discovery).
const PROMETHEUS: GoModule = GoModule {
    name: "prometheus",
    pinned: "github.com/prometheus/prometheus",
    binaries: &[
        ("promtool", "github.com/prometheus/prometheus/cmd/promtool"),
        (
            "prometheus",
            "github.com/prometheus/prometheus/cmd/prometheus",
        ),
    ],
};

/// KEDA's operator and its external metrics API server (`adapter`), for the autoscaling
/// chain on the testbed; its build keeps KEDA's manifests beside them (`keda_manifests`).
const KEDA: GoModule = GoModule {
    name: "keda",
    pinned: "github.com/kedacore/keda/v2",
    binaries: &[
        ("keda-operator", "github.com/kedacore/keda/v2/cmd/operator"),
        ("keda-adapter", "github.com/kedacore/keda/v2/cmd/adapter"),
    ],
};

/// The kwok stages (see `e2e/k8s/kwok/stages.yaml`): Nodes become Ready, Pods
/// Running, and Pod readiness follows readiness gates as a kubelet's would.
pub const KWOK_STAGES: &str = include_str!("../../k8s/kwok/stages.yaml");

/// Which binaries are needed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    /// kube-controller-manager and kube-scheduler.
    pub controllers: bool,
    /// kwok.
    pub kwok: bool,
}

/// Paths of the binaries a control plane runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// etcd.
    pub etcd: PathBuf,
    /// kube-apiserver.
    pub kube_apiserver: PathBuf,
    /// kubectl.
    pub kubectl: PathBuf,
    /// kube-controller-manager, when needed.
    pub kube_controller_manager: Option<PathBuf>,
    /// kube-scheduler, when needed.
    pub kube_scheduler: Option<PathBuf>,
    /// kwok, when needed.
    pub kwok: Option<PathBuf>,
}

/// Finds every needed binary, building what `KUBEBUILDER_ASSETS` lacks.
/// Blocking: a cold build takes many minutes.
pub fn resolve(needs: Needs) -> Result<Binaries> {
    let assets = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from);
    let from_assets = |binary: &str| {
        assets
            .as_ref()
            .map(|dir| dir.join(binary))
            .filter(|path| path.is_file())
    };
    let mut kube_dir = None;
    let mut kube = |binary: &'static str| -> Result<PathBuf> {
        if let Some(path) = from_assets(binary) {
            return Ok(path);
        }
        if kube_dir.is_none() {
            kube_dir = Some(ensure_built(KUBE)?);
        }
        Ok(kube_dir.as_ref().expect("just set").join(binary))
    };
    let etcd = kube("etcd")?;
    let kube_apiserver = kube("kube-apiserver")?;
    let kubectl = kube("kubectl")?;
    let (kube_controller_manager, kube_scheduler) = if needs.controllers {
        (
            Some(kube("kube-controller-manager")?),
            Some(kube("kube-scheduler")?),
        )
    } else {
        (None, None)
    };
    let kwok = if needs.kwok {
        match from_assets("kwok") {
            Some(path) => Some(path),
            None => Some(ensure_built(KWOK)?.join("kwok")),
        }
    } else {
        None
    };
    Ok(Binaries {
        etcd,
        kube_apiserver,
        kubectl,
        kube_controller_manager,
        kube_scheduler,
        kwok,
    })
}

/// The kubelet of the testbed's real nodes: `kubelet` in `KUBEBUILDER_ASSETS` when there
/// (envtest's folder has none, but a user's may), else built with the control plane from
/// `e2e/k8s/kube` (blocking).
pub fn kubelet() -> Result<PathBuf> {
    let assets = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from);
    if let Some(path) = assets
        .map(|dir| dir.join("kubelet"))
        .filter(|p| p.is_file())
    {
        return Ok(path);
    }
    Ok(ensure_built(KUBE)?.join("kubelet"))
}

/// kube-proxy for the real nodes, beside [`kubelet`].
pub fn kube_proxy() -> Result<PathBuf> {
    Ok(kubelet()?.with_file_name("kube-proxy"))
}

/// Helm for the chart tests: `$HCOMM_HELM` when set, else the pinned version built from
/// `e2e/k8s/helm` into the cache (blocking: a cold build takes minutes).
pub fn helm() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("HCOMM_HELM").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    Ok(ensure_built(HELM)?.join("helm"))
}

/// promtool for the metrics tests: `$HCOMM_PROMTOOL` when set, else the pinned Prometheus
/// release built from `e2e/k8s/prometheus` into the cache (blocking: a cold build takes a
/// few minutes; concurrent callers wait on the build lock and then share the result).
pub fn promtool() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("HCOMM_PROMTOOL").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    Ok(ensure_built(PROMETHEUS)?.join("promtool"))
}

/// The Prometheus server of the autoscaling chain: `$HCOMM_PROMETHEUS` when set, else the
/// pinned release built with promtool (see [`promtool`]).
pub fn prometheus() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("HCOMM_PROMETHEUS").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    Ok(ensure_built(PROMETHEUS)?.join("prometheus"))
}

/// `keda-operator`, `keda-adapter`, [`KEDA_CRDS`] and [`KEDA_RBAC`]: in `$HCOMM_KEDA_DIR`,
/// else built from `e2e/k8s/keda` into the cache (blocking: ~10 min cold on 2 cores).
pub fn keda() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("HCOMM_KEDA_DIR").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    ensure_built(KEDA)
}

/// The Kubernetes version the kube module pins, e.g. `v1.35.4`.
pub fn kubernetes_version() -> Result<String> {
    pinned_version(KUBE)
}

/// The cache root: `$HCOMM_CACHE_DIR`, else `${XDG_CACHE_HOME:-$HOME/.cache}/hcomm`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("HCOMM_CACHE_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("hcomm")
}

/// Returns the folder holding the module's binaries, building it first if needed.
fn ensure_built(module: GoModule) -> Result<PathBuf> {
    let source = Path::new(MODULES_DIR).join(module.name);
    let key = cache_key(module, &source)?;
    let root = cache_root().join("k8s");
    let done = root.join(&key);
    if is_complete(module, &done) {
        return Ok(done);
    }
    fs::create_dir_all(&root).map_err(Error::io("create cache dir", &root))?;
    let lock_path = root.join(format!(".{}.lock", module.name));
    let lock = File::create(&lock_path).map_err(Error::io("create lock", &lock_path))?;
    info!(lock = %lock_path.display(), "taking the build lock (waits while another process builds)");
    if lock.try_lock().is_err() {
        report(&format!(
            "waiting for another process's build of the {} binaries (lock {})",
            module.name,
            lock_path.display()
        ));
        lock.lock().map_err(Error::io("lock", &lock_path))?;
    }
    // Someone else may have built it while we waited.
    if is_complete(module, &done) {
        return Ok(done);
    }
    // Leftovers of builds killed midway (we hold the lock, so none runs).
    let prefix = format!(".tmp-{key}-");
    for entry in fs::read_dir(&root).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    let staging = root.join(format!("{prefix}{}", std::process::id()));
    fs::create_dir_all(&staging).map_err(Error::io("create build dir", &staging))?;
    let result = go_build(
        module,
        &source,
        &staging,
        &root.join(format!("{key}.build.log")),
    )
    .and_then(|()| {
        let _ = fs::remove_dir_all(&done);
        fs::rename(&staging, &done).map_err(Error::io("rename build", &done))
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    drop(lock);
    result.map(|()| done)
}

fn is_complete(module: GoModule, dir: &Path) -> bool {
    (module.name != KEDA.name || keda_manifests::present(dir))
        && module
            .binaries
            .iter()
            .all(|(binary, _)| dir.join(binary).is_file())
}

/// `<module>-<version>-<hash of go.mod, go.sum and build flags>`.
fn cache_key(module: GoModule, source: &Path) -> Result<String> {
    let mut hash = Fnv64::default();
    for file in ["go.mod", "go.sum"] {
        let path = source.join(file);
        let bytes = fs::read(&path).map_err(Error::io("read", &path))?;
        hash.write(&bytes);
    }
    hash.write(ldflags(module, &pinned_version(module)?).as_bytes());
    Ok(format!(
        "{}-{}-{:016x}",
        module.name,
        pinned_version(module)?,
        hash.0
    ))
}

/// The version of `module.pinned` in the module's go.mod.
fn pinned_version(module: GoModule) -> Result<String> {
    let path = Path::new(MODULES_DIR).join(module.name).join("go.mod");
    let text = fs::read_to_string(&path).map_err(Error::io("read", &path))?;
    text.lines()
        .filter_map(|line| {
            let mut words = line.trim().trim_start_matches("require").split_whitespace();
            (words.next() == Some(module.pinned)).then(|| words.next())?
        })
        .next()
        .map(str::to_owned)
        .ok_or_else(|| Error::MissingBinary {
            binary: module.binaries[0].0,
            reason: format!("{} has no requirement on {}", path.display(), module.pinned),
        })
}

/// Linker flags: strip symbols, and stamp the Kubernetes version where the
/// binaries report it (otherwise `kubectl version` says v0.0.0-master).
fn ldflags(module: GoModule, version: &str) -> String {
    let mut flags = "-s -w".to_owned();
    if module.name == KUBE.name {
        let minor = version.split('.').nth(1).unwrap_or("0");
        for package in [
            "k8s.io/component-base/version",
            "k8s.io/client-go/pkg/version",
        ] {
            flags.push_str(&format!(
                " -X {package}.gitVersion={version} -X {package}.gitMajor=1 -X {package}.gitMinor={minor}"
            ));
        }
    }
    if module.name == HELM.name {
        flags.push_str(&format!(
            " -X helm.sh/helm/v3/internal/version.version={version}"
        ));
    }
    flags
}

fn go_build(module: GoModule, source: &Path, out: &Path, log: &Path) -> Result<()> {
    let go = go_binary();
    let version = pinned_version(module)?;
    let started = Instant::now();
    info!(
        module = module.name,
        %version,
        out = %out.display(),
        log = %log.display(),
        "building binaries with go (once per pin; a cold build takes minutes)"
    );
    let log_file = File::create(log).map_err(Error::io("create build log", log))?;
    let log_err = log_file
        .try_clone()
        .map_err(Error::io("create build log", log))?;
    let mut out_arg = out.as_os_str().to_owned();
    out_arg.push("/");
    let step = format!(
        "building {} ({}) {version} with go, once per pin",
        module.name,
        module
            .binaries
            .iter()
            .map(|(binary, _)| *binary)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut child = Command::new(&go)
        .current_dir(source)
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-buildvcs=false -mod=readonly")
        .arg("build")
        // -v lists each package as it is compiled: the progress lines count them.
        .arg("-v")
        .arg("-trimpath")
        .arg(format!("-ldflags={}", ldflags(module, &version)))
        .arg("-o")
        .arg(&out_arg)
        .args(module.binaries.iter().map(|(_, package)| package))
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .spawn()
        .map_err(|error| Error::Command {
            command: format!("{} build", go.display()),
            message: format!("{error} (is Go installed? set PATH or KUBEBUILDER_ASSETS)"),
        })?;
    let status = wait_with_progress(&mut child, &step, log, PROGRESS_EVERY, BUILD_DEADLINE)
        .map_err(|error| Error::Command {
            command: format!("go build ({})", source.display()),
            message: format!("{error}; log {}:\n{}", log.display(), log_tail(log)),
        })?;
    if !status.success() {
        return Err(Error::Command {
            command: format!("go build ({})", source.display()),
            message: format!("{status}; log {}:\n{}", log.display(), log_tail(log)),
        });
    }
    // `go build -o dir/` names a binary after its package path; etcd's is `server`.
    for (binary, package) in module.binaries {
        let built = out.join(go_output_name(package));
        if built != out.join(binary) {
            fs::rename(&built, out.join(binary)).map_err(Error::io("rename", &built))?;
        }
    }
    if module.name == KEDA.name {
        keda_manifests::copy(source, out)?;
    }
    info!(module = module.name, elapsed = ?started.elapsed(), "built");
    Ok(())
}

/// The file name `go build -o dir/` gives a main package: its last path
/// element, skipping a major-version suffix like `/v3`.
fn go_output_name(package: &str) -> &str {
    let mut parts = package.rsplit('/');
    let last = parts.next().unwrap_or(package);
    let is_major =
        last.len() > 1 && last.starts_with('v') && last[1..].bytes().all(|b| b.is_ascii_digit());
    if is_major {
        parts.next().unwrap_or(last)
    } else {
        last
    }
}

/// `go` from PATH, else the usual install location.
fn go_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("go"))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        let fallback = PathBuf::from("/usr/local/go/bin/go");
        if !fallback.is_file() {
            warn!("go not found on PATH or in /usr/local/go/bin");
        }
        fallback
    })
}

/// FNV-1a, 64 bit: a stable content hash without a dependency.
struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_names_binaries_after_the_package_without_major_suffix() {
        assert_eq!(go_output_name("go.etcd.io/etcd/server/v3"), "server");
        assert_eq!(go_output_name("k8s.io/kubernetes/cmd/kubectl"), "kubectl");
        assert_eq!(go_output_name("sigs.k8s.io/kwok/cmd/kwok"), "kwok");
        assert_eq!(
            go_output_name("github.com/prometheus/prometheus/cmd/promtool"),
            "promtool"
        );
    }

    #[test]
    fn pinned_versions_are_read_from_go_mod() {
        assert!(pinned_version(KUBE).unwrap().starts_with("v1."));
        assert!(pinned_version(KWOK).unwrap().starts_with("v0."));
        // Prometheus tags its Go module v0.3MM.P for release v3.MM.P.
        assert!(pinned_version(PROMETHEUS).unwrap().starts_with("v0.3"));
        assert!(pinned_version(KEDA).unwrap().starts_with("v2."));
    }

    #[test]
    fn cache_key_names_module_and_version() {
        let key = cache_key(KUBE, &Path::new(MODULES_DIR).join("kube")).unwrap();
        assert!(key.starts_with(&format!("kube-{}-", pinned_version(KUBE).unwrap())));
    }
}
