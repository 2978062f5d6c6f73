//! The rendezvous sessions a root endpoint holds open: registrations by (session id,
//! epoch), completed into a rank table once every rank is in.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::bootstrap::{MAX_WORLD, PeerEntry, Register, Table};

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
