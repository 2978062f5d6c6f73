//! What the judgement means for the group: the `LinksHealthy` condition and the links'
//! cause of `Degraded`, with messages that name the links.

use std::fmt::Write as _;

use hcomm_crds::conditions::ConditionStatus;
use hcomm_crds::contract::reasons;
use k8s_openapi::jiff::SignedDuration;

use super::{Link, LinkReport, LinkState};

/// How many links a message lists before it says "and N more" (messages stay readable;
/// the metric carries the full count).
const LISTED: usize = 6;

impl LinkReport {
    /// The `LinksHealthy` condition: status, reason and a message naming the links (pairs,
    /// addresses, last probe time and latency or error). Worst first: a dead link, then a
    /// slow one, then a link nobody vouched for recently.
    pub fn condition(&self) -> (ConditionStatus, &'static str, String) {
        let down = self.with(|s| *s == LinkState::Down);
        let slow = self.with(|s| *s == LinkState::Slow);
        let unknown = self.with(|s| matches!(s, LinkState::Stale | LinkState::NeverProbed));
        let also = |parts: &[(usize, &str)]| {
            let extra: Vec<String> = parts
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect();
            if extra.is_empty() {
                String::new()
            } else {
                format!(" (also {})", extra.join(", "))
            }
        };
        if !down.is_empty() {
            let message = format!(
                "{} of {} link(s) down: {}{}",
                down.len(),
                self.links.len(),
                list(&down, describe),
                also(&[
                    (slow.len(), "slow"),
                    (unknown.len(), "without a recent probe")
                ])
            );
            return (ConditionStatus::False, reasons::LINK_DOWN, message);
        }
        if !slow.is_empty() {
            let message = format!(
                "{} of {} link(s) slower than {}: {}{}",
                slow.len(),
                self.links.len(),
                millis(self.slow_after),
                list(&slow, describe),
                also(&[(unknown.len(), "without a recent probe")])
            );
            return (ConditionStatus::False, reasons::LINK_DEGRADED, message);
        }
        if !unknown.is_empty() {
            let message = format!(
                "{} of {} link(s) without a probe result newer than {}s: {}",
                unknown.len(),
                self.links.len(),
                self.stale_after.as_secs(),
                list(&unknown, describe)
            );
            return (ConditionStatus::Unknown, reasons::NO_RECENT_PROBE, message);
        }
        let message = match self.links.iter().max_by_key(|l| l.latency_micros) {
            None if self.nodes.len() == 1 => format!(
                "every member in the domain is on node {}; no links between nodes to probe",
                self.nodes[0]
            ),
            None => "no members in the domain yet; no links between nodes to probe".to_owned(),
            Some(slowest) => format!(
                "all {} link(s) between {} answered; slowest {}",
                self.links.len(),
                self.nodes.join(", "),
                describe(slowest)
            ),
        };
        (ConditionStatus::True, reasons::ALL_LINKS_UP, message)
    }

    /// Why the group is `Degraded` because of its links, if it is: a dead or slow link. The
    /// message names only the links and addresses (no times or latencies), so it stays the
    /// same while the same links are bad — a changed message is a new Warning Event. Links
    /// without a recent probe do not degrade the group: nothing is known to be wrong.
    pub fn degraded(&self) -> Option<(&'static str, String)> {
        let down = self.with(|s| *s == LinkState::Down);
        if !down.is_empty() {
            let message = format!("link(s) down: {}", list(&down, pair));
            return Some((reasons::LINK_DOWN, message));
        }
        let slow = self.with(|s| *s == LinkState::Slow);
        if !slow.is_empty() {
            let message = format!(
                "link(s) slower than {}: {}",
                millis(self.slow_after),
                list(&slow, pair)
            );
            return Some((reasons::LINK_DEGRADED, message));
        }
        None
    }
}

/// `from → to (address)`.
fn pair(link: &Link) -> String {
    match &link.address {
        Some(address) => format!("{} → {} ({address})", link.from, link.to),
        None => format!("{} → {}", link.from, link.to),
    }
}

/// The pair, then what the latest result said and when.
fn describe(link: &Link) -> String {
    let mut text = pair(link);
    let at = link
        .probed_at
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    match (&link.state, at) {
        (LinkState::NeverProbed, _) | (_, None) => text.push_str(" never probed"),
        (LinkState::Down, Some(at)) => {
            let _ = write!(
                text,
                " unreachable at {at}: {}",
                link.error.as_deref().unwrap_or("no answer")
            );
        }
        (LinkState::Stale, Some(at)) => {
            let _ = write!(text, " last probed at {at}");
        }
        (LinkState::Up | LinkState::Slow, Some(at)) => match link.latency_micros {
            Some(us) => {
                let _ = write!(text, " {us} µs at {at}");
            }
            None => {
                let _ = write!(text, " answered at {at}");
            }
        },
    }
    text
}

fn list(links: &[&Link], show: impl Fn(&Link) -> String) -> String {
    let mut shown: Vec<String> = links.iter().take(LISTED).map(|l| show(l)).collect();
    if links.len() > LISTED {
        shown.push(format!("and {} more", links.len() - LISTED));
    }
    shown.join("; ")
}

fn millis(d: SignedDuration) -> String {
    format!("{} ms", d.as_millis())
}
