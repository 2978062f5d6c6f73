//! `/etc/hccn.conf`, the file where an Ascend node keeps each NPU's own network settings
//! (written by `hccn_tool` when an admin sets them, read back by the device plugin and by
//! hcomm's agent): `address_N=`, `netmask_N=`, `netdetect_N=` per device physical id `N`
//! (HCCL's rank-table docs; ASCEND.md §3). Pure: rendering and parsing only, so the
//! testbed, the device-plugin stand-in and the `hccn_tool` simulator agree on one reading.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// One device's lines. Any of them may be missing in a real file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HccnEntry {
    /// `address_N`: the NPU's RoCE address (the rank table's `device_ip`).
    pub address: Option<Ipv4Addr>,
    /// `netmask_N`.
    pub netmask: Option<Ipv4Addr>,
    /// `netdetect_N`: the address the NPU probes to judge its network healthy.
    pub netdetect: Option<Ipv4Addr>,
}

/// The whole file: device physical id → its lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HccnConf {
    /// By physical id.
    pub devices: BTreeMap<u32, HccnEntry>,
}

impl HccnConf {
    /// Reads the file's text. Lines that are not `key_N=value` with a known key and an
    /// IPv4 value are ignored (real files carry more keys, e.g. `gateway_N`).
    pub fn parse(text: &str) -> HccnConf {
        let mut conf = HccnConf::default();
        for line in text.lines() {
            let Some((key, value)) = line.trim().split_once('=') else {
                continue;
            };
            let Some((name, id)) = key.trim().rsplit_once('_') else {
                continue;
            };
            let (Ok(id), Ok(ip)) = (id.parse::<u32>(), value.trim().parse::<Ipv4Addr>()) else {
                continue;
            };
            let entry = conf.devices.entry(id).or_default();
            match name {
                "address" => entry.address = Some(ip),
                "netmask" => entry.netmask = Some(ip),
                "netdetect" => entry.netdetect = Some(ip),
                _ => {}
            }
        }
        conf
    }

    /// The file's text, devices in physical-id order.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (id, e) in &self.devices {
            for (key, value) in [
                ("address", e.address),
                ("netmask", e.netmask),
                ("netdetect", e.netdetect),
            ] {
                if let Some(v) = value {
                    out.push_str(&format!("{key}_{id}={v}\n"));
                }
            }
        }
        out
    }

    /// Device `id`'s address, if the file has one.
    pub fn address(&self, id: u32) -> Option<Ipv4Addr> {
        self.devices.get(&id)?.address
    }
}

/// The dotted netmask of a prefix length (`16` → `255.255.0.0`).
pub fn netmask(prefix_len: u8) -> Ipv4Addr {
    let bits = u32::MAX
        .checked_shl(32 - u32::from(prefix_len.min(32)))
        .unwrap_or(0);
    Ipv4Addr::from(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_looking_file_round_trips_and_extra_keys_are_ignored() {
        let text = "address_0=192.168.0.10\nnetmask_0=255.255.0.0\nnetdetect_0=192.168.1.10\n\
                    gateway_0=192.168.0.1\nsend_arp_status_0=1\naddress_1=192.168.0.11\n\
                    # comment\nnetmask_1=255.255.0.0\naddress_x=1.2.3.4\n";
        let conf = HccnConf::parse(text);
        assert_eq!(conf.devices.len(), 2);
        assert_eq!(conf.address(0), Some(Ipv4Addr::new(192, 168, 0, 10)));
        assert_eq!(
            conf.devices[&0].netdetect,
            Some(Ipv4Addr::new(192, 168, 1, 10))
        );
        assert_eq!(conf.devices[&1].netdetect, None);
        assert_eq!(HccnConf::parse(&conf.render()), conf);
        assert!(
            conf.render()
                .starts_with("address_0=192.168.0.10\nnetmask_0=255.255.0.0\n")
        );
    }

    #[test]
    fn netmasks_of_prefix_lengths() {
        assert_eq!(netmask(16), Ipv4Addr::new(255, 255, 0, 0));
        assert_eq!(netmask(24), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(netmask(0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(netmask(32), Ipv4Addr::BROADCAST);
    }
}
