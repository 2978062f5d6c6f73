//! The workspace's own programs (agent, operator, reference worker, router) as the
//! testbed runs them: found next to the running executable, i.e. in the same
//! `target/<profile>` folder Cargo built the test or the demo into, so the testbed always
//! runs the code of this checkout — never something from `$PATH`.

use std::path::{Path, PathBuf};

use super::error::{Error, Result};

/// Overrides where the programs are looked up (a folder).
pub const BIN_DIR_ENV: &str = "HCOMM_BIN_DIR";

/// The node agent.
pub const AGENT: &str = "hcomm-agent";
/// The operator.
pub const OPERATOR: &str = "hcomm-operator";
/// The reference inference worker (`examples/pool`).
pub const WORKER: &str = "hcomm-worker";
/// The reference router and load generator (`examples/pool`).
pub const ROUTER: &str = "hcomm-router";
/// The testbed's `hccn_tool` simulator (an hcomm-e2e binary).
pub const HCCN_TOOL_SIM: &str = "hccn-tool-sim";

/// Builds the programs the testbed runs (`cargo build --bins` of the agent, operator and
/// the reference worker and router, and this crate's hccn_tool simulator; the HCCL
/// simulator's shared object) with the Cargo that runs this program (`$CARGO`), in
/// the same target folder — for binaries started with `cargo run`, which builds only
/// their own package. Prints nothing unless the build fails.
pub fn build_programs() -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let what = "cargo build --bins --lib -p hcomm-agent -p hcomm-operator -p hcomm-examples \
                -p hcomm-e2e -p hcomm-hccl-sim";
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "--quiet", "--bins", "--lib"])
        .args([
            "-p",
            "hcomm-agent",
            "-p",
            "hcomm-operator",
            "-p",
            "hcomm-examples",
            // The hccn_tool simulator the hosts' wrappers run.
            "-p",
            "hcomm-e2e",
            // The HCCL conformance simulator (a shared object) for `--backend hccl`.
            "-p",
            "hcomm-hccl-sim",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    // The same profile as the caller, so the programs land next to it.
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().map_err(Error::io(what))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Io {
            what: what.to_owned(),
            source: std::io::Error::other(format!("exited with {status}")),
        })
    }
}

/// A program of the machine's own (`python3`), looked up on `PATH` as a shell would;
/// `None` when it is not installed.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The path of workspace program `name`.
pub fn find(name: &str) -> Result<PathBuf> {
    let dirs = search_dirs();
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::MissingProgram {
            program: name.to_owned(),
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// `$HCOMM_BIN_DIR`, then the executable's folder and its parent (integration tests run
/// from `target/<profile>/deps`).
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(BIN_DIR_ENV)
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(exe) = std::env::current_exe() {
        let mut dir = exe.parent().map(Path::to_path_buf);
        for _ in 0..2 {
            if let Some(d) = dir {
                dirs.push(d.clone());
                dir = d.parent().map(Path::to_path_buf);
            }
        }
    }
    dirs
}
