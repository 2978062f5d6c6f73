//! The socket side of link authentication (see `crate::auth` for the protocol): runs the
//! four-message exchange on a fresh stream for either side, with no state kept between
//! attempts. Callers bound it with the connect timeout.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::auth::{self, Challenge, Hello, MAC_LEN, Purpose, Reject, RejectCode, Side, Transcript};
use crate::frame::{FrameError, HEADER_LEN, Header, Kind};

/// Handshake frames are small; anything bigger is hostile.
const MAX_HANDSHAKE_FRAME: usize = 64 << 10;

#[derive(Debug)]
pub enum HsError {
    Io(std::io::Error),
    /// The acceptor closed the connection before answering the hello: its listener did
    /// not admit it (a per-peer or total cap was full, `crate::listen`) or is stopping.
    /// Not a refusal of this connector (those come as a `Reject` frame): worth retrying.
    NotAdmitted(std::io::Error),
    Frame(FrameError),
    /// Authentication failed; the text says which side could not prove the secret.
    Auth(String),
    /// The connector's epoch is older than the acceptor's.
    Stale {
        local: u64,
        remote: u64,
    },
    Protocol(String),
}

impl From<std::io::Error> for HsError {
    fn from(e: std::io::Error) -> Self {
        HsError::Io(e)
    }
}

impl From<FrameError> for HsError {
    fn from(e: FrameError) -> Self {
        HsError::Frame(e)
    }
}

/// Whether the peer closed the connection (end of stream, reset, broken pipe).
fn closed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
    )
}

pub async fn read_frame(s: &mut TcpStream, max: usize) -> Result<(Header, Vec<u8>), HsError> {
    let mut head = [0u8; HEADER_LEN];
    s.read_exact(&mut head).await?;
    let h = Header::decode(&head, max)?;
    let mut payload = vec![0u8; h.len as usize];
    s.read_exact(&mut payload).await?;
    Ok((h, payload))
}

pub async fn write_frame(
    s: &mut TcpStream,
    kind: Kind,
    epoch: u64,
    ctx: u64,
    payload: &[u8],
) -> Result<(), HsError> {
    let h = Header::new(kind, epoch, ctx, 0, payload.len());
    let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
    buf.extend_from_slice(&h.encode());
    buf.extend_from_slice(payload);
    s.write_all(&buf).await?;
    Ok(())
}

async fn reject(s: &mut TcpStream, epoch: u64, code: RejectCode, message: &str) {
    let r = Reject {
        code,
        message: message.to_string(),
    };
    // Best effort: the peer may already be gone.
    let _ = write_frame(s, Kind::Reject, epoch, 0, &r.encode()).await;
    let _ = s.flush().await;
}

fn rejected(payload: &[u8], local: u64, remote: u64) -> HsError {
    match Reject::decode(payload) {
        Ok(r) => match r.code {
            RejectCode::Auth => HsError::Auth(format!("peer refused us: {}", r.message)),
            RejectCode::StaleEpoch => HsError::Stale { local, remote },
            RejectCode::Protocol | RejectCode::Rendezvous => {
                HsError::Protocol(format!("peer refused us: {}", r.message))
            }
        },
        Err(e) => HsError::Frame(e),
    }
}

/// What the connector learns about the acceptor.
#[derive(Debug, Clone, Copy)]
pub struct Accepted {
    pub endpoint: u64,
}

/// Connector side. `epoch` is the epoch this link is for.
pub async fn connect(
    s: &mut TcpStream,
    secret: &[u8],
    purpose: Purpose,
    endpoint: u64,
    listen: &str,
    epoch: u64,
) -> Result<Accepted, HsError> {
    let nonce_c = auth::random::<32>();
    let hello = Hello {
        purpose,
        endpoint,
        listen: listen.to_string(),
        nonce: nonce_c,
    };
    let answer = async {
        write_frame(s, Kind::Hello, epoch, 0, &hello.encode()).await?;
        read_frame(s, MAX_HANDSHAKE_FRAME).await
    };
    let (h, p) = answer.await.map_err(|e| match e {
        HsError::Io(io) if closed(&io) => HsError::NotAdmitted(io),
        other => other,
    })?;
    let ch = match h.kind {
        Kind::Challenge => Challenge::decode(&p)?,
        Kind::Reject => return Err(rejected(&p, epoch, h.epoch)),
        k => return Err(HsError::Protocol(format!("expected Challenge, got {k}"))),
    };
    let t = Transcript {
        purpose,
        nonce_c: &nonce_c,
        nonce_a: &ch.nonce,
        endpoint_c: endpoint,
        endpoint_a: ch.endpoint,
        epoch_c: epoch,
        epoch_a: h.epoch,
    };
    if !auth::verify(secret, Side::Acceptor, &t, &ch.mac) {
        let msg = "peer could not prove the group secret (wrong secret or not a group member)";
        reject(s, epoch, RejectCode::Auth, msg).await;
        return Err(HsError::Auth(msg.into()));
    }
    let mac_c = auth::mac(secret, Side::Connector, &t);
    write_frame(s, Kind::Response, epoch, 0, &mac_c).await?;
    let (h2, p2) = read_frame(s, MAX_HANDSHAKE_FRAME).await?;
    match h2.kind {
        Kind::Accept => Ok(Accepted {
            endpoint: ch.endpoint,
        }),
        Kind::Reject => Err(rejected(&p2, epoch, h.epoch)),
        k => Err(HsError::Protocol(format!("expected Accept, got {k}"))),
    }
}

/// What the acceptor learns about the connector.
#[derive(Debug, Clone)]
pub struct Connected {
    pub hello: Hello,
    pub epoch: u64,
}

/// Acceptor side. `my_epoch` is the endpoint's current epoch: peer links from older epochs
/// are refused as stale (after both sides proved the secret).
pub async fn accept(
    s: &mut TcpStream,
    secret: &[u8],
    endpoint: u64,
    my_epoch: u64,
) -> Result<Connected, HsError> {
    let (h, p) = read_frame(s, MAX_HANDSHAKE_FRAME).await?;
    if h.kind != Kind::Hello {
        return Err(HsError::Protocol(format!("expected Hello, got {}", h.kind)));
    }
    let hello = Hello::decode(&p)?;
    let nonce_a = auth::random::<32>();
    let t = Transcript {
        purpose: hello.purpose,
        nonce_c: &hello.nonce,
        nonce_a: &nonce_a,
        endpoint_c: hello.endpoint,
        endpoint_a: endpoint,
        epoch_c: h.epoch,
        epoch_a: my_epoch,
    };
    let ch = Challenge {
        endpoint,
        nonce: nonce_a,
        mac: auth::mac(secret, Side::Acceptor, &t),
    };
    write_frame(s, Kind::Challenge, my_epoch, 0, &ch.encode()).await?;
    let (h2, p2) = read_frame(s, MAX_HANDSHAKE_FRAME).await?;
    match h2.kind {
        Kind::Response => {}
        Kind::Reject => return Err(rejected(&p2, my_epoch, h.epoch)),
        k => return Err(HsError::Protocol(format!("expected Response, got {k}"))),
    }
    let mac_c: [u8; MAC_LEN] = p2
        .as_slice()
        .try_into()
        .map_err(|_| HsError::Protocol("response of wrong length".into()))?;
    if !auth::verify(secret, Side::Connector, &t, &mac_c) {
        let msg = "peer could not prove the group secret (wrong secret or not a group member)";
        reject(s, my_epoch, RejectCode::Auth, msg).await;
        return Err(HsError::Auth(msg.into()));
    }
    if hello.purpose == Purpose::Peer && h.epoch < my_epoch {
        let msg = format!(
            "epoch {} is older than this endpoint's epoch {my_epoch}",
            h.epoch
        );
        reject(s, my_epoch, RejectCode::StaleEpoch, &msg).await;
        return Err(HsError::Stale {
            local: my_epoch,
            remote: h.epoch,
        });
    }
    write_frame(s, Kind::Accept, my_epoch, 0, &[]).await?;
    Ok(Connected {
        hello,
        epoch: h.epoch,
    })
}
