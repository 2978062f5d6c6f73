//! What the simulator reads from the environment, once, at first use: HCCL's own variables
//! (connect and exec timeouts, buffer size) as the real library honours them, this rank's
//! simulated device IP, and the faults to inject.
//!
//! `HCOMM_SIM_FAULT` is a comma-separated list:
//! - `slow_op=MS`: every collective takes MS milliseconds longer;
//! - `hang_op=N`: the N-th collective of the process (0-based) never completes on its own;
//!   only `HcclCommDestroy` stops it (like a device task stuck on a dead link);
//! - `die_in_init`: the process exits in the middle of `HcclCommInitRootInfo` (a non-root
//!   rank after connecting to the root, the root before answering anyone);
//! - `wrong_device_ip`: this rank announces a device IP other than the one it connects from;
//! - `async_error=N`: after N completed collectives, `HcclGetCommAsyncError` reports
//!   `HCCL_E_REMOTE`.

use std::net::Ipv4Addr;
use std::sync::OnceLock;
use std::time::Duration;

use hcomm_crds::contract::env;

/// Faults to inject (see the module docs).
pub const FAULT_ENV: &str = "HCOMM_SIM_FAULT";
/// This rank's simulated device IP (the rank table's `device_ip`), overriding
/// [`HCCN_CONF_ENV`]; default 127.0.0.1.
pub const DEVICE_IP_ENV: &str = "HCOMM_SIM_DEVICE_IP";
/// The node's `/etc/hccn.conf` (`address_<phys>=IP`), standing in for the driver the real
/// runtime asks: the device IP is the one of the physical NPU behind the logical device
/// `aclrtSetDevice` bound, through `ASCEND_VISIBLE_DEVICES` as the container runtime set it.
/// A process driving the wrong device therefore announces the wrong IP, as on hardware.
pub const HCCN_CONF_ENV: &str = "HCOMM_SIM_HCCN_CONF";
/// The container's NPUs (physical ids, comma-separated), as the Ascend device plugin sets
/// them; logical device `i` is the `i`-th.
const VISIBLE_DEVICES_ENV: &str = hcomm_crds::contract::ascend::ENV_ASCEND_VISIBLE_DEVICES;

/// HCCL's default `HCCL_CONNECT_TIMEOUT` (seconds).
const DEFAULT_CONNECT_SECS: u64 = 120;
/// HCCL's default `HCCL_EXEC_TIMEOUT` on A2/A3 (seconds).
const DEFAULT_EXEC_SECS: u64 = 1836;
/// HCCL's default `HCCL_BUFFSIZE` (MB).
const DEFAULT_BUFFSIZE_MB: u64 = 200;

/// Everything read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub connect_timeout: Duration,
    /// `None`: 0 was configured, i.e. never time out.
    pub exec_timeout: Option<Duration>,
    pub buffsize_mb: u64,
    /// [`DEVICE_IP_ENV`], when set.
    pub explicit_ip: Option<Ipv4Addr>,
    /// [`HCCN_CONF_ENV`] and [`VISIBLE_DEVICES_ENV`], when set.
    pub hccn_conf: Option<std::path::PathBuf>,
    pub visible_devices: Option<String>,
    pub slow_op: Option<Duration>,
    pub hang_op: Option<u64>,
    pub die_in_init: bool,
    pub wrong_device_ip: bool,
    pub async_error_after: Option<u64>,
}

impl Settings {
    /// Parses from a lookup function (the environment in production, a map in tests).
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let num = |name: &str, default: u64| -> Result<u64, String> {
            match get(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{name}={v:?} is not a whole number")),
            }
        };
        let exec = num(env::HCCL_EXEC_TIMEOUT, DEFAULT_EXEC_SECS)?;
        let explicit_ip = match get(DEVICE_IP_ENV) {
            None => None,
            Some(v) => Some(
                v.parse()
                    .map_err(|_| format!("{DEVICE_IP_ENV}={v:?} is not an IPv4 address"))?,
            ),
        };
        let mut s = Self {
            connect_timeout: Duration::from_secs(num(
                env::HCCL_CONNECT_TIMEOUT,
                DEFAULT_CONNECT_SECS,
            )?),
            exec_timeout: (exec > 0).then(|| Duration::from_secs(exec)),
            buffsize_mb: num(env::HCCL_BUFFSIZE, DEFAULT_BUFFSIZE_MB)?,
            explicit_ip,
            hccn_conf: get(HCCN_CONF_ENV).filter(|v| !v.is_empty()).map(Into::into),
            visible_devices: get(VISIBLE_DEVICES_ENV).filter(|v| !v.is_empty()),
            slow_op: None,
            hang_op: None,
            die_in_init: false,
            wrong_device_ip: false,
            async_error_after: None,
        };
        for item in get(FAULT_ENV).unwrap_or_default().split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            let n = || -> Result<u64, String> {
                value
                    .parse()
                    .map_err(|_| format!("{FAULT_ENV}: {key} needs a number, got {value:?}"))
            };
            match key {
                "slow_op" => s.slow_op = Some(Duration::from_millis(n()?)),
                "hang_op" => s.hang_op = Some(n()?),
                "die_in_init" => s.die_in_init = true,
                "wrong_device_ip" => s.wrong_device_ip = true,
                "async_error" => s.async_error_after = Some(n()?),
                other => return Err(format!("{FAULT_ENV}: unknown fault {other:?}")),
            }
        }
        Ok(s)
    }
}

impl Settings {
    /// The device IP of logical device `device`: [`DEVICE_IP_ENV`], else the hccn.conf
    /// address of the physical NPU behind it, else 127.0.0.1.
    pub fn device_ip(&self, device: i32) -> Result<Ipv4Addr, String> {
        if let Some(ip) = self.explicit_ip {
            return Ok(ip);
        }
        let Some(conf) = &self.hccn_conf else {
            return Ok(Ipv4Addr::LOCALHOST);
        };
        let physical = match &self.visible_devices {
            None => device.to_string(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .nth(usize::try_from(device).unwrap_or(usize::MAX))
                .ok_or_else(|| {
                    format!("logical device {device} is not in {VISIBLE_DEVICES_ENV}={list}")
                })?
                .to_owned(),
        };
        let text = std::fs::read_to_string(conf)
            .map_err(|e| format!("{HCCN_CONF_ENV}: cannot read {}: {e}", conf.display()))?;
        address_in_hccn_conf(&text, &physical).ok_or_else(|| {
            format!(
                "{}: no address_{physical} (logical device {device}): the NPU has no device IP",
                conf.display()
            )
        })
    }
}

/// `address_<physical>=IP` of an hccn.conf text.
fn address_in_hccn_conf(text: &str, physical: &str) -> Option<Ipv4Addr> {
    let key = format!("address_{physical}");
    text.lines().find_map(|line| {
        let (k, v) = line.trim().split_once('=')?;
        (k.trim() == key).then(|| v.trim().parse().ok())?
    })
}

/// The process's settings; a malformed environment aborts loudly (a test set it up wrong).
pub fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| match Settings::parse(|k| std::env::var(k).ok()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hccl-sim: bad environment: {e}");
            std::process::abort();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::parse(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_hccls() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.connect_timeout, Duration::from_secs(120));
        assert_eq!(s.exec_timeout, Some(Duration::from_secs(1836)));
        assert_eq!(s.buffsize_mb, 200);
        assert_eq!(s.device_ip(0), Ok(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn the_device_ip_is_the_hccn_conf_address_of_the_physical_npu_behind_the_logical_one() {
        let conf = std::env::temp_dir().join(format!("hccl-sim-hccn-{}.conf", std::process::id()));
        std::fs::write(
            &conf,
            "address_4=192.168.1.14\nnetmask_4=255.255.255.0\naddress_5=192.168.1.15\n",
        )
        .unwrap();
        let path = conf.display().to_string();
        let s = parse(&[(HCCN_CONF_ENV, &path), (VISIBLE_DEVICES_ENV, "5,4")]).unwrap();
        assert_eq!(s.device_ip(0), Ok(Ipv4Addr::new(192, 168, 1, 15)));
        assert_eq!(s.device_ip(1), Ok(Ipv4Addr::new(192, 168, 1, 14)));
        let e = s.device_ip(2).unwrap_err();
        assert!(e.contains("logical device 2"), "{e}");
        let s = parse(&[(HCCN_CONF_ENV, &path)]).unwrap();
        let e = s.device_ip(0).unwrap_err();
        assert!(e.contains("no address_0"), "{e}");
        let s = parse(&[(HCCN_CONF_ENV, &path), (DEVICE_IP_ENV, "10.0.0.1")]).unwrap();
        assert_eq!(
            s.device_ip(1),
            Ok(Ipv4Addr::new(10, 0, 0, 1)),
            "the override wins"
        );
        let _ = std::fs::remove_file(conf);
    }

    #[test]
    fn exec_timeout_zero_means_never_and_faults_parse() {
        let s = parse(&[
            (env::HCCL_EXEC_TIMEOUT, "0"),
            (
                FAULT_ENV,
                "slow_op=250, hang_op=3,die_in_init,async_error=2",
            ),
        ])
        .unwrap();
        assert_eq!(s.exec_timeout, None);
        assert_eq!(s.slow_op, Some(Duration::from_millis(250)));
        assert_eq!(s.hang_op, Some(3));
        assert!(s.die_in_init);
        assert_eq!(s.async_error_after, Some(2));
    }

    #[test]
    fn unknown_faults_and_bad_numbers_are_refused() {
        assert!(parse(&[(FAULT_ENV, "melt")]).is_err());
        assert!(parse(&[(env::HCCL_CONNECT_TIMEOUT, "soon")]).is_err());
    }
}
