//! What every scenario checks of the load it ran under.

use anyhow::{Result, ensure};
use hcomm_e2e::testbed::LoadStats;

/// No request failed, none was answered with wrong, missing or mixed weights, and no
/// router reached a member before its readiness gate was True.
pub fn clean(s: &LoadStats, when: &str) -> Result<()> {
    ensure!(s.served > 0, "{when}: nothing served");
    // A `not ready` refusal means a router reached a member before its gate was True.
    ensure!(
        s.failed == 0
            && s.wrong_digest == 0
            && s.mixed_digest_members.is_empty()
            && s.refused_not_ready == 0,
        "{when}: failed={} wrong_digest={} mixed={:?} refused_not_ready={}; first failures: {:#?}",
        s.failed,
        s.wrong_digest,
        s.mixed_digest_members,
        s.refused_not_ready,
        s.first_failures
    );
    Ok(())
}
