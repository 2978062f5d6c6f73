//! [`Op`]: one operation in flight on a [`TcpComm`] — how one starts (`begin` for a collective,
//! `begin_p2p`), its tag and deadline, and the
//! send/receive primitives the executors use, whose errors name the peer (and, when a peer
//! was itself stuck on or cut off from a third rank, that rank).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::comm::{P2P_TAG, TcpComm};
use crate::api::{CommError, ErrorContext};
use crate::auth;
use crate::frame::{Header, Kind};
use crate::transport::mailbox::{Msg, PopError};

/// One operation in flight: its tag, its deadline and the communicator's send/receive
/// primitives with errors that name the peer. Dropping it before `finish` (cancellation)
/// poisons the communicator, since peers may be left mid-exchange.
pub(crate) struct Op<'a> {
    pub comm: &'a TcpComm,
    pub name: &'static str,
    pub tag: u64,
    pub deadline: Instant,
    /// Held by collectives: serialises them and fixes their tag order.
    pub(super) _seq: Option<tokio::sync::MutexGuard<'a, u64>>,
    pub(super) done: bool,
}

impl TcpComm {
    /// Starts a collective: serialises, refuses if poisoned, assigns the tag and deadline.
    ///
    /// The tag is the sequence number with a 16-bit signature of the call (operation, data
    /// type, reduce op, root, algorithm) in the low bits: ranks that disagree on the call
    /// never consume each other's frames — they time out naming the peer instead of
    /// producing a wrong result.
    pub(crate) async fn begin(
        &self,
        name: &'static str,
        signature: &[&str],
    ) -> Result<Op<'_>, CommError> {
        let mut seq = self.seq.lock().await;
        self.check_failed(name)?;
        let mut parts: Vec<&[u8]> = vec![name.as_bytes()];
        parts.extend(signature.iter().map(|s| s.as_bytes()));
        let tag = (*seq << 16) | (auth::hash64(&parts) & 0xffff);
        *seq += 1;
        self.ops.fetch_add(1, Ordering::Relaxed);
        Ok(Op {
            comm: self,
            name,
            tag,
            deadline: Instant::now() + self.op_timeout,
            _seq: Some(seq),
            done: false,
        })
    }

    /// Starts a point-to-point operation (not serialised with collectives, no sequence).
    pub(crate) fn begin_p2p(&self, name: &'static str, tag: u32) -> Result<Op<'_>, CommError> {
        self.check_failed(name)?;
        Ok(Op {
            comm: self,
            name,
            tag: P2P_TAG | u64::from(tag),
            deadline: Instant::now() + self.op_timeout,
            _seq: None,
            done: false,
        })
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if !self.done {
            let reason = format!("{} was cancelled mid-operation", self.name);
            self.comm.poison(self.tag, None, reason);
        }
    }
}

impl<'a> Op<'a> {
    pub fn rank(&self) -> usize {
        self.comm.rank
    }

    pub fn world(&self) -> usize {
        self.comm.world
    }

    /// Ends the operation; a failure poisons the communicator.
    pub async fn finish<T>(mut self, res: Result<T, CommError>) -> Result<T, CommError> {
        self.done = true;
        if let Err(e) = &res {
            // Blame the peer we failed on, unless we are only relaying someone else's abort.
            let blame = e
                .peer_rank()
                .filter(|_| matches!(e.category(), "timeout" | "peer_closed" | "unreachable"));
            self.comm.poison(self.tag, blame, e.to_string());
        }
        self.comm.flush_aborts().await;
        res
    }

    fn err_ctx(&self, peer: usize) -> Box<ErrorContext> {
        Box::new(self.comm.ctx_for(self.name, Some(peer)))
    }

    fn max_frame(&self) -> usize {
        self.comm.ep.inner.cfg.max_frame
    }

    /// Sends `data` to `to` as one or more frames (at least one, so empty messages match).
    pub async fn send(&self, to: usize, data: &[u8]) -> Result<(), CommError> {
        let c = self.comm;
        let Some(conn) = c.peers.get(to).and_then(|p| p.conn.as_ref()) else {
            if to == c.rank {
                let msg = Msg {
                    epoch: c.epoch,
                    data: data.to_vec(),
                };
                return c
                    .ep
                    .inner
                    .mail
                    .push((c.ep.id(), c.ctx, self.tag), msg)
                    .map_err(|e| CommError::Limit {
                        ctx: self.err_ctx(to),
                        reason: e.to_string(),
                    });
            }
            return Err(CommError::invalid(self.name, format!("no rank {to}")));
        };
        let max = self.max_frame();
        let mut chunks = data.chunks(max);
        let first = chunks.next().unwrap_or(&[]);
        for chunk in std::iter::once(first).chain(chunks) {
            let h = Header::new(Kind::Data, c.epoch, c.ctx, self.tag, chunk.len());
            match tokio::time::timeout_at(self.deadline, conn.write_frame(h, chunk)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(match e.kind() {
                        std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted => {
                            self.explain_closed(to, format!("sending: {e}")).await
                        }
                        _ => CommError::Io {
                            ctx: self.err_ctx(to),
                            source: e,
                        },
                    });
                }
                Err(_) => {
                    return Err(CommError::Timeout {
                        ctx: self.err_ctx(to),
                        after: c.op_timeout,
                    });
                }
            }
        }
        Ok(())
    }

    /// Hands a received buffer back to the pool.
    pub fn recycle(&self, v: Vec<u8>) {
        self.comm.ep.inner.mail.recycle(v);
    }

    /// Next frame from `from`.
    pub async fn recv_frame(&self, from: usize) -> Result<Vec<u8>, CommError> {
        let c = self.comm;
        let peer = c
            .peers
            .get(from)
            .ok_or_else(|| CommError::invalid(self.name, format!("no rank {from}")))?;
        let key = (peer.endpoint, c.ctx, self.tag);
        match c.ep.inner.mail.pop(key, self.deadline).await {
            Ok(m) if m.epoch == c.epoch => Ok(m.data),
            Ok(m) => Err(CommError::StaleEpoch {
                ctx: self.err_ctx(from),
                local_epoch: c.epoch,
                remote_epoch: m.epoch,
            }),
            Err(PopError::Timeout) => Err(self.timed_out_waiting_for(from).await),
            Err(PopError::PeerDead(detail)) => Err(self.explain_closed(from, detail).await),
            Err(PopError::Aborted(notice)) => {
                let reason = notice.reason;
                let rank_of = |ep: u64| c.peers.iter().position(|p| p.endpoint == ep);
                // Name the rank the aborting peer blames, else the aborting peer itself.
                let me = c.ep.id();
                let origin = notice
                    .blame
                    .filter(|b| *b != me)
                    .and_then(rank_of)
                    .or_else(|| rank_of(notice.from));
                let blamed_me =
                    c.ep.inner
                        .mail
                        .notices(c.ctx)
                        .iter()
                        .any(|n| n.blame == Some(me));
                if blamed_me && from != self.rank() {
                    // A peer gave up waiting for us while we were still waiting for `from`:
                    // pass the blame along so the whole group names the stuck rank.
                    let why = format!("{} still waiting for rank {from}", self.name);
                    c.poison(self.tag, Some(from), why);
                    return Err(CommError::Aborted {
                        ctx: self.err_ctx(from),
                        reason: format!(
                            "still waiting for this rank when a peer gave up: {reason}"
                        ),
                    });
                }
                Err(CommError::Aborted {
                    ctx: Box::new(c.ctx_for(self.name, origin)),
                    reason,
                })
            }
        }
    }

    /// One frame of exactly `len` bytes from `from` (segments of a pipelined schedule).
    pub async fn recv_exact(&self, from: usize, len: usize) -> Result<Vec<u8>, CommError> {
        let m = self.recv_frame(from).await?;
        if m.len() != len {
            return Err(self.size_mismatch(from, len, m.len()));
        }
        Ok(m)
    }

    /// A whole message of exactly `out.len()` bytes from `from` (any number of frames).
    pub async fn recv_into(&self, from: usize, out: &mut [u8]) -> Result<(), CommError> {
        let mut at = 0;
        loop {
            let m = self.recv_frame(from).await?;
            if at + m.len() > out.len() {
                return Err(self.size_mismatch(from, out.len(), at + m.len()));
            }
            out[at..at + m.len()].copy_from_slice(&m);
            at += m.len();
            self.recycle(m);
            if at == out.len() {
                return Ok(());
            }
        }
    }

    /// A whole message of `len` bytes as an owned buffer.
    pub async fn recv_vec(&self, from: usize, len: usize) -> Result<Vec<u8>, CommError> {
        let first = self.recv_frame(from).await?;
        if first.len() == len {
            return Ok(first);
        }
        if first.len() > len {
            return Err(self.size_mismatch(from, len, first.len()));
        }
        // Sized once: growing a multi-frame message would copy it again and again.
        let mut out = self.comm.ep.inner.mail.buffer(len);
        out.extend_from_slice(&first);
        self.recycle(first);
        while out.len() < len {
            let m = self.recv_frame(from).await?;
            if out.len() + m.len() > len {
                return Err(self.size_mismatch(from, len, out.len() + m.len()));
            }
            out.extend_from_slice(&m);
            self.recycle(m);
        }
        Ok(out)
    }

    /// The link to `peer` closed. If the peer aborted first and blamed a third rank (it
    /// lost *its* peer), name that rank: a closing cascade should not hide the first failure.
    async fn explain_closed(&self, peer: usize, detail: String) -> CommError {
        let c = self.comm;
        let peer_ep = c.peers[peer].endpoint;
        // Let the link's reader drain what the peer sent before closing (its abort notice).
        let until = Instant::now() + Duration::from_millis(200);
        while !c.ep.inner.mail.is_dead(peer_ep) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let me = c.ep.id();
        let culprit = c.ep.inner.mail.notices(c.ctx).into_iter().find_map(|n| {
            let b = n.blame.filter(|b| *b != me && *b != peer_ep)?;
            Some((c.peers.iter().position(|p| p.endpoint == b)?, n.reason))
        });
        match culprit {
            Some((q, reason)) => CommError::Aborted {
                ctx: Box::new(c.ctx_for(self.name, Some(q))),
                reason: format!("{reason} (then rank {peer}'s link closed: {detail})"),
            },
            None => CommError::PeerClosed {
                ctx: self.err_ctx(peer),
                detail,
            },
        }
    }

    /// A wait on `from` expired. Tell the peers at once (blaming `from`), then give them a
    /// moment to tell us whom *they* were stuck on: if `from` was itself waiting on a third
    /// rank, that rank is the likely culprit and the error names it.
    async fn timed_out_waiting_for(&self, from: usize) -> CommError {
        let c = self.comm;
        let reason = format!("{} timed out waiting for rank {from}", self.name);
        c.poison(self.tag, Some(from), reason);
        let grace = (c.op_timeout / 4).min(Duration::from_millis(500));
        let until = Instant::now() + grace;
        let me = c.ep.id();
        let from_ep = c.peers[from].endpoint;
        let culprit = loop {
            let found = c.ep.inner.mail.notices(c.ctx).into_iter().find_map(|n| {
                let b = n.blame?;
                (n.from == from_ep && b != me && b != from_ep)
                    .then(|| c.peers.iter().position(|p| p.endpoint == b))
                    .flatten()
            });
            if found.is_some() || Instant::now() >= until {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        match culprit {
            Some(q) => CommError::Timeout {
                ctx: Box::new(c.ctx_for(
                    &format!("{} (rank {from} was waiting for this rank too)", self.name),
                    Some(q),
                )),
                after: c.op_timeout,
            },
            None => CommError::Timeout {
                ctx: self.err_ctx(from),
                after: c.op_timeout,
            },
        }
    }

    fn size_mismatch(&self, from: usize, want: usize, got: usize) -> CommError {
        CommError::Protocol {
            ctx: self.err_ctx(from),
            reason: format!(
                "expected {want} bytes, peer sent {got} (do all ranks pass the same sizes?)"
            ),
        }
    }
}
