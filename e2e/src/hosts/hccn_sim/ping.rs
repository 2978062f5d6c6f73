//! The NPU ping of the `hccn_tool` simulator: real ICMP echo requests sent from one NPU
//! port (a raw socket bound to the interface, so the packets leave by that port and no
//! other), each waiting a bounded time for its reply. The simulator runs as root inside
//! the host's namespace, as the real tool does on a node.

use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Why no ping could be attempted (lost replies are not errors: they are the answer).
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    /// The raw socket could not be made or bound to the port.
    #[error("cannot open an ICMP socket on {port}: {source}")]
    Socket {
        /// The NPU port.
        port: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

const ECHO_REQUEST: u8 = 8;
const ECHO_REPLY: u8 = 0;

/// Sends `count` echo requests to `target` from `port`, waiting up to `wait` for each
/// reply; returns the (1-based) sequence numbers that got none.
pub fn ping(
    port: &str,
    target: Ipv4Addr,
    count: u16,
    wait: Duration,
) -> Result<Vec<u16>, PingError> {
    let socket_err = |source| PingError::Socket {
        port: port.to_owned(),
        source,
    };
    let socket =
        Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)).map_err(socket_err)?;
    socket
        .bind_device(Some(port.as_bytes()))
        .map_err(socket_err)?;
    let id = (std::process::id() & 0xffff) as u16;
    let to = SockAddr::from(SocketAddrV4::new(target, 0));
    let mut lost = Vec::new();
    for seq in 1..=count {
        // A port without carrier may refuse to send: that request is lost, like any other.
        let sent = socket.send_to(&echo_request(id, seq), &to).is_ok();
        if !(sent && await_reply(&socket, target, id, seq, wait)) {
            lost.push(seq);
        }
    }
    Ok(lost)
}

/// Reads until the matching reply arrives or `wait` is over.
fn await_reply(socket: &Socket, target: Ipv4Addr, id: u16, seq: u16, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 1500];
    loop {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return false;
        };
        if left.is_zero() || socket.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        match (&*socket).read(&mut buf) {
            Ok(n) if is_reply(&buf[..n], target, id, seq) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

/// An ICMP echo request with a 32-byte payload.
pub fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut p = vec![ECHO_REQUEST, 0, 0, 0];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend((0..32u8).map(|i| b'a' + i % 26));
    let sum = checksum(&p);
    p[2..4].copy_from_slice(&sum.to_be_bytes());
    p
}

/// Whether `packet` (an IPv4 datagram as a raw socket delivers it) is the echo reply
/// from `target` to request (`id`, `seq`).
pub fn is_reply(packet: &[u8], target: Ipv4Addr, id: u16, seq: u16) -> bool {
    let Some(&vihl) = packet.first() else {
        return false;
    };
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || packet.len() < ihl + 8 || packet.len() < 20 {
        return false;
    }
    let source = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let icmp = &packet[ihl..];
    source == target
        && icmp[0] == ECHO_REPLY
        && icmp[4..6] == id.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
}

/// The Internet checksum (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_checksums_to_zero_and_its_reply_is_recognised() {
        let req = echo_request(0x1234, 2);
        assert_eq!(checksum(&req), 0, "a valid packet sums to 0xffff");
        let target = Ipv4Addr::new(192, 168, 1, 10);
        let mut reply = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
        reply.extend_from_slice(&target.octets());
        reply.extend_from_slice(&[192, 168, 0, 10]);
        let mut icmp = req.clone();
        icmp[0] = ECHO_REPLY;
        reply.extend_from_slice(&icmp);
        assert!(is_reply(&reply, target, 0x1234, 2));
        assert!(!is_reply(&reply, target, 0x1234, 3), "another sequence");
        assert!(
            !is_reply(&reply, Ipv4Addr::new(192, 168, 1, 11), 0x1234, 2),
            "another source"
        );
        assert!(!is_reply(&reply[..22], target, 0x1234, 2), "truncated");
    }
}
