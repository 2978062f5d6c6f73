//! Pure parsers of `hccn_tool`'s documented outputs (A2/A3, `-i <id> -<obj> -g`; the
//! samples are those in ASCEND.md §3, from MindCluster's captures and the HCCL fault
//! guides). Anything else is a [`ParseError`] naming the command: a health check never
//! guesses from text it does not understand.

use std::net::Ipv4Addr;

use hcomm_crds::node::NpuLink;

/// Output that does not have the documented shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hccn_tool {command}: {what} (output: {excerpt:?})")]
pub struct ParseError {
    pub command: &'static str,
    pub what: &'static str,
    /// The output's first 200 characters.
    pub excerpt: String,
}

fn err(command: &'static str, what: &'static str, text: &str) -> ParseError {
    ParseError {
        command,
        what,
        excerpt: text.chars().take(200).collect(),
    }
}

/// `key:value` lines, keys trimmed, in order.
fn fields(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
}

/// `-ip -g`: `ipaddr:192.161.200.10` / `netmask:255.255.255.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    pub address: Ipv4Addr,
    pub netmask: Option<Ipv4Addr>,
}

pub fn parse_ip(text: &str) -> Result<IpInfo, ParseError> {
    const CMD: &str = "-ip -g";
    let mut address = None;
    let mut netmask = None;
    for (k, v) in fields(text) {
        match k {
            "ipaddr" => {
                address = Some(
                    v.parse()
                        .map_err(|_| err(CMD, "ipaddr is not an IPv4 address", text))?,
                );
            }
            "netmask" => {
                netmask = Some(
                    v.parse()
                        .map_err(|_| err(CMD, "netmask is not an IPv4 mask", text))?,
                );
            }
            _ => {}
        }
    }
    let address = address.ok_or_else(|| err(CMD, "no ipaddr line", text))?;
    Ok(IpInfo { address, netmask })
}

/// `-link -g`: `link status: UP` or `link status: DOWN`.
pub fn parse_link(text: &str) -> Result<NpuLink, ParseError> {
    const CMD: &str = "-link -g";
    let (_, v) = fields(text)
        .find(|(k, _)| *k == "link status")
        .ok_or_else(|| err(CMD, "no `link status:` line", text))?;
    match v {
        "UP" => Ok(NpuLink::Up),
        "DOWN" => Ok(NpuLink::Down),
        _ => Err(err(CMD, "link status is neither UP nor DOWN", text)),
    }
}

/// `-net_health -g`: `net health status: Success`; `Fault`, `Socket failed` and others
/// are faults (the documented set may be larger, so any word is taken as the tool's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetHealth(pub String);

impl NetHealth {
    pub fn healthy(&self) -> bool {
        self.0 == "Success"
    }
}

pub fn parse_net_health(text: &str) -> Result<NetHealth, ParseError> {
    const CMD: &str = "-net_health -g";
    let (_, v) = fields(text)
        .find(|(k, _)| *k == "net health status")
        .ok_or_else(|| err(CMD, "no `net health status:` line", text))?;
    if v.is_empty() {
        return Err(err(CMD, "empty net health status", text));
    }
    Ok(NetHealth(v.to_owned()))
}

/// `-tls -g`: `dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1]...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsState {
    pub dev_id: Option<u32>,
    pub enabled: bool,
}

pub fn parse_tls(text: &str) -> Result<TlsState, ParseError> {
    const CMD: &str = "-tls -g";
    let at = text
        .find("tls switch[")
        .ok_or_else(|| err(CMD, "no `tls switch[...]` field", text))?;
    let rest = &text[at + "tls switch[".len()..];
    let end = rest
        .find(']')
        .ok_or_else(|| err(CMD, "`tls switch[` is not closed", text))?;
    let enabled = match &rest[..end] {
        "0" => false,
        "1" => true,
        _ => return Err(err(CMD, "tls switch is neither 0 nor 1", text)),
    };
    let dev_id = text
        .find("dev_id:")
        .map(|i| &text[i + "dev_id:".len()..])
        .and_then(|s| {
            let digits: String = s
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        });
    Ok(TlsState { dev_id, enabled })
}

/// `-ping -g address X`: the summary `3 packets transmitted, 3 received, 0.00% packet
/// loss`, or only the failure lines `recv time out seq ...` (nothing came back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingResult {
    pub transmitted: u32,
    pub received: u32,
}

impl PingResult {
    /// The peer answered at least once: the path works (loss is reported, not refused).
    pub fn reached(&self) -> bool {
        self.received > 0
    }
}

pub fn parse_ping(text: &str) -> Result<PingResult, ParseError> {
    const CMD: &str = "-ping -g";
    for line in text.lines() {
        let Some(tx) = line.find(" packets transmitted") else {
            continue;
        };
        let transmitted = line[..tx]
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| err(CMD, "packets transmitted is not a number", text))?;
        let after = &line[tx + " packets transmitted".len()..];
        let received = after
            .trim_start_matches(',')
            .split_whitespace()
            .collect::<Vec<_>>();
        let received = match received.as_slice() {
            [n, "received", ..] | [n, "received,", ..] => n
                .parse()
                .map_err(|_| err(CMD, "received is not a number", text))?,
            _ => return Err(err(CMD, "no received count after transmitted", text)),
        };
        if received > transmitted {
            return Err(err(CMD, "more packets received than transmitted", text));
        }
        return Ok(PingResult {
            transmitted,
            received,
        });
    }
    let timeouts = text
        .lines()
        .filter(|l| l.contains("recv time out seq"))
        .count();
    if timeouts > 0 {
        return Ok(PingResult {
            transmitted: timeouts as u32,
            received: 0,
        });
    }
    Err(err(
        CMD,
        "neither a summary nor `recv time out seq` lines",
        text,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_parses_the_documented_sample() {
        let i = parse_ip("ipaddr:192.161.200.10\nnetmask:255.255.255.0\n").unwrap();
        assert_eq!(i.address, Ipv4Addr::new(192, 161, 200, 10));
        assert_eq!(i.netmask, Some(Ipv4Addr::new(255, 255, 255, 0)));
    }

    #[test]
    fn ip_garbage_is_a_parse_error() {
        for bad in [
            "",
            "command not found",
            "ipaddr:192.161.200",
            "netmask:1.2.3.4",
        ] {
            let e = parse_ip(bad).unwrap_err();
            assert_eq!(e.command, "-ip -g", "{bad:?}");
        }
    }

    #[test]
    fn link_parses_up_and_down_and_refuses_anything_else() {
        assert_eq!(parse_link("link status: UP\n").unwrap(), NpuLink::Up);
        assert_eq!(parse_link("link status: DOWN").unwrap(), NpuLink::Down);
        assert!(parse_link("link status: up?").is_err());
        assert!(parse_link("device busy").is_err());
    }

    #[test]
    fn net_health_keeps_the_tools_word_and_only_success_is_healthy() {
        assert!(
            parse_net_health("net health status: Success")
                .unwrap()
                .healthy()
        );
        let f = parse_net_health("net health status: Socket failed").unwrap();
        assert_eq!(f.0, "Socket failed");
        assert!(!f.healthy());
        assert!(
            !parse_net_health("net health status: Fault")
                .unwrap()
                .healthy()
        );
        assert!(parse_net_health("net health status: ").is_err());
        assert!(parse_net_health("garbage").is_err());
    }

    #[test]
    fn tls_reads_the_switch_of_the_documented_line() {
        let s = "dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), tls alarm time threshold[60]days";
        assert_eq!(
            parse_tls(s).unwrap(),
            TlsState {
                dev_id: Some(0),
                enabled: false
            }
        );
        let on = s
            .replace("dev_id:0", "dev_id:3")
            .replace("switch[0]", "switch[1]");
        assert_eq!(
            parse_tls(&on).unwrap(),
            TlsState {
                dev_id: Some(3),
                enabled: true
            }
        );
        assert!(parse_tls("tls switch[2]").is_err());
        assert!(parse_tls("tls switch[1").is_err());
        assert!(parse_tls("dev_id:0").is_err());
    }

    #[test]
    fn ping_reads_the_summary_and_the_timeout_form() {
        let ok = parse_ping("3 packets transmitted, 3 received, 0.00% packet loss\n").unwrap();
        assert_eq!((ok.transmitted, ok.received), (3, 3));
        assert!(ok.reached());
        let lost = parse_ping(
            "recv time out seq=0\nrecv time out seq=1\n3 packets transmitted, 0 received, 100.00% packet loss\n",
        )
        .unwrap();
        assert!(!lost.reached());
        let timeouts = parse_ping("recv time out seq=0\nrecv time out seq=1\n").unwrap();
        assert_eq!((timeouts.transmitted, timeouts.received), (2, 0));
    }

    #[test]
    fn ping_garbage_is_a_parse_error() {
        for bad in [
            "",
            "ping: unknown host",
            "x packets transmitted, 3 received",
            "3 packets transmitted, lots received",
            "3 packets transmitted, 4 received, 0% packet loss",
        ] {
            assert!(parse_ping(bad).is_err(), "{bad:?}");
        }
    }
}
