//! The rendezvous sessions a root endpoint holds open: registrations by (session id,
//! epoch), completed into a rank table once every rank is in.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::bootstrap::{MAX_WORLD, PeerEntry, Register, Table};

/// Rendezvous sessions one root holds open at once: an authenticated peer inventing
/// session ids must not grow the table without bound (each session waits for its ranks
/// at most the init timeout, then is forgotten).
pub(super) const MAX_SESSIONS: usize = 256;

/// Rank slots of all open sessions together (one very large world fits, many do not).
pub(super) const MAX_SESSION_SLOTS: usize = 2 * MAX_WORLD;

pub(super) type Outcome = Option<Result<Table, String>>;

struct Session {
    world: u32,
    entries: Vec<Option<PeerEntry>>,
    done: watch::Sender<Outcome>,
}

/// Open sessions of a root, keyed by (session id, epoch).
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<([u8; 16], u64), Session>>,
}

impl Sessions {
    /// Records a registration; returns a receiver that yields the table when complete.
    pub(super) fn register(
        &self,
        epoch: u64,
        reg: &Register,
    ) -> Result<watch::Receiver<Outcome>, String> {
        let addr: SocketAddr = reg
            .listen
            .parse()
            .map_err(|_| format!("bad listen address {:?}", reg.listen))?;
        if reg.world == 0 || reg.world as usize > MAX_WORLD || reg.rank >= reg.world {
            return Err(format!(
                "rank {} out of range for world size {}",
                reg.rank, reg.world
            ));
        }
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let key = (reg.session, epoch);
        if !map.contains_key(&key) {
            let slots: usize = map.values().map(|s| s.entries.len()).sum();
            if map.len() >= MAX_SESSIONS || slots + reg.world as usize > MAX_SESSION_SLOTS {
                return Err(format!(
                    "{} rendezvous sessions with {slots} rank slots open at this root, \
                     the most it holds",
                    map.len()
                ));
            }
        }
        let s = map.entry(key).or_insert_with(|| Session {
            world: reg.world,
            entries: vec![None; reg.world as usize],
            done: watch::channel(None).0,
        });
        if s.world != reg.world {
            return Err(format!(
                "rank {} says world size {}, but earlier ranks said {}",
                reg.rank, reg.world, s.world
            ));
        }
        let slot = &mut s.entries[reg.rank as usize];
        if let Some(e) = slot
            && e.endpoint != reg.endpoint
        {
            return Err(format!(
                "rank {} is already registered by another process at {}",
                reg.rank, e.addr
            ));
        }
        *slot = Some(PeerEntry {
            endpoint: reg.endpoint,
            addr,
        });
        let rx = s.done.subscribe();
        if s.entries.iter().all(Option::is_some) {
            let peers: Vec<PeerEntry> = s.entries.iter().flatten().cloned().collect();
            s.done.send_replace(Some(Ok(Table { peers })));
            map.remove(&key);
        }
        Ok(rx)
    }

    pub(super) fn forget(&self, session: [u8; 16], epoch: u64) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.remove(&(session, epoch)) {
            s.done
                .send_replace(Some(Err("rendezvous session expired".into())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(session: u8, world: u32) -> Register {
        Register {
            session: [session; 16],
            world,
            rank: 0,
            endpoint: 1,
            listen: "127.0.0.1:1".into(),
        }
    }

    #[test]
    fn open_sessions_and_their_rank_slots_are_capped() {
        let s = Sessions::default();
        for i in 0..MAX_SESSIONS {
            let mut r = reg(0, 2);
            r.session[..8].copy_from_slice(&(i as u64).to_le_bytes());
            s.register(1, &r).unwrap();
        }
        let refused = s.register(1, &reg(0xee, 2)).unwrap_err();
        assert!(refused.contains("the most it holds"), "{refused}");
        // A rank of an open session still registers.
        let mut second = reg(0, 2);
        second.session[..8].copy_from_slice(&0u64.to_le_bytes());
        second.rank = 1;
        second.endpoint = 2;
        s.register(1, &second).unwrap();

        let s = Sessions::default();
        s.register(1, &reg(1, MAX_WORLD as u32)).unwrap();
        s.register(1, &reg(2, MAX_WORLD as u32)).unwrap();
        assert!(s.register(1, &reg(3, 2)).is_err(), "slots are spent");
        s.forget([1; 16], 1);
        s.register(1, &reg(3, 2)).unwrap();
    }
}
