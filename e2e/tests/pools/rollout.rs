//! Rolling a new weights version through a pool under load, and the agents' clean-up of
//! the versions and group links nothing uses any more.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::{ExamplePools, Testbed};

use crate::check;
use crate::faults::SPARE;
use crate::resources::metric;

/// A new weights version: members are replaced one at a time while the others serve, no
/// member ever answers with two versions, and every replaced member serves only the new
/// one. Afterwards the agents remove the link of every group with no member left on a
/// host, then every version no link uses: v1 leaves at least one host.
///
/// Precondition: decode at 4 members, Ready, on the examples' first version (v1). No
/// other scenario changes the version, and each runs at most once per testbed.
pub async fn a_new_weights_version_rolls_member_by_member_and_old_versions_go(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(4).await?;
    let digest = pools.digest.clone();
    // The load now accepts both versions.
    let models_v2 = pools.bed.dir().join("models/v2");
    let digest_v2 = hcomm_e2e::testbed::weights::generate(&models_v2, 64, 2)?;
    let mut both = ExamplePools::load_options("decode", &digest);
    both.expect_digests.push(digest_v2.clone());
    let rolling_load = pools.bed.start_load(&both)?;
    let first = std::mem::replace(&mut pools.decode_load, rolling_load)
        .stop()
        .await?;
    check::clean(&first, "decode before the new version")?;
    let (bed, decode_load) = (&pools.bed, &pools.decode_load);
    let before_roll = bed.members(NS, "decode").await?;
    // Read before the roll: the agents may remove v1 from a host as soon as 5 s after
    // its last member there moved to v2.
    let v1 = digest.trim_start_matches("sha256:");
    let had_v1 = hosts_holding(bed, v1);
    let t = Instant::now();
    bed.kubectl(&[
        "patch",
        "hcg/decode",
        "--type=merge",
        "-p",
        &serde_json::json!({"spec": {"weights": {
            "source": models_v2.display().to_string(),
            "version": "v2",
            "digest": digest_v2,
        }}})
        .to_string(),
    ])?;
    let deadline = Instant::now() + POOL_WAIT * 2;
    let rolled = loop {
        let members = bed.wait_pool_ready(NS, "decode", 4, POOL_WAIT).await?;
        if members
            .iter()
            .all(|m| !before_roll.iter().any(|b| b.uid == m.uid))
        {
            break members;
        }
        ensure!(Instant::now() < deadline, "not rolled: {members:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let s = decode_load
        .wait_served(&rolled, 3, Duration::from_secs(30))
        .await?;
    for m in &rolled {
        ensure!(
            s.by_pod[&m.name].digests == [digest_v2.clone()],
            "{} serves {:?}, not only the new version",
            m.name,
            s.by_pod[&m.name].digests
        );
    }
    check::clean(&s, "decode during the rolling update")?;
    eprintln!("weights roll: rolled 4 members to v2 in {:?}", t.elapsed());
    // The agents remove what nothing uses any more (grace 5 s here): the link of a group
    // with no member left on a host (scale-downs and replacements above left some), then
    // every version no link uses — v1 leaves every host where no group links it.
    let t = Instant::now();
    let (unlinked, strays) = loop {
        let unlinked = unlinked_versions(bed)?;
        let strays = links_without_members(bed).await?;
        if (unlinked.is_empty() && strays.is_empty()) || t.elapsed() > Duration::from_secs(30) {
            break (unlinked, strays);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    ensure!(
        unlinked.is_empty(),
        "versions no link uses, 30 s after the roll: {unlinked:?}"
    );
    ensure!(
        strays.is_empty(),
        "links of groups with no member on the host, 30 s after the roll: {strays:?}"
    );
    let has_v1 = hosts_holding(bed, v1);
    ensure!(
        has_v1.len() < had_v1.len(),
        "v1 removed from no host: held by {had_v1:?} before, {has_v1:?} after"
    );
    let links_removed: f64 = (0..bed.hosts().len())
        .filter_map(|i| bed.agent_metrics(i).ok())
        .filter_map(|text| metric(&text, "hcomm_agent_weights_links_removed_total"))
        .sum();
    eprintln!(
        "weights roll: v1 removed from {} host(s), {links_removed} link(s) of departed groups removed so far, nothing unused left {:?} after the roll (v1 still linked on {has_v1:?})",
        had_v1.len() - has_v1.len(),
        t.elapsed()
    );
    Ok(())
}

/// The hosts whose weight store holds version `hex`.
fn hosts_holding(bed: &Testbed, hex: &str) -> Vec<usize> {
    (0..bed.hosts().len())
        .filter(|&i| bed.weights_dir(i).join("versions").join(hex).is_dir())
        .collect()
}

/// `(host, group link directory)` of every group link in a host's store whose group has no
/// member Pod on that host.
async fn links_without_members(bed: &Testbed) -> Result<Vec<(usize, String)>> {
    let mut here = std::collections::BTreeSet::new();
    for group in ["prefill", "decode", SPARE] {
        for m in bed.members(NS, group).await? {
            here.insert((m.node, format!("{NS}_{group}")));
        }
    }
    let mut out = Vec::new();
    for i in 0..bed.hosts().len() {
        let node = format!("host-{i}");
        let groups = std::fs::read_dir(bed.weights_dir(i).join("groups"));
        for entry in groups.into_iter().flatten().flatten() {
            let link = entry.file_name().to_string_lossy().into_owned();
            if !here.contains(&(node.clone(), link.clone())) {
                out.push((i, link));
            }
        }
    }
    Ok(out)
}

/// `(host, version)` of every version in a store that no link in that store points at.
fn unlinked_versions(bed: &Testbed) -> Result<Vec<(usize, String)>> {
    let mut out = Vec::new();
    for i in 0..bed.hosts().len() {
        let root = bed.weights_dir(i);
        let mut linked = Vec::new();
        let groups = root.join("groups");
        let links = std::fs::read_dir(&groups)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("current"))
            .chain([root.join("current")]);
        for link in links {
            if let Ok(target) = std::fs::read_link(&link) {
                linked.extend(target.file_name().map(|n| n.to_string_lossy().into_owned()));
            }
        }
        for entry in std::fs::read_dir(root.join("versions"))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !linked.contains(&name) {
                out.push((i, name));
            }
        }
    }
    Ok(out)
}
