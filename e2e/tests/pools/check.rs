//! What every scenario checks of the load it ran under.

use anyhow::Result;
use hcomm_e2e::testbed::LoadStats;

/// No request failed, none was answered with wrong, missing or mixed weights, and no
/// router reached a member before its readiness gate was True
/// ([`LoadStats::ensure_clean`]).
pub fn clean(s: &LoadStats, when: &str) -> Result<()> {
    s.ensure_clean(when).map_err(anyhow::Error::msg)
}
