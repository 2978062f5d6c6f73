//! The Warning Events of one weight sync: corrupt chunks and lost sources, gathered while
//! the fetch runs and published as ONE Event per reason when it ends.
//!
//! Why one per reason: a bad source can corrupt hundreds of chunks, and one Event per
//! chunk would flood the Pod's Events (and the API server) while `kubectl describe` shows
//! only the latest few. Each note therefore names every source involved, addresses first
//! (notes are capped), details after. (It also predates `hcomm_events`: kube-rs' recorder,
//! used before, folded a second note of the same reason into the first one's series.)

use std::net::SocketAddr;

use hcomm_crds::contract::PodReason;

/// Longest note published (the Event API caps notes at 1 kB).
pub const MAX_NOTE: usize = 1000;
/// Corrupt chunks listed one by one before "and N more".
const LISTED: usize = 16;

/// What went wrong during one sync (no I/O).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncWarnings {
    /// (chunk index, source) of every chunk that did not match its digest.
    corrupt: Vec<(usize, SocketAddr)>,
    /// (source, why, chunks requeued) of every source given up.
    lost: Vec<(SocketAddr, String, usize)>,
}

impl SyncWarnings {
    pub fn corrupt(&mut self, index: usize, source: SocketAddr) {
        self.corrupt.push((index, source));
    }

    pub fn lost(&mut self, source: SocketAddr, why: impl Into<String>, requeued: usize) {
        self.lost.push((source, why.into(), requeued));
    }

    /// At most one (reason, note) per reason, corrupt chunks first.
    pub fn events(&self) -> Vec<(PodReason, String)> {
        let mut out = Vec::new();
        if !self.corrupt.is_empty() {
            let mut sources: Vec<SocketAddr> = self.corrupt.iter().map(|c| c.1).collect();
            dedup_in_order(&mut sources);
            let mut listed: Vec<String> = self
                .corrupt
                .iter()
                .take(LISTED)
                .map(|(i, s)| format!("#{i} from {s}"))
                .collect();
            if self.corrupt.len() > LISTED {
                listed.push(format!("and {} more", self.corrupt.len() - LISTED));
            }
            out.push((
                PodReason::CorruptWeightsChunk,
                cap(format!(
                    "{} chunk(s) from {} did not match their digests and were fetched again from other sources: {}",
                    self.corrupt.len(),
                    join(&sources),
                    listed.join(", ")
                )),
            ));
        }
        if !self.lost.is_empty() {
            let sources: Vec<SocketAddr> = self.lost.iter().map(|l| l.0).collect();
            let details: Vec<String> = self
                .lost
                .iter()
                .map(|(s, why, n)| format!("{s}: {why} ({n} chunk(s) requeued)"))
                .collect();
            out.push((
                PodReason::WeightsSourceLost,
                cap(format!(
                    "{} weights source(s) given up, their chunks requeued to the others: {}. {}",
                    self.lost.len(),
                    join(&sources),
                    details.join("; ")
                )),
            ));
        }
        out
    }
}

fn dedup_in_order(v: &mut Vec<SocketAddr>) {
    let mut seen = Vec::new();
    v.retain(|a| {
        let new = !seen.contains(a);
        seen.push(*a);
        new
    });
}

fn join(v: &[SocketAddr]) -> String {
    v.iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn cap(mut s: String) -> String {
    if s.len() > MAX_NOTE {
        let mut end = MAX_NOTE - 3;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(n: u8) -> SocketAddr {
        SocketAddr::from(([198, 18, 0, n], 7512))
    }

    #[test]
    fn every_source_is_named_in_one_event_per_reason() {
        let mut w = SyncWarnings::default();
        assert!(w.events().is_empty());
        for i in 0..20 {
            w.corrupt(i, a(12));
        }
        w.corrupt(3, a(13));
        w.lost(a(12), "x".repeat(2000), 3);
        w.lost(a(11), "connection reset", 2);
        let ev = w.events();
        assert_eq!(ev.len(), 2);
        let (r, corrupt) = &ev[0];
        assert_eq!(*r, PodReason::CorruptWeightsChunk);
        assert!(
            corrupt.starts_with("21 chunk(s) from 198.18.0.12:7512, 198.18.0.13:7512 "),
            "{corrupt}"
        );
        assert!(corrupt.contains("#0 from 198.18.0.12:7512") && corrupt.contains("and 5 more"));
        let (r, lost) = &ev[1];
        assert_eq!(*r, PodReason::WeightsSourceLost);
        // Both addresses survive even though the first source's reason is huge.
        assert!(
            lost.starts_with("2 weights source(s) given up, their chunks requeued to the others: 198.18.0.12:7512, 198.18.0.11:7512."),
            "{lost}"
        );
        assert!(lost.len() <= MAX_NOTE && lost.ends_with("..."));
    }
}
