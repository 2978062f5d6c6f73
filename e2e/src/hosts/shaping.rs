//! Traffic shaping of one simulated link with `tc`.
//!
//! What is shaped: a host link is a veth pair (host end `data0`/`mgmt0` inside the
//! namespace, bridge end in the root namespace). The same qdisc tree is installed on the
//! egress of BOTH ends, so each direction is limited independently: `rate_mbit` caps
//! host→bridge and bridge→host separately, `delay_ms` is added once per direction (a
//! round trip across one shaped link gains 2 × delay; between two shaped hosts, 4 ×), and
//! `loss_pct` drops that share of packets in each direction.
//!
//! The tree is `htb` (root `1:`, one class `1:1` at the rate) with a `netem` child for
//! delay and loss. `htb` is built into nearly every kernel; `netem` is not always (some
//! micro-VM kernels lack `sch_netem`): then asking for delay or loss fails with
//! [`Error::Unsupported`] while rate limits keep working.

use super::error::{Error, Result};
use super::netns::tc;

/// Limits for one link. `Shaping::default()` means "unshaped".
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Shaping {
    /// Bandwidth cap per direction, in Mbit/s.
    pub rate_mbit: Option<u32>,
    /// Extra one-way latency per direction, in milliseconds (needs `sch_netem`).
    pub delay_ms: Option<u32>,
    /// Share of packets dropped per direction, 0.0..=100.0 (needs `sch_netem`).
    pub loss_pct: Option<f32>,
}

impl Shaping {
    /// Only a bandwidth cap.
    pub fn rate(mbit: u32) -> Self {
        Shaping {
            rate_mbit: Some(mbit),
            ..Shaping::default()
        }
    }

    /// Whether this shaping leaves the link untouched.
    pub fn is_unshaped(&self) -> bool {
        self.rate_mbit.is_none() && self.delay_ms.is_none() && self.loss_pct.is_none()
    }

    /// Refuses values `tc` would reject or misread.
    pub fn validate(&self) -> Result<()> {
        if self.rate_mbit == Some(0) {
            return Err(Error::InvalidOptions(
                "rate_mbit must be at least 1 (use cut_* to stop traffic)".into(),
            ));
        }
        if let Some(loss) = self.loss_pct
            && !(0.0..=100.0).contains(&loss)
        {
            return Err(Error::InvalidOptions(format!(
                "loss_pct {loss} is outside 0..=100"
            )));
        }
        Ok(())
    }

    fn netem_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(d) = self.delay_ms {
            args.extend(["delay".into(), format!("{d}ms")]);
        }
        if let Some(l) = self.loss_pct {
            args.extend(["loss".into(), format!("{l}%")]);
        }
        args
    }
}

/// Replaces whatever shaping `dev` (inside `netns`, or in the root namespace) had with
/// `shaping`, on that device's egress.
pub(crate) fn apply(netns: Option<&str>, dev: &str, shaping: &Shaping) -> Result<()> {
    shaping.validate()?;
    clear(netns, dev)?;
    let netem = shaping.netem_args();
    let mut netem_parent = vec!["root".to_owned()];
    if let Some(rate) = shaping.rate_mbit {
        let rate = format!("{rate}mbit");
        // Burst of ~10 ms at the rate (at least a few full-size frames) so timer
        // granularity does not eat into the configured bandwidth.
        let burst = format!(
            "{}b",
            (u64::from(shaping.rate_mbit.unwrap_or(1)) * 1250).max(15_000)
        );
        tc(
            netns,
            &[
                "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
            ],
        )?;
        tc(
            netns,
            &[
                "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", &rate,
                "ceil", &rate, "burst", &burst, "cburst", &burst, "quantum", "60000",
            ],
        )?;
        netem_parent = vec!["parent".into(), "1:1".into()];
    }
    if !netem.is_empty() {
        let mut args: Vec<&str> = vec!["qdisc", "add", "dev", dev];
        args.extend(netem_parent.iter().map(String::as_str));
        args.extend(["handle", "10:", "netem"]);
        args.extend(netem.iter().map(String::as_str));
        tc(netns, &args).map_err(|e| match e {
            Error::Command { ref stderr, .. } if stderr.contains("qdisc kind is unknown") => {
                Error::Unsupported {
                    what: "delay/loss shaping",
                    why: format!("this kernel has no sch_netem qdisc ({e})"),
                }
            }
            other => other,
        })?;
    }
    Ok(())
}

/// Removes the root qdisc (back to the device default). Absent qdiscs are fine.
pub(crate) fn clear(netns: Option<&str>, dev: &str) -> Result<()> {
    match tc(netns, &["qdisc", "del", "dev", dev, "root"]) {
        Err(Error::Command { stderr, .. })
            if stderr.contains("handle of zero")
                || stderr.contains("No such file")
                || stderr.contains("Invalid handle") =>
        {
            Ok(())
        }
        other => other.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_args_only_carry_what_was_asked() {
        assert!(Shaping::rate(50).netem_args().is_empty());
        let s = Shaping {
            delay_ms: Some(5),
            loss_pct: Some(1.5),
            ..Shaping::default()
        };
        assert_eq!(s.netem_args(), ["delay", "5ms", "loss", "1.5%"]);
    }

    #[test]
    fn validation_refuses_zero_rate_and_bad_loss() {
        assert!(Shaping::rate(0).validate().is_err());
        let lossy = Shaping {
            loss_pct: Some(101.0),
            ..Shaping::default()
        };
        assert!(lossy.validate().is_err());
        assert!(Shaping::default().is_unshaped());
    }
}
