//! A tenant's group names a weights source the cluster admin did not allow (issue 17,
//! point 1), end to end: applied with kubectl, placed by the operator, refused by the real
//! agent on its node before a byte is read.
//!
//! The testbed's agents allow one source root, `<testbed>/models` (the chart value
//! `agent.weights.sourceRoots`). Each attack is a one-member copy of the decode example
//! whose digest no store holds, so its member has no peer to fetch from and must import
//! the declared source — the path an attacker aims at:
//! - `/etc` (outside every root: the node's files, ServiceAccount tokens);
//! - `<root>/escape/ssl`, where `escape` is a symlink to `/etc` planted inside the root;
//! - `<root>/v1/../../..` (a `..` walk out of the root);
//! - `<root>/trap`, a directory whose model file is a FIFO (an agent that opened it
//!   would wait forever for a writer).
//!
//! Each member reports `hcomm.io/weights-synced=False`, reason `WeightsSourceRefused`, the
//! message naming the path and why, with a Warning Event; it never turns Ready; no node's
//! store holds anything of the set (no staging, no version, no manifest). The example
//! pools serve cleanly throughout, and removing each group leaves no member.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hcomm_crds::contract::{POD_WEIGHTS_SYNCED, PodReason};
use hcomm_e2e::testbed::examples::{NAMESPACE as NS, POOL_WAIT};
use hcomm_e2e::testbed::pools::condition_of;
use hcomm_e2e::testbed::{ExamplePools, PoolCopy, Testbed};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use crate::check;

/// A set no store holds, so the member cannot be served by a peer.
const NOBODYS_HEX: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// The other reasons a member's weights end in failure.
const ENDED: [&str; 5] = [
    PodReason::SyncFailed.as_str(),
    PodReason::DigestMismatch.as_str(),
    PodReason::NoWeightsSource.as_str(),
    PodReason::PeerFetchFailed.as_str(),
    PodReason::InvalidWeightsSpec.as_str(),
];

/// One attack: the group, the source it declares, and what the refusal must name.
struct Attack {
    group: &'static str,
    source: PathBuf,
    /// The path the refusal names (the source, or the name inside it that is refused).
    names: PathBuf,
    why: &'static str,
}

/// Four groups declaring sources outside the admin's root, through a symlink, through
/// `..`, and holding a FIFO: each member refused with `WeightsSourceRefused` naming the
/// path and why, a Warning Event, never Ready, nothing of the set in any node's store;
/// the pools serve cleanly.
///
/// Precondition: decode at 2 members, Ready (6 of the 10 devices free).
pub async fn a_weights_source_outside_the_admins_roots_is_refused_before_a_byte_is_read(
    pools: &mut ExamplePools,
) -> Result<()> {
    pools.decode_at(2).await?;
    let bed = &pools.bed;
    let root = bed.dir().join("models");
    let attacks = plant(&root)?;
    let digest = format!("sha256:{NOBODYS_HEX}");
    for attack in &attacks {
        bed.apply_pool_copy(&PoolCopy {
            example: "examples/decode-pool.yaml",
            name: attack.group,
            replicas: 1,
            devices_per_member: 1,
            weights_source: &attack.source,
            digest: &digest,
        })?;
        let (pod, message) = wait_refused(bed, attack.group).await?;
        let named = attack.names.display().to_string();
        ensure!(
            message.contains(&named) && message.contains(attack.why),
            "{pod}: the refusal should name {named:?} and say {:?}: {message}",
            attack.why
        );
        let event = check::warning_event(bed, &pod, PodReason::WeightsSourceRefused, |m| {
            m.contains(&named)
        })
        .await?;
        eprintln!(
            "weights source attack {}: {pod} refused: {message} (Event: {event})",
            attack.group
        );
        stores_hold_nothing_of_the_set(bed)?;
        bed.kubectl(&[
            "delete",
            &format!("hcg/{}", attack.group),
            &format!("svc/{}", attack.group),
        ])?;
        bed.wait_members(NS, attack.group, 0, POOL_WAIT).await?;
    }
    check::pools_clean(pools, "beside the weights source attacks")
}

/// Plants the symlink and the FIFO inside the admin's root; the four attacks.
fn plant(root: &Path) -> Result<Vec<Attack>> {
    let escape = root.join("escape");
    if escape.symlink_metadata().is_err() {
        std::os::unix::fs::symlink("/etc", &escape).context("plant the symlink")?;
    }
    let trap = root.join("trap");
    let fifo = trap.join("model.safetensors");
    if fifo.symlink_metadata().is_err() {
        std::fs::create_dir_all(&trap)?;
        std::fs::write(trap.join("config.json"), b"{}")?;
        let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
        ensure!(made.success(), "mkfifo {}: {made}", fifo.display());
    }
    let dotdot = root.join("v1/../../..");
    Ok(vec![
        Attack {
            group: "steal-etc",
            source: "/etc".into(),
            names: "/etc".into(),
            why: "outside the allowed source roots",
        },
        Attack {
            group: "steal-link",
            source: escape.join("ssl"),
            names: escape,
            why: "is a symlink",
        },
        Attack {
            group: "steal-dotdot",
            source: dotdot.clone(),
            names: dotdot,
            why: "a `..` component is not allowed",
        },
        Attack {
            group: "steal-fifo",
            source: trap,
            names: fifo,
            why: "is a FIFO",
        },
    ])
}

/// Waits for a member of `group` refused with `WeightsSourceRefused`: (Pod, message).
/// Fails at once if a member's weights synced or failed otherwise, or it is Ready.
async fn wait_refused(bed: &Testbed, group: &str) -> Result<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(bed.client().await?, NS);
    let selector = format!("{}={group}", hcomm_crds::contract::LABEL_GROUP);
    let t = Instant::now();
    loop {
        let members = pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        for p in &members {
            let name = p.metadata.name.clone().unwrap_or_default();
            match condition_of(p, POD_WEIGHTS_SYNCED) {
                Some((status, _, message)) if status == "True" => {
                    anyhow::bail!("{name} synced weights from a refused source: {message}")
                }
                Some((_, reason, message))
                    if reason == PodReason::WeightsSourceRefused.as_str() =>
                {
                    ensure!(
                        !hcomm_e2e::testbed::pools::is_ready(p),
                        "{name} is Ready with its source refused"
                    );
                    return Ok((name, message));
                }
                // Another verdict: the source was read (a missing root check ends in
                // DigestMismatch) or the member failed for an unrelated reason.
                Some((status, reason, message))
                    if status == "False" && ENDED.contains(&reason.as_str()) =>
                {
                    anyhow::bail!(
                        "{name} failed its weights with {reason}, not {}: {message}",
                        PodReason::WeightsSourceRefused
                    )
                }
                _ => {}
            }
        }
        ensure!(
            t.elapsed() < POOL_WAIT,
            "no {group} member refused with {} within {POOL_WAIT:?}: {:?}",
            PodReason::WeightsSourceRefused,
            members
                .iter()
                .map(|p| condition_of(p, POD_WEIGHTS_SYNCED))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// No node's store holds a version, a manifest or a staging entry of the set, nor an
/// import's staging.
fn stores_hold_nothing_of_the_set(bed: &Testbed) -> Result<()> {
    for host in bed.hosts().hosts() {
        let store = bed.weights_dir(host.index());
        for sub in ["versions", "manifests", "staging"] {
            let dir = store.join(sub);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let name = entry?.file_name().to_string_lossy().into_owned();
                ensure!(
                    !name.contains(NOBODYS_HEX) && !name.starts_with(".import-"),
                    "{} holds {name} after a refused source",
                    dir.display()
                );
            }
        }
    }
    Ok(())
}
