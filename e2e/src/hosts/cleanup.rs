//! Tearing simulated hosts down: used by `Drop` of [`super::SimHosts`] and, for runs that
//! were killed before they could clean up, by [`cleanup_stale`] and [`cleanup_orphans`].
//!
//! Order matters: processes inside a namespace keep it (and its veths) alive after
//! `ip netns del`, so they are killed first; bridge-side veths are deleted explicitly
//! (deleting a namespace removes its veths only asynchronously); bridges go last.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use super::error::{Error, Result};
use super::naming::{owner_pid, run_prefix_of};
use super::netns::{delete_link, delete_netns, kill_all_in, list_links, list_netns};

/// How long processes inside a namespace get to die after SIGKILL.
const KILL_DEADLINE: Duration = Duration::from_secs(5);

/// Deletes every namespace, veth and bridge whose name starts with `prefix`, killing the
/// processes inside the namespaces first. Returns what it removed.
///
/// Pass a run prefix (`SimHosts::prefix()`) to remove one run's leftovers. Passing the
/// bare root prefix `"hcs"` removes the resources of EVERY run, live ones included; use
/// [`cleanup_orphans`] to remove only those of dead processes.
pub fn cleanup_stale(prefix: &str) -> Result<Vec<String>> {
    if prefix.is_empty() {
        return Err(Error::InvalidOptions(
            "cleanup_stale needs a non-empty prefix".into(),
        ));
    }
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    let namespaces: Vec<String> = list_netns()?
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    for ns in &namespaces {
        if let Err(e) = kill_all_in(ns, KILL_DEADLINE) {
            errors.push(e);
        }
    }
    let (bridges, veths): (Vec<String>, Vec<String>) = list_links()?
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .partition(|l| l.ends_with("bd") || l.ends_with("bm") || l.ends_with("bn"));
    for name in veths.iter().chain(&namespaces).chain(&bridges) {
        let result = if namespaces.contains(name) {
            delete_netns(name)
        } else {
            delete_link(name)
        };
        match result {
            Ok(()) => removed.push(name.clone()),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(removed)
    } else {
        Err(Error::Teardown(errors))
    }
}

/// Removes the leftovers of every run whose owning process no longer exists (the pid is
/// encoded in the run prefix). Safe to call while other runs are alive. Returns the run
/// prefixes it cleaned.
pub fn cleanup_orphans() -> Result<Vec<String>> {
    let names = list_netns()?.into_iter().chain(list_links()?);
    let dead: BTreeSet<String> = names
        .filter_map(|n| run_prefix_of(&n).map(str::to_owned))
        .filter(|p| owner_pid(p).is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()))
        .collect();
    let mut errors = Vec::new();
    for prefix in &dead {
        if let Err(e) = cleanup_stale(prefix) {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(dead.into_iter().collect())
    } else {
        Err(Error::Teardown(errors))
    }
}
