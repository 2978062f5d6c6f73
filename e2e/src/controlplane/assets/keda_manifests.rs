//! KEDA's manifests beside its binaries: its CRDs and its own RBAC, copied from the
//! pinned module's `config/` when KEDA is built, so a testbed needs no module cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{KEDA, go_binary};
use crate::controlplane::error::{Error, Result};

/// Folder of KEDA's CRD manifests in a KEDA build (copied from the pinned module's
/// `config/crd/bases`, so the testbed needs no module cache at run time).
pub const KEDA_CRDS: &str = "crds";
/// Folder of KEDA's own RBAC in a KEDA build: its ServiceAccount, the operator's roles
/// and the metrics server's (delegated authentication, the HPA controller's read access),
/// from the module's `config/`, as KEDA's release manifests grant them.
pub const KEDA_RBAC: &str = "rbac";

/// KEDA's RBAC files in its module's `config/`, and their names in [`KEDA_RBAC`].
const KEDA_RBAC_FILES: [(&str, &str); 5] = [
    (
        "service_account/service_account.yaml",
        "service-account.yaml",
    ),
    ("rbac/role.yaml", "operator-roles.yaml"),
    ("rbac/role_binding.yaml", "operator-bindings.yaml"),
    ("metrics-server/role.yaml", "metrics-server-roles.yaml"),
    (
        "metrics-server/role_binding.yaml",
        "metrics-server-bindings.yaml",
    ),
];

/// Whether a KEDA build in `dir` has its manifests.
pub(super) fn present(dir: &Path) -> bool {
    dir.join(KEDA_CRDS).is_dir() && dir.join(KEDA_RBAC).is_dir()
}

/// Copies the CRDs and the RBAC of the pinned KEDA module (its `config/`) into `out`.
pub(super) fn copy(source: &Path, out: &Path) -> Result<()> {
    let output = Command::new(go_binary())
        .current_dir(source)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .args(["list", "-m", "-f", "{{.Dir}}", KEDA.pinned])
        .output()
        .map_err(|error| Error::Command {
            command: "go list -m".to_owned(),
            message: error.to_string(),
        })?;
    if !output.status.success() {
        return Err(Error::Command {
            command: format!("go list -m {}", KEDA.pinned),
            message: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    let config = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()).join("config");
    let copy = |from: &Path, to: &Path| {
        fs::copy(from, to)
            .map(drop)
            .map_err(Error::io("copy a KEDA manifest", from))
    };
    let crds = out.join(KEDA_CRDS);
    fs::create_dir_all(&crds).map_err(Error::io("create", &crds))?;
    let bases = config.join("crd/bases");
    let mut copied = 0;
    for entry in fs::read_dir(&bases).map_err(Error::io("read", &bases))? {
        let path = entry.map_err(Error::io("read", &bases))?.path();
        // All of them: the operator watches each kind (eventing.keda.sh's too) and
        // does not start without its CRD.
        if path.extension().is_some_and(|e| e == "yaml") {
            copy(&path, &crds.join(path.file_name().unwrap_or_default()))?;
            copied += 1;
        }
    }
    if copied == 0 {
        return Err(Error::MissingBinary {
            binary: "keda CRDs",
            reason: format!("no CRD manifests in {}", bases.display()),
        });
    }
    let rbac = out.join(KEDA_RBAC);
    fs::create_dir_all(&rbac).map_err(Error::io("create", &rbac))?;
    for (from, to) in KEDA_RBAC_FILES {
        copy(&config.join(from), &rbac.join(to))?;
    }
    Ok(())
}
