//! A simulated host's Ascend files under its root folder, and the faults tests inject
//! through them: `/etc/hccn.conf`, the `hccn_tool` wrapper at the real tool's path
//! (`usr/local/Ascend/driver/tools/hccn_tool`, a script that runs the simulator with this
//! root), the fault file the simulator reads on every call, its lock and its call log.
//! Files are replaced atomically (write, then rename), so a call never reads half a file.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::super::hccn_conf::HccnConf;
use super::super::npu::hccn_conf_for;

/// The host's hccn.conf, relative to its root.
pub const HCCN_CONF: &str = "etc/hccn.conf";
/// The hccn_tool wrapper, relative to its root (the real tool's path on a node).
pub const HCCN_TOOL: &str = "usr/local/Ascend/driver/tools/hccn_tool";
const FAULTS: &str = "var/lib/hccn-tool-sim/faults.json";
const LOCK: &str = "run/hccn_tool.lock";
const CALL_LOG: &str = "var/log/hccn-tool-sim.log";
/// Exit status of a call refused because another was running (what
/// [`AscendRoot::concurrent_calls`] counts).
pub const EXIT_CONCURRENT: i32 = 3;

/// Faults of one device, as the simulator reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFault {
    /// `-tls -g` reports the TLS switch on.
    #[serde(default)]
    pub tls: bool,
    /// `-net_health -g` reports this instead of `Success` (`Fault`, `Socket failed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_health: Option<String>,
}

/// The fault file: device physical id → its faults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Faults {
    /// By physical id.
    #[serde(default)]
    pub devices: BTreeMap<u32, DeviceFault>,
}

impl Faults {
    /// Device `id`'s faults (none when not listed).
    pub fn device(&self, id: u32) -> DeviceFault {
        self.devices.get(&id).cloned().unwrap_or_default()
    }
}

/// What went wrong with a host's Ascend files.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The fault file is not the simulator's JSON.
    #[error("{path}: not a fault file: {message}")]
    Faults {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A device the host does not have.
    #[error("no device {0} in hccn.conf")]
    NoDevice(u32),
}

/// One host's Ascend files.
#[derive(Debug, Clone)]
pub struct AscendRoot {
    root: PathBuf,
}

/// Held while a simulator call runs; released on drop (or when the process dies).
pub struct CallLock(#[allow(dead_code)] std::fs::File);

impl AscendRoot {
    /// The files under `root` (nothing is read or made).
    pub fn open(root: &Path) -> AscendRoot {
        AscendRoot {
            root: root.to_path_buf(),
        }
    }

    /// Writes host `host`'s hccn.conf (from the NPU fabric's addressing: `hosts` hosts of
    /// `npus` NPUs) and the hccn_tool wrapper that runs `simulator` with this root.
    pub fn install(
        root: &Path,
        host: usize,
        hosts: usize,
        npus: u32,
        simulator: &Path,
    ) -> Result<AscendRoot, RootError> {
        let this = AscendRoot::open(root);
        this.write_conf(&hccn_conf_for(host, hosts, npus))?;
        this.write_faults(&Faults::default())?;
        let script = format!(
            "#!/bin/sh\n# hcomm testbed: the hccn_tool simulator for this host\nexec '{}' --root '{}' \"$@\"\n",
            simulator.display(),
            root.display()
        );
        let tool = this.hccn_tool();
        write_atomic(&tool, script.as_bytes())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))
            .map_err(io(&tool))?;
        Ok(this)
    }

    /// The host's root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// Its `/etc/hccn.conf` (point the agent here).
    pub fn hccn_conf(&self) -> PathBuf {
        self.root.join(HCCN_CONF)
    }
    /// Its hccn_tool (point the agent here).
    pub fn hccn_tool(&self) -> PathBuf {
        self.root.join(HCCN_TOOL)
    }

    /// Reads hccn.conf.
    pub fn read_conf(&self) -> Result<HccnConf, RootError> {
        let path = self.hccn_conf();
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        Ok(HccnConf::parse(&text))
    }

    /// Replaces hccn.conf.
    pub fn write_conf(&self, conf: &HccnConf) -> Result<(), RootError> {
        write_atomic(&self.hccn_conf(), conf.render().as_bytes())
    }

    /// Fault "device IP missing": device `id`'s address and netmask leave hccn.conf, so
    /// the file and `-ip -g` both lack it.
    pub fn remove_device_ip(&self, id: u32) -> Result<(), RootError> {
        let mut conf = self.read_conf()?;
        let e = conf.devices.get_mut(&id).ok_or(RootError::NoDevice(id))?;
        e.address = None;
        e.netmask = None;
        self.write_conf(&conf)
    }

    /// Fault "two devices, one IP": device `id` is configured with device `like`'s
    /// address.
    pub fn duplicate_device_ip(&self, id: u32, like: u32) -> Result<(), RootError> {
        let mut conf = self.read_conf()?;
        let address = conf.address(like).ok_or(RootError::NoDevice(like))?;
        conf.devices
            .get_mut(&id)
            .ok_or(RootError::NoDevice(id))?
            .address = Some(address);
        self.write_conf(&conf)
    }

    /// The faults the simulator reports now (none when the file is missing or unreadable:
    /// the simulator never invents a fault).
    pub fn faults(&self) -> Faults {
        std::fs::read_to_string(self.root.join(FAULTS))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// Sets device `id`'s faults (TLS on, health not Success); `DeviceFault::default()`
    /// clears them.
    pub fn set_fault(&self, id: u32, fault: DeviceFault) -> Result<(), RootError> {
        let mut faults = self.faults();
        if fault == DeviceFault::default() {
            faults.devices.remove(&id);
        } else {
            faults.devices.insert(id, fault);
        }
        self.write_faults(&faults)
    }

    fn write_faults(&self, faults: &Faults) -> Result<(), RootError> {
        let path = self.root.join(FAULTS);
        let text = serde_json::to_vec_pretty(faults).map_err(|e| RootError::Faults {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, &text)
    }

    /// Takes the host's call lock without waiting: `None` when another call holds it.
    pub fn try_lock(&self) -> Result<Option<CallLock>, RootError> {
        let path = self.root.join(LOCK);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(CallLock(file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(io(&path)(e)),
        }
    }

    /// Appends one call to the call log (`<unix ms> exit=<code> <args>`); best effort.
    pub fn log_call(&self, args: &[String], code: i32) {
        let path = self.root.join(CALL_LOG);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        // The root is the log's own folder: leave it (`--root R`) out.
        let skip = args.iter().position(|a| a == "--root");
        let args: Vec<&str> = args
            .iter()
            .enumerate()
            .filter(|(i, _)| skip.is_none_or(|r| *i != r && *i != r + 1))
            .map(|(_, a)| a.as_str())
            .collect();
        let line = format!("{ms} exit={code} {}\n", args.join(" "));
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }

    /// The call log's lines.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.root.join(CALL_LOG))
            .map(|t| t.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// How many calls were refused for running concurrently with another: 0 proves the
    /// caller serialised its calls.
    pub fn concurrent_calls(&self) -> usize {
        let refused = format!("exit={} ", EXIT_CONCURRENT);
        self.calls().iter().filter(|l| l.contains(&refused)).count()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RootError + '_ {
    move |source| RootError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RootError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_written_and_cleared_and_ip_faults_edit_hccn_conf() {
        let dir = std::env::temp_dir().join(format!("hccn-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = AscendRoot::install(&dir, 0, 2, 4, Path::new("/bin/true")).unwrap();
        assert!(
            std::fs::read_to_string(root.hccn_tool())
                .unwrap()
                .contains("--root")
        );
        assert_eq!(root.read_conf().unwrap().devices.len(), 4);
        root.set_fault(
            1,
            DeviceFault {
                tls: true,
                net_health: Some("Fault".into()),
            },
        )
        .unwrap();
        assert!(root.faults().device(1).tls);
        assert!(!root.faults().device(0).tls);
        root.set_fault(1, DeviceFault::default()).unwrap();
        assert_eq!(root.faults(), Faults::default());
        root.remove_device_ip(2).unwrap();
        assert_eq!(root.read_conf().unwrap().address(2), None);
        root.duplicate_device_ip(3, 0).unwrap();
        let conf = root.read_conf().unwrap();
        assert_eq!(conf.address(3), conf.address(0));
        assert!(matches!(
            root.remove_device_ip(9),
            Err(RootError::NoDevice(9))
        ));
        let held = root.try_lock().unwrap().expect("free");
        assert!(
            root.try_lock().unwrap().is_none(),
            "a second call is refused"
        );
        drop(held);
        assert!(root.try_lock().unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
