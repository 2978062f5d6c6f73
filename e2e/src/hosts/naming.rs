//! Names and addresses: the per-run prefix that keeps parallel runs and leftovers apart,
//! the interface names (all ≤ 15 bytes, the kernel's `IFNAMSIZ` limit), and the choice of
//! the /24 pair inside the RFC 2544 benchmarking range 198.18.0.0/15.
//!
//! Prefix layout: `hcs` + owner pid in base 36 (5 chars) + a per-process sequence number
//! (2 chars), e.g. `hcs0k3x901`. The embedded pid lets [`super::cleanup_orphans`] tell
//! leftovers of dead runs from live ones.

use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::Deserialize;

use super::error::{Error, Result};
use super::netns::ip;

/// Every resource this harness creates starts with this.
pub const ROOT_PREFIX: &str = "hcs";
const PID_CHARS: usize = 5;
const SEQ_CHARS: usize = 2;
/// Length of a full run prefix.
pub(crate) const PREFIX_LEN: usize = ROOT_PREFIX.len() + PID_CHARS + SEQ_CHARS;

/// First host address in each /24: host `i` gets `.(FIRST_HOST + i)`.
pub(crate) const FIRST_HOST: u8 = 10;
/// Most hosts one instance can hold (.10 ..= .249).
pub const MAX_HOSTS: usize = 240;
/// Most NPU ports one host can have (a 16-NPU A3 node); bounds the NPU veth numbers.
pub const MAX_NPUS: u32 = 16;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A new prefix, unique among live processes.
pub(crate) fn new_prefix() -> String {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed) % 36u32.pow(SEQ_CHARS as u32);
    format!(
        "{ROOT_PREFIX}{}{}",
        base36(std::process::id(), PID_CHARS),
        base36(seq, SEQ_CHARS)
    )
}

/// The pid a run prefix (or a name starting with one) was made by.
pub(crate) fn owner_pid(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(ROOT_PREFIX)?.get(..PID_CHARS)?;
    u32::from_str_radix(digits, 36).ok()
}

/// The run prefix of a resource this harness names (`<prefix>-h<i>`, `<prefix>bd`,
/// `<prefix>bm`, `<prefix>d<i>`, `<prefix>m<i>`, and the NPU fabric's `<prefix>bn`,
/// `<prefix>n<k>`), or `None` for any other name — so
/// orphan cleanup never touches an unrelated interface that merely starts with `hcs`.
pub(crate) fn run_prefix_of(name: &str) -> Option<&str> {
    let prefix = name.get(..PREFIX_LEN)?;
    let id = prefix.strip_prefix(ROOT_PREFIX)?;
    if !id
        .bytes()
        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    {
        return None;
    }
    let rest = &name[PREFIX_LEN..];
    let numbered = |tag: &str| {
        rest.strip_prefix(tag)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    (rest == "bd"
        || rest == "bm"
        || rest == "bn"
        || numbered("-h")
        || numbered("d")
        || numbered("m")
        || numbered("n"))
    .then_some(prefix)
}

fn base36(mut n: u32, width: usize) -> String {
    let mut out = vec![b'0'; width];
    for slot in out.iter_mut().rev() {
        *slot = b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8(out).expect("ascii")
}

/// Names of one run's resources.
pub(crate) struct Names<'a>(pub &'a str);

impl Names<'_> {
    pub fn netns(&self, i: usize) -> String {
        format!("{}-h{i}", self.0)
    }
    pub fn data_bridge(&self) -> String {
        format!("{}bd", self.0)
    }
    pub fn mgmt_bridge(&self) -> String {
        format!("{}bm", self.0)
    }
    /// Bridge-side end of host `i`'s data veth.
    pub fn data_veth(&self, i: usize) -> String {
        format!("{}d{i}", self.0)
    }
    /// Bridge-side end of host `i`'s management veth.
    pub fn mgmt_veth(&self, i: usize) -> String {
        format!("{}m{i}", self.0)
    }
    /// The NPU fabric's bridge.
    pub fn npu_bridge(&self) -> String {
        format!("{}bn", self.0)
    }
    /// Bridge-side end of host `i`'s NPU `n` veth (one number, so the name stays within
    /// `IFNAMSIZ` and of a shape cleanup recognises).
    pub fn npu_veth(&self, i: usize, n: u32) -> String {
        format!("{}n{}", self.0, i * MAX_NPUS as usize + n as usize)
    }
}

/// Which /24 pair an instance uses: data `198.18.<index>.0/24`, management
/// `198.19.<index>.0/24`. Two instances alive at once need different indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubnetIndex {
    /// The first index whose two /24s are unused in the root namespace, chosen under a
    /// cross-process lock, so parallel tests never collide.
    #[default]
    Auto,
    /// Exactly this index; creation fails with [`Error::SubnetInUse`] if it is taken.
    Fixed(u8),
}

/// The data and management /24s of one instance (or, for loopback hosts, two /24s in
/// 127.0.0.0/8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnets {
    /// Network address of the data /24 (e.g. 198.18.0.0).
    pub data: Ipv4Addr,
    /// Network address of the management /24 (e.g. 198.19.0.0).
    pub mgmt: Ipv4Addr,
}

impl Subnets {
    /// The pair for an index in the benchmarking range.
    pub fn benchmarking(index: u8) -> Self {
        Subnets {
            data: Ipv4Addr::new(198, 18, index, 0),
            mgmt: Ipv4Addr::new(198, 19, index, 0),
        }
    }
}

/// `net` with its last octet replaced.
pub(crate) fn in_subnet(net: Ipv4Addr, last: u8) -> Ipv4Addr {
    let [a, b, c, _] = net.octets();
    Ipv4Addr::new(a, b, c, last)
}

/// The cross-process lock held while a subnet is picked and its bridges get addresses.
pub(crate) struct AllocLock(#[allow(dead_code)] File);

impl AllocLock {
    pub fn take() -> Result<Self> {
        let path = std::env::temp_dir().join("hcomm-simhosts.lock");
        let err = |source| Error::Lock {
            path: PathBuf::from(&path),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(err)?;
        file.lock().map_err(err)?;
        Ok(AllocLock(file))
    }
}

#[derive(Deserialize)]
struct IfAddrs {
    ifname: String,
    #[serde(default)]
    addr_info: Vec<AddrInfo>,
}

#[derive(Deserialize)]
struct AddrInfo {
    local: Ipv4Addr,
    prefixlen: u8,
}

/// Picks (or checks) a subnet pair against the IPv4 addresses in the root namespace.
/// Call with the [`AllocLock`] held.
pub(crate) fn choose_subnets(index: SubnetIndex) -> Result<Subnets> {
    let used: Vec<IfAddrs> =
        serde_json::from_str(&ip(&["-j", "-4", "addr", "show"])?).map_err(|e| Error::Command {
            command: "ip -j -4 addr show".into(),
            status: "unparsable output".into(),
            stderr: e.to_string(),
        })?;
    let conflict = |subnets: Subnets| {
        used.iter().find_map(|i| {
            i.addr_info.iter().find_map(|a| {
                [subnets.data, subnets.mgmt]
                    .into_iter()
                    .find(|net| overlaps(*net, 24, a.local, a.prefixlen))
                    .map(|net| (net, i.ifname.clone(), a))
            })
        })
    };
    match index {
        SubnetIndex::Fixed(k) => match conflict(Subnets::benchmarking(k)) {
            None => Ok(Subnets::benchmarking(k)),
            Some((net, interface, a)) => Err(Error::SubnetInUse {
                subnet: format!("{net}/24"),
                address: format!("{}/{}", a.local, a.prefixlen),
                interface,
            }),
        },
        SubnetIndex::Auto => (0..=u8::MAX)
            .map(Subnets::benchmarking)
            .find(|s| conflict(*s).is_none())
            .ok_or(Error::NoFreeSubnet),
    }
}

/// Whether two IPv4 networks share any address.
fn overlaps(a: Ipv4Addr, a_len: u8, b: Ipv4Addr, b_len: u8) -> bool {
    let len = a_len.min(b_len).min(32);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(a) & mask == u32::from(b) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_fixed_length_and_names_fit_ifnamsiz() {
        let p = new_prefix();
        assert_eq!(p.len(), PREFIX_LEN);
        let n = Names(&p);
        for name in [
            n.data_bridge(),
            n.mgmt_bridge(),
            n.data_veth(MAX_HOSTS - 1),
            n.mgmt_veth(MAX_HOSTS - 1),
            n.npu_bridge(),
            n.npu_veth(MAX_HOSTS - 1, MAX_NPUS - 1),
        ] {
            assert!(name.len() <= 15, "{name} is longer than IFNAMSIZ-1");
        }
    }

    #[test]
    fn owner_pid_round_trips() {
        assert_eq!(owner_pid(&new_prefix()), Some(std::process::id()));
        assert_eq!(owner_pid("eth0"), None);
    }

    #[test]
    fn only_names_of_our_own_shape_count_as_resources() {
        let p = new_prefix();
        let n = Names(&p);
        for name in [
            n.netns(3),
            n.data_bridge(),
            n.mgmt_bridge(),
            n.data_veth(12),
            n.mgmt_veth(0),
            n.npu_bridge(),
            n.npu_veth(7, 3),
        ] {
            assert_eq!(run_prefix_of(&name), Some(p.as_str()), "{name}");
        }
        for other in [
            "hcsomething",
            "hcsomethingelse",
            "eth0",
            "hcs",
            &format!("{p}x"),
            &format!("{p}d"),
        ] {
            assert_eq!(run_prefix_of(other), None, "{other}");
        }
    }

    #[test]
    fn overlap_covers_containment_both_ways() {
        let net = Ipv4Addr::new(198, 18, 3, 0);
        assert!(overlaps(net, 24, Ipv4Addr::new(198, 18, 3, 1), 24));
        assert!(overlaps(net, 24, Ipv4Addr::new(198, 18, 0, 1), 15));
        assert!(!overlaps(net, 24, Ipv4Addr::new(198, 18, 4, 1), 24));
        assert!(!overlaps(net, 24, Ipv4Addr::new(127, 0, 0, 1), 8));
    }
}
