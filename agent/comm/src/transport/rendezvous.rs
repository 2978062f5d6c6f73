//! Rendezvous: ranks register with the endpoint named in the [`RootInfo`] and get back the
//! rank table once all `world` ranks of that (session id, epoch) are in. The root checks that
//! every rank agrees on the world size and that no rank is claimed twice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::handshake::{self, HsError};
use super::inner::{Inner, hs_error};
use crate::api::{CommError, ErrorContext};
use crate::auth::{Purpose, Reject, RejectCode};
use crate::bootstrap::{Register, RootInfo, Table};
use crate::frame::Kind;

/// A root gives up on an incomplete session after this long.
const SESSION_LIMIT: Duration = Duration::from_secs(600);
const MAX_TABLE_FRAME: usize = 8 << 20;

/// Root side: one registering rank on an authenticated stream.
pub async fn serve(inner: &Arc<Inner>, mut stream: TcpStream, addr: SocketAddr, epoch: u64) {
    let reg = match handshake::read_frame(&mut stream, 64 << 10).await {
        Ok((h, p)) if h.kind == Kind::Register => match Register::decode(&p) {
            Ok(r) => r,
            Err(e) => return refuse(inner, &mut stream, addr, epoch, e.to_string()).await,
        },
        Ok((h, _)) => {
            let msg = format!("expected Register, got {}", h.kind);
            return refuse(inner, &mut stream, addr, epoch, msg).await;
        }
        Err(_) => return,
    };
    let mut rx = match inner.sessions.register(epoch, &reg) {
        Ok(rx) => rx,
        Err(msg) => return refuse(inner, &mut stream, addr, epoch, msg).await,
    };
    tracing::debug!(rank = reg.rank, world = reg.world, epoch, %addr, "rank registered");
    // The rank sends nothing more until it gets the table: a read that ends means it gave
    // up (its init deadline passed, or the group moved to another epoch). Its socket is
    // released then, not held until SESSION_LIMIT — roots of groups whose epochs change
    // often piled up such sockets.
    let mut probe = [0u8; 1];
    let outcome = tokio::time::timeout(SESSION_LIMIT, async {
        tokio::select! {
            v = rx.wait_for(Option::is_some) => Some(v.map(|v| v.clone())),
            _ = stream.read(&mut probe) => None,
        }
    })
    .await;
    let table = match outcome {
        Ok(Some(Ok(v))) => v,
        Ok(None) => {
            tracing::debug!(rank = reg.rank, epoch, %addr, "rank left the rendezvous before it completed");
            return;
        }
        _ => {
            inner.sessions.forget(reg.session, epoch);
            return;
        }
    };
    match table {
        Some(Ok(t)) => {
            let _ = handshake::write_frame(&mut stream, Kind::Table, epoch, 0, &t.encode()).await;
        }
        Some(Err(msg)) => refuse(inner, &mut stream, addr, epoch, msg).await,
        None => {}
    }
}

async fn refuse(inner: &Inner, stream: &mut TcpStream, addr: SocketAddr, epoch: u64, msg: String) {
    let r = Reject {
        code: RejectCode::Rendezvous,
        message: msg.clone(),
    };
    let _ = handshake::write_frame(stream, Kind::Reject, epoch, 0, &r.encode()).await;
    inner.reject(
        "rendezvous",
        format!("registration from {addr} at epoch {epoch}: {msg}"),
    );
}

/// Rank side: registers with the root and waits (until `deadline`) for the full table.
pub async fn join(
    inner: &Arc<Inner>,
    root: &RootInfo,
    world: usize,
    rank: usize,
    epoch: u64,
    deadline: Instant,
) -> Result<Table, CommError> {
    let ctx = ErrorContext {
        op: "rendezvous".into(),
        epoch,
        peer_rank: None,
        peer_addr: Some(format!("root {}", root.addr)),
        local: inner.local_desc.clone(),
    };
    let started = Instant::now();
    let connect_deadline = deadline.min(Instant::now() + inner.cfg.connect_timeout);
    let (mut stream, _) = inner
        .connect_admitted(
            root.addr,
            connect_deadline,
            &ctx,
            Purpose::Rendezvous,
            epoch,
        )
        .await?;
    let listen = inner.listen.to_string();
    let run = async {
        let reg = Register {
            session: root.id,
            world: world as u32,
            rank: rank as u32,
            endpoint: inner.id,
            listen: listen.clone(),
        };
        handshake::write_frame(&mut stream, Kind::Register, epoch, 0, &reg.encode()).await?;
        let (h, p) = handshake::read_frame(&mut stream, MAX_TABLE_FRAME).await?;
        match h.kind {
            Kind::Table => Ok(Table::decode(&p)?),
            Kind::Reject => {
                let r = Reject::decode(&p)?;
                Err(HsError::Protocol(format!(
                    "root refused the registration: {}",
                    r.message
                )))
            }
            k => Err(HsError::Protocol(format!("expected Table, got {k}"))),
        }
    };
    let table = match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return Err(hs_error(e, ctx)),
        Err(_) => {
            return Err(CommError::Timeout {
                ctx: Box::new(ErrorContext {
                    op: format!("rendezvous (waiting for all {world} ranks to register)"),
                    ..ctx
                }),
                after: started.elapsed(),
            });
        }
    };
    if table.peers.len() != world || table.peers[rank].endpoint != inner.id {
        return Err(CommError::Protocol {
            ctx: Box::new(ctx),
            reason: format!(
                "root sent a table of {} ranks (expected {world}) or without us at rank {rank}",
                table.peers.len()
            ),
        });
    }
    Ok(table)
}
