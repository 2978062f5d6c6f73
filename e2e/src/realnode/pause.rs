//! The sandbox image: Kubernetes' own `pause` (`build/pause/linux/pause.c` of the pinned
//! module, which the control-plane build has already downloaded), compiled statically
//! and cached beside the Go binaries, then packed as [`super::config::SANDBOX_IMAGE`].

use std::path::{Path, PathBuf};
use std::process::Command;

use super::config::SANDBOX_IMAGE;
use super::error::{Error, Result};
use super::image::ImageSpec;
use super::mountns::run;
use crate::controlplane::assets;

/// The pause image archive for the pinned Kubernetes version, built once.
pub fn archive() -> Result<PathBuf> {
    let version = assets::kubernetes_version()?;
    let dir = assets::cache_root().join("realnode");
    let out = dir.join(format!("pause-{version}.tar"));
    if out.is_file() {
        return Ok(out);
    }
    std::fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
    let source = pause_source(&version)?;
    let binary = dir.join(format!("pause-{version}"));
    let binary_arg = binary.display().to_string();
    run(
        "cc",
        &[
            "-Os",
            "-static",
            "-o",
            &binary_arg,
            source.to_str().unwrap_or_default(),
        ],
    )?;
    let spec = ImageSpec {
        reference: SANDBOX_IMAGE.to_owned(),
        entrypoint: vec!["/pause".to_owned()],
        env: Vec::new(),
        files: vec![(binary, "/pause".to_owned())],
    };
    // Written aside and renamed: a concurrent or killed build never leaves half a file.
    let partial = dir.join(format!(".pause-{version}.{}.tar", std::process::id()));
    spec.write_archive(&partial)?;
    std::fs::rename(&partial, &out).map_err(Error::io("rename", &out))?;
    Ok(out)
}

/// `pause.c` in the Go module cache, downloading the module if a control plane came from
/// `KUBEBUILDER_ASSETS` and it never was.
fn pause_source(version: &str) -> Result<PathBuf> {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s/kube");
    let module = format!("k8s.io/kubernetes@{version}");
    let go = |args: &[&str]| -> Result<String> {
        let out = Command::new("go")
            .current_dir(&modules)
            .env("GOFLAGS", "-mod=readonly")
            .args(args)
            .output()
            .map_err(|_| Error::MissingProgram {
                program: "go".to_owned(),
            })?;
        if !out.status.success() {
            return Err(Error::Command {
                command: format!("go {}", args.join(" ")),
                message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let cache = go(&["env", "GOMODCACHE"])?;
    let source = Path::new(&cache)
        .join(&module)
        .join("build/pause/linux/pause.c");
    if !source.is_file() {
        go(&["mod", "download", &module])?;
    }
    Ok(source)
}
