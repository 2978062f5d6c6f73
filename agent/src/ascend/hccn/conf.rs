//! `/etc/hccn.conf`: the NPUs' configured RoCE addresses, `address_N` / `netmask_N` /
//! `netdetect_N` with N the device's physical id (`address_N` is the rank table's
//! `device_ip`). Other `<key>_N` lines (`gateway_N`, `send_arp_status_N`, `tls_enable_N`
//! appear in samples) are kept verbatim; lines that are not `key_N=value` are listed as
//! ignored. A malformed address is an error, never a guess.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// One device's lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceConf {
    pub address: Option<IpAddr>,
    pub netmask: Option<IpAddr>,
    pub netdetect: Option<IpAddr>,
    /// Other `<key>_N` lines of this device, by key.
    pub other: BTreeMap<String, String>,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HccnConf {
    /// By physical device id.
    pub devices: BTreeMap<u32, DeviceConf>,
    /// 1-based numbers of the non-blank, non-comment lines that are not `key_N=value`.
    pub ignored: Vec<usize>,
}

impl HccnConf {
    /// The configured address of device `id`.
    pub fn address(&self, id: u32) -> Option<IpAddr> {
        self.devices.get(&id).and_then(|d| d.address)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("line {line}: {key}={value:?} is not an IP address")]
    BadAddress {
        line: usize,
        key: String,
        value: String,
    },
    #[error("line {line}: {key} is set twice")]
    Duplicate { line: usize, key: String },
}

/// Parses the file's text.
pub fn parse(text: &str) -> Result<HccnConf, ConfError> {
    let mut conf = HccnConf::default();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            conf.ignored.push(line_no);
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let Some((name, id)) = key.rsplit_once('_') else {
            conf.ignored.push(line_no);
            continue;
        };
        let Ok(id) = id.parse::<u32>() else {
            conf.ignored.push(line_no);
            continue;
        };
        let dev = conf.devices.entry(id).or_default();
        let slot = match name {
            "address" => &mut dev.address,
            "netmask" => &mut dev.netmask,
            "netdetect" => &mut dev.netdetect,
            other => {
                if dev
                    .other
                    .insert(other.to_owned(), value.to_owned())
                    .is_some()
                {
                    return Err(ConfError::Duplicate {
                        line: line_no,
                        key: key.to_owned(),
                    });
                }
                continue;
            }
        };
        let ip: IpAddr = value.parse().map_err(|_| ConfError::BadAddress {
            line: line_no,
            key: key.to_owned(),
            value: value.to_owned(),
        })?;
        if slot.replace(ip).is_some() {
            return Err(ConfError::Duplicate {
                line: line_no,
                key: key.to_owned(),
            });
        }
    }
    Ok(conf)
}

/// Reads and parses the file at `path`.
pub fn read(path: &Path) -> Result<HccnConf, ConfError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of the documented sample (HCCL rank_table_config_a2.md), with the extra
    /// keys seen in cluster samples.
    const SAMPLE: &str = "\
address_0=192.168.100.101
netmask_0=255.255.255.0
netdetect_0=192.168.100.1
gateway_0=192.168.100.1
send_arp_status_0=1
tls_enable_0=0
address_1=192.168.101.101
netmask_1=255.255.255.0
";

    #[test]
    fn the_documented_keys_parse_per_device_and_extra_keys_are_kept() {
        let c = parse(SAMPLE).unwrap();
        assert_eq!(c.address(0), Some("192.168.100.101".parse().unwrap()));
        assert_eq!(c.address(1), Some("192.168.101.101".parse().unwrap()));
        assert_eq!(c.address(2), None);
        let d0 = &c.devices[&0];
        assert_eq!(d0.netmask, Some("255.255.255.0".parse().unwrap()));
        assert_eq!(d0.netdetect, Some("192.168.100.1".parse().unwrap()));
        assert_eq!(d0.other["send_arp_status"], "1");
        assert_eq!(d0.other["tls_enable"], "0");
        assert!(c.ignored.is_empty());
    }

    #[test]
    fn comments_blank_and_foreign_lines_are_ignored_not_misread() {
        let c = parse("# npu\n\nsomething\nkey_x=1\naddress_3 = 10.0.0.3 \n").unwrap();
        assert_eq!(c.address(3), Some("10.0.0.3".parse().unwrap()));
        assert_eq!(c.ignored, [3, 4]);
        assert_eq!(c.devices.len(), 1);
    }

    #[test]
    fn a_malformed_address_is_a_named_error() {
        let e = parse("address_0=192.168.1\n").unwrap_err();
        assert!(
            matches!(&e, ConfError::BadAddress { line: 1, key, .. } if key == "address_0"),
            "{e}"
        );
    }

    #[test]
    fn an_address_set_twice_is_refused_rather_than_picked() {
        let e = parse("address_0=10.0.0.1\naddress_0=10.0.0.2\n").unwrap_err();
        assert!(matches!(e, ConfError::Duplicate { line: 2, .. }), "{e}");
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_the_path() {
        let e = read(Path::new("/nonexistent/hccn.conf")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/hccn.conf"), "{e}");
    }
}
