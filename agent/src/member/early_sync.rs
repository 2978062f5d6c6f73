//! A joiner's weight sync begun before its own rank table. The operator creates a joiner's
//! Pod, waits for the device plugin's allocation of every joiner of the epoch, and only
//! then writes the epoch's table: tens of milliseconds for one joiner here, 0.45 s for
//! eight, longer on a busy cluster. The weights do not depend on that table — only on the
//! group's spec (the digest every chunk is checked against) and on who holds them: the
//! serving members, which the table the joiner can already read (the epoch before its own)
//! names. So while it waits ([`super::task`]'s start) the joiner checks that table as it
//! would any table it dials from — static address and port rules, every server a node
//! running one of the group's members (`ranktable_members::check_table`) — chooses
//! its data NIC, and starts the sync from those servers ([`super::prefetch::Start::Early`]).
//!
//! Nothing else moves earlier: the member is verified against its own table before it
//! syncs "officially" (Verifying, then Syncing) and joins nothing before. The early sync
//! stands for the verified one only when that one asks no source it lacked; with fellow
//! joiners in the table it is stopped and the sync begins anew with them, keeping every
//! chunk already staged. A check that fails or a sync that fails costs the member nothing
//! but the attempt: it is logged and the usual path runs.

use std::time::Duration;

use super::prefetch::{Prefetch, Start};
use super::task::Run;
use super::verify::Against;

/// How long the early check's reads may take (it delays noticing the member's own table).
const CHECK_DEADLINE: Duration = Duration::from_secs(2);

impl Run {
    /// Starts the early sync unless one was tried already, one runs, the group has no
    /// weights, or the table read names no server to fetch from.
    pub(super) async fn begin_early_sync(&mut self) {
        if self.early_tried || self.prefetch.is_some() || self.group.weights.is_none() {
            return;
        }
        let Some((table, epoch)) = self.table.clone() else {
            return;
        };
        if table.servers().is_empty() {
            return;
        }
        self.early_tried = true;
        let ifname = self.socket_ifname();
        let against = Against {
            table: &table,
            table_revision: self.table_revision.as_deref(),
            group_uid: &self.group.uid,
        };
        let check = self
            .ports
            .verifier
            .early_sources(&self.spec, ifname.as_deref(), against);
        let sources = match tokio::time::timeout(CHECK_DEADLINE, check).await {
            Ok(Ok(s)) => s,
            Ok(Err(why)) => {
                tracing::info!(table_epoch = epoch, %why, "no early weight sync");
                return;
            }
            Err(_) => {
                tracing::info!(
                    table_epoch = epoch,
                    "no early weight sync: its check took over {CHECK_DEADLINE:?}"
                );
                return;
            }
        };
        let mut req = self.weights_request(&sources.chosen, None);
        req.peers = sources.peers;
        self.prefetch = Some(Prefetch::start(
            self.ports.weights.clone(),
            req,
            Start::Early,
        ));
    }
}
