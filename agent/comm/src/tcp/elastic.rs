//! Elastic epochs on the TCP backend, make-before-break: each method builds a *new*
//! communicator beside the current one (which keeps serving collectives meanwhile) and the
//! caller switches when it is ready. Links live in the [`crate::tcp::Endpoint`], so:
//! - `grow`: the existing ranks and the joiners rendezvous at a new root info for the next
//!   epoch; only links to the joiners are dialled, survivors keep theirs.
//! - `shrink`: no rendezvous, no new links: survivors renumber densely in order and check
//!   that they agree on who left.
//! - `split(color, key)`: sub-communicators over the parent's links (same epoch).

use super::comm::{Peer, TcpComm};
use super::config::CommConfig;
use crate::api::{CommError, Communicator};
use crate::auth;
use crate::bootstrap::RootInfo;

impl TcpComm {
    /// Grows to `new_world` ranks at `new_epoch`: this rank keeps its rank; joiners take
    /// ranks `world_size()..new_world` by calling [`TcpComm::init`]/[`TcpComm::init_on`] with
    /// the same `root` and epoch. Every existing rank must call this.
    pub async fn grow(
        &self,
        root: RootInfo,
        new_world: usize,
        new_epoch: u64,
    ) -> Result<TcpComm, CommError> {
        if new_world < self.world || new_epoch <= self.epoch {
            return Err(CommError::invalid(
                "grow",
                format!(
                    "grow from {} ranks at epoch {} to {new_world} at epoch {new_epoch}: \
                     needs at least as many ranks and a newer epoch",
                    self.world, self.epoch
                ),
            ));
        }
        let mut cfg = self.derived_config(new_epoch);
        cfg.world_size = new_world;
        cfg.rank = self.rank;
        cfg.root = root;
        TcpComm::init_on(self.ep.clone(), cfg).await
    }

    /// Removes `leavers` (old ranks) at `new_epoch`. Survivors get dense new ranks in the old
    /// order and keep their links; returns None on a leaver. All survivors must call this
    /// with the same arguments (checked: a disagreement is a protocol error on every rank).
    pub async fn shrink(
        &self,
        leavers: &[usize],
        new_epoch: u64,
    ) -> Result<Option<TcpComm>, CommError> {
        if new_epoch <= self.epoch {
            return Err(CommError::invalid(
                "shrink",
                format!("new epoch {new_epoch} is not after {}", self.epoch),
            ));
        }
        if let Some(bad) = leavers.iter().find(|&&r| r >= self.world) {
            return Err(CommError::invalid(
                "shrink",
                format!("leaver {bad} is not a rank"),
            ));
        }
        if leavers.contains(&self.rank) {
            return Ok(None);
        }
        let mut sorted = leavers.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let plan: Vec<u8> = sorted
            .iter()
            .flat_map(|r| (*r as u64).to_le_bytes())
            .collect();
        let peers: Vec<Peer> = (0..self.world)
            .filter(|r| !sorted.contains(r))
            .map(|r| self.peers[r].clone())
            .collect();
        if peers.is_empty() {
            return Ok(None);
        }
        let rank = (0..self.rank).filter(|r| !sorted.contains(r)).count();
        let ctx = auth::hash64(&[
            b"shrink",
            &self.ctx.to_le_bytes(),
            &new_epoch.to_le_bytes(),
            &plan,
        ]);
        self.ep.advance_epoch(new_epoch);
        let comm = TcpComm::assemble(
            self.ep.clone(),
            &self.derived_config(new_epoch),
            self.algo,
            ctx,
            rank,
            peers,
        );
        comm.agree("shrink", &plan).await?;
        tracing::info!(group = %comm.group, epoch = new_epoch, rank, world = comm.world,
            "communicator shrunk");
        Ok(Some(comm))
    }

    /// Splits into sub-communicators: ranks with the same `color` form one, ordered by
    /// (`key`, old rank); `None` opts out (returns None). Collective over this communicator.
    pub async fn split(&self, color: Option<u32>, key: u32) -> Result<Option<TcpComm>, CommError> {
        let mut mine = [0u8; 16];
        mine[..8].copy_from_slice(&color.map_or(0, |c| u64::from(c) + 1).to_le_bytes());
        mine[8..].copy_from_slice(&u64::from(key).to_le_bytes());
        let tag = *self.seq.lock().await;
        let mut all = vec![0u8; 16 * self.world];
        self.all_gather(&mine, &mut all).await?;
        let Some(color) = color else { return Ok(None) };
        let entry = |r: usize| {
            let b = &all[16 * r..16 * r + 16];
            let c = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let k = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            (c, k)
        };
        let mut members: Vec<usize> = (0..self.world)
            .filter(|&r| entry(r).0 == u64::from(color) + 1)
            .collect();
        members.sort_by_key(|&r| (entry(r).1, r));
        let rank = members.iter().position(|&r| r == self.rank).unwrap_or(0);
        let peers = members.iter().map(|&r| self.peers[r].clone()).collect();
        let ctx = auth::hash64(&[
            b"split",
            &self.ctx.to_le_bytes(),
            &tag.to_le_bytes(),
            &color.to_le_bytes(),
        ]);
        let cfg: CommConfig = self.derived_config(self.epoch);
        Ok(Some(TcpComm::assemble(
            self.ep.clone(),
            &cfg,
            self.algo,
            ctx,
            rank,
            peers,
        )))
    }

    /// Checks that every rank holds the same `plan` (all-gather of its hash).
    async fn agree(&self, what: &str, plan: &[u8]) -> Result<(), CommError> {
        let h = auth::hash64(&[plan]).to_le_bytes();
        let mut all = vec![0u8; 8 * self.world];
        self.all_gather(&h, &mut all).await?;
        if let Some(r) = all.chunks(8).position(|c| c != h) {
            return Err(CommError::Protocol {
                ctx: Box::new(self.ctx_for(what, Some(r))),
                reason: format!("rank {r} disagrees on the {what} plan"),
            });
        }
        Ok(())
    }
}
