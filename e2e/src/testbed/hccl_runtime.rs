//! The HCCL conformance simulator (`e2e/hccl-sim`) installed as the hosts' CANN runtime,
//! for a testbed started with `TestbedOptions::hccl_runtime`: what an Ascend node with
//! CANN installed and a vLLM-Ascend/MindIE image would give the agent and the workers.
//!
//! - `<bed>/ascend/lib64/{libhccl.so,libascendcl.so}` → the simulator's shared object; the
//!   agents and every container that got NPUs see `ASCEND_HOME_PATH=<bed>/ascend`, as
//!   `set_env.sh` sets it, so the product's own library search finds it.
//! - The simulator stands in for the driver too: each host's device IPs (what the NPU
//!   fabric gave the devices, not the possibly faulted `/etc/hccn.conf` the agent checks)
//!   are in `<bed>/ascend/driver/host-N.conf`, and a container's ranks announce the IP of
//!   the physical NPU behind the device they bound (`ASCEND_VISIBLE_DEVICES`).
//! - Every violation the simulator sees (a device buffer freed while a collective uses
//!   it, a use after free, collectives that do not match) is appended to
//!   `<bed>/ascend/violations`; [`HcclRuntime::violations`] is what tests require empty.
//!
//! Only network-namespace hosts have an NPU fabric, so only they can run it.

use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use hcomm_hccl_sim::{FAULT_ENV, HCCN_CONF_ENV, VIOLATIONS_ENV};

use super::error::{Error, Result};
use crate::hosts::SimHosts;

/// The library names the product's HCCL backend loads.
const LIBRARIES: [&str; 2] = ["libhccl.so", "libascendcl.so"];
/// What `set_env.sh` exports and the backend's library search reads.
const ASCEND_HOME_PATH: &str = "ASCEND_HOME_PATH";

/// The installed runtime.
#[derive(Debug, Clone)]
pub struct HcclRuntime {
    home: PathBuf,
    /// Faults for the next Pod whose name starts with the prefix (each used once).
    faults: Arc<Mutex<Vec<(String, String)>>>,
}

impl HcclRuntime {
    /// Installs the simulator under `<dir>/ascend` for `hosts`.
    pub fn install(dir: &Path, hosts: &SimHosts) -> Result<HcclRuntime> {
        if !hosts.is_isolated() || hosts.npus_per_host() == 0 {
            return Err(Error::Unsupported(
                "the HCCL simulator runs between the hosts' NPUs over their NPU fabric, which \
                 only network-namespace hosts with NPUs have (run as root, without --loopback)"
                    .into(),
            ));
        }
        let home = dir.join("ascend");
        let lib64 = home.join("lib64");
        let driver = home.join("driver");
        for d in [&lib64, &driver] {
            std::fs::create_dir_all(d).map_err(Error::io(format!("create {}", d.display())))?;
        }
        let so = simulator()?;
        for lib in LIBRARIES {
            let link = lib64.join(lib);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&so, &link).map_err(Error::io(format!(
                "link {} to {}",
                link.display(),
                so.display()
            )))?;
        }
        for h in hosts.hosts() {
            let conf = hosts.hccn_conf(h.index())?;
            let path = driver.join(format!("host-{}.conf", h.index()));
            std::fs::write(&path, conf.render())
                .map_err(Error::io(format!("write {}", path.display())))?;
        }
        Ok(HcclRuntime {
            home,
            faults: Arc::default(),
        })
    }

    /// `ASCEND_HOME_PATH` for the agents.
    pub fn agent_env(&self) -> (String, PathBuf) {
        (ASCEND_HOME_PATH.to_owned(), self.home.clone())
    }

    /// The next Pod whose name starts with `pod_prefix` runs with the simulator fault
    /// `fault` (`HCOMM_SIM_FAULT` syntax, e.g. `hang_op=0`): a bad NPU on one member.
    pub fn inject_once(&self, pod_prefix: &str, fault: &str) {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((pod_prefix.to_owned(), fault.to_owned()));
    }

    /// The injected faults no Pod has started with yet, as `(pod prefix, fault)`.
    pub fn pending_faults(&self) -> Vec<(String, String)> {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What a container of Pod `pod` given NPUs on host `host` runs with.
    pub fn container_env(&self, host: usize, pod: &str) -> Vec<(String, String)> {
        let path = |p: PathBuf| p.display().to_string();
        let fault = {
            let mut faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
            faults
                .iter()
                .position(|(prefix, _)| pod.starts_with(prefix.as_str()))
                .map(|i| faults.remove(i).1)
        };
        let fault = fault.map(|f| {
            tracing::info!(%pod, fault = %f, "hccl-sim: fault injected");
            (FAULT_ENV.to_owned(), f)
        });
        fault
            .into_iter()
            .chain([
                (ASCEND_HOME_PATH.to_owned(), path(self.home.clone())),
                (
                    HCCN_CONF_ENV.to_owned(),
                    path(self.home.join("driver").join(format!("host-{host}.conf"))),
                ),
                (VIOLATIONS_ENV.to_owned(), path(self.violations_file())),
            ])
            .collect()
    }

    /// Every violation the simulator recorded, one per line (empty: none).
    pub fn violations(&self) -> String {
        std::fs::read_to_string(self.violations_file()).unwrap_or_default()
    }

    fn violations_file(&self) -> PathBuf {
        self.home.join("violations")
    }
}

/// The simulator's shared object, `libhcomm_hccl_sim.so`: beside the programs (`cargo build
/// -p hcomm-hccl-sim`, which `binaries::build_programs` runs), or in `deps/` beside a test
/// (Cargo builds it there as this crate's dependency).
pub fn simulator() -> Result<PathBuf> {
    super::binaries::find("libhcomm_hccl_sim.so")
}
